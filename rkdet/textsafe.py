"""Untrusted text (board messages, names from result sets) made safe to show in a terminal.

Why: rich interprets `[tag]` markup and a terminal obeys escape sequences, so a name or message
that came from a board or a result set could restyle, hide or fake what rkdet prints (a DIFFERENT
verdict shown as a green SAME). Everything such text passes through `terminal_text` first.
"""

from __future__ import annotations

import re

from rich.markup import escape

# C0 controls (ESC, CR, LF, TAB, BEL...), DEL, C1 controls, and the bidi overrides that reorder a line
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(s: str) -> str:
    """`s` with control characters shown as visible `\\xNN` (`\\uNNNN`) and rich markup escaped:
    safe to pass to `Console.print` (it prints literally) on one line."""
    return escape(_UNSAFE.sub(_visible, str(s)))


__all__ = ["terminal_text"]
