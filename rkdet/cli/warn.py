"""How every command shows a warning: `warning: <text>` on the log console (stderr), the text shown literally
(rkdet.textsafe: a board's file name or error text reaches the terminal as text, never as escape codes).

Why one definition: deploy printed its warnings one way and the other commands that pull (`rkdet audit pull`,
`rkdet layers --board`) not at all; what a transfer survived (rkdet.deploy.pulled) now reads the same in each.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.text import Text

from rkdet.textsafe import literal


def say_warnings(console: Console, warnings: Iterable[str]) -> None:
    """Each warning as one `warning: ...` line."""
    for warning in warnings:
        console.print(Text.assemble(("warning", "yellow"), ": ", literal(warning)))


__all__ = ["say_warnings"]
