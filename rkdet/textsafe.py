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


__all__ = ["literal", "markup_escaped", "visible"]
