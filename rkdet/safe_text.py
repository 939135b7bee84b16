"""Untrusted names (inventory hosts, board answers, result-set fields) shown as literal text.

A name read from a file may hold terminal escape codes or rich markup (`[bold]`); shown raw it
could rewrite the screen or restyle a table. `printable` replaces every control or format
character (C0, C1, DEL, bidi overrides: Unicode categories Cc and Cf) with `?` and bounds the length;
`for_rich` also escapes rich markup, for strings handed to a rich Console or Table.
"""

from __future__ import annotations

import unicodedata

from rich.markup import escape


def printable(text: object, limit: int = 200) -> str:
    """`text` as one printable line: control/format characters become `?`, long text ends in `…`."""
    s = str(text)
    if len(s) > limit:
        s = s[:limit] + "…"
    return "".join("?" if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in s)


def for_rich(text: object, limit: int = 200) -> str:
    """`printable(text)` with rich markup escaped: rich prints it literally."""
    return escape(printable(text, limit))
