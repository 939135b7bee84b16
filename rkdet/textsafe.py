"""Untrusted text (names and messages from a board or a result set) shown as literal text.

A result set's input/output names, a board's messages and run.json fields are data, not
presentation: printed through rich markup, `[/]` crashes the table and `[green]SAME[/green]` plus raw
escape sequences can make a DIFFERENT result look SAME. Two rules, one definition, used by every
presenter (rkdet.diff terminal report, board messages, the CLI's error line):

* `visible(text)`: every C0/C1 control character, DEL, and the Unicode bidi/line-separator controls
  become visible escapes (``\\x1b``, ``\\n``, ``\\u202e``), so nothing moves the cursor, clears a line,
  changes colours or reorders what follows;
* `literal(text, style)`: a rich `Text` of `visible(text)`, never parsed as markup.

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


def visible(text: Any) -> str:
    """`str(text)` with control characters shown as escapes; a backslash itself is left as is."""
    return _CONTROL.sub(_escape, str(text))


def literal(text: Any, style: str = "") -> Text:
    """A rich Text showing `text` literally (no markup, controls escaped), in `style`."""
    from rich.text import Text

    return Text(visible(text), style=style)


__all__ = ["literal", "visible"]
