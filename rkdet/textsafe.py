"""Untrusted text (names and messages from a board or a result set) shown as literal text.

A result set's input/output names, a board's messages and run.json fields are data, not
presentation: printed through rich markup, `[/]` crashes the table and `[green]SAME[/green]` plus raw
escape sequences can make a DIFFERENT result look SAME. Two rules, one definition, used by every
presenter (rkdet.diff terminal report, board messages, the CLI's error line):

* `visible(text)`: every C0/C1 control character, DEL, and the Unicode bidi/line-separator controls
  become visible escapes (``\\x1b``, ``\\n``, ``\\u202e``), so nothing moves the cursor, clears a line,
  changes colours or reorders what follows;
* `literal(text, style)`: a rich `Text` of `visible(text)`, never parsed as markup;
* `markup_escaped(text)`: `visible(text)` with rich markup escaped, for a string that is placed
  inside markup of ours (a table cell or a line with our own styling).

`plain_value(value)` is how a *value* reads in a report (terminal, HTML, JUnit, a message): "not set" for
None or an empty string, "yes"/"no" for a bool, a list as `4, 5` ("none" when empty), a string bare (no
repr quotes): a reader should never see `None`, `True`, `[]` or `'emulated'`. Every presenter renders
settings, flags and optional numbers through it.

`visible` and the others take an optional `limit`: longer text is cut and ends in `…`, so a name of
megabytes cannot flood a terminal or a table.

Stdlib only at import (rich is imported by `literal` when called), so any module may import it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

# C0 controls, DEL, C1 controls; bidi embeddings/overrides/isolates and marks; line/paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: Any, limit: int | None = None) -> str:
    """`str(text)` with control characters shown as escapes (a backslash itself is left as is), cut
    to `limit` characters (then ending in `…`) when given."""
    s = str(text)
    if limit is not None and len(s) > limit:
        s = s[:limit] + "…"
    return _CONTROL.sub(_escape, s)


def literal(text: Any, style: str = "", limit: int | None = None) -> Text:
    """A rich Text showing `text` literally (no markup, controls escaped), in `style`."""
    from rich.text import Text

    return Text(visible(text, limit), style=style)


def markup_escaped(text: Any, limit: int | None = None) -> str:
    """`visible(text)` with rich markup escaped: safe inside a markup string of ours."""
    from rich.markup import escape

    return escape(visible(text, limit))


def html_text(text: Any, limit: int | None = None, quote: bool = True) -> str:
    """`visible(text)` HTML-escaped: for the HTML reports. Escaping alone keeps a raw ESC, BEL or U+202E
    in the page (it reorders what a reader sees); here they become visible escapes first."""
    import html

    return html.escape(visible(text, limit), quote=quote)


def xml_text(text: Any, limit: int | None = None) -> str:
    """`visible(text)` for an XML attribute or text node (JUnit `classname`, `name`, messages): the
    serializer escapes markup; the controls and bidi characters are already gone."""
    return visible(text, limit)


def plot_label(text: Any, limit: int | None = 80) -> str:
    """`visible(text)` as a matplotlib label: printable ASCII (the bundled font has every glyph, so no
    "Glyph missing" warning on stderr) and `$` escaped (no mathtext parse of a board's names)."""
    return visible(text, limit).encode("ascii", "backslashreplace").decode("ascii").replace("$", r"\$")


NOT_SET = "not set"


def plain_value(value: Any, limit: int | None = None) -> str:
    """`value` as report text, never a Python spelling: None or "" -> "not set", True/False -> "yes"/"no",
    a list, tuple or set -> its items joined by ", " ("none" when empty), a mapping -> "key value" pairs,
    a number as `str` gives it (a NumPy scalar as the Python number), a string as it is; then `visible`."""
    return visible(_plain(value), limit)


def _plain(value: Any) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        return NOT_SET
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # a NumPy scalar: its Python number
        return _plain(value.item())
    if isinstance(value, dict):
        return ", ".join(f"{_plain(k)} {_plain(v)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return ", ".join(_plain(v) for v in items) or "none"
    return str(value)


__all__ = ["NOT_SET", "html_text", "literal", "markup_escaped", "plain_value", "plot_label", "visible", "xml_text"]
