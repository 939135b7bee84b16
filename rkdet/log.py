"""The progress log every command writes on stderr: one definition of how it looks.

Why: rich's ``Console.log`` prints the time and the caller's ``file.py:NN`` on every line, which reads
like a program's trace, not a tool's output. rkdet's log lines carry neither; ``rkdet -v CMD`` adds
the time (useful when a board run takes minutes), never a source location.
"""

from __future__ import annotations

import click
from rich.console import Console

VERBOSE_KEY = "rkdet.verbose"  # in the root click context's meta, set by `rkdet -v`


def verbose() -> bool:
    """True when the running command was started as `rkdet -v ...`."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().meta.get(VERBOSE_KEY))


def log_console(*, timestamps: bool | None = None) -> Console:
    """A stderr console whose ``.log`` lines have no source column, and a time column only with -v."""
    return Console(stderr=True, log_path=False, log_time=verbose() if timestamps is None else timestamps)
