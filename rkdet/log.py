"""The progress log every command writes on stderr, and the console its reports print on: one
definition of how both look on a terminal and in a file or pipe.

Why: rich's ``Console.log`` prints the time and the caller's ``file.py:NN`` on every line, which reads
like a program's trace, not a tool's output. rkdet's log lines carry neither; ``rkdet -v CMD`` adds
the time (useful when a board run takes minutes), never a source location. Off a terminal (CI logs,
``| tee``, ``> log``) rich would pad every line to 80 columns, wrap verdicts mid-path and squeeze
tables into five-character columns: there a line is printed whole, and progress comes at most every
10 % or 10 s (`ProgressThrottle`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console

#: a step's progress log: one message per call (a command gives its console's `log`, a test a list's append)
Log = Callable[[str], None]

VERBOSE_KEY = "rkdet.verbose"  # in the root click context's meta, set by `rkdet -v`
#: the width tables are laid out in when the output is not a terminal (a file, a pipe, CI's log)
PLAIN_WIDTH = 240
#: off a terminal, a progress line at most every this share of the work or this many seconds
PROGRESS_STEP, PROGRESS_SECONDS = 0.10, 10.0


def verbose() -> bool:
    """True when the running command was started as `rkdet -v ...`."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().meta.get(VERBOSE_KEY))


class _LogConsole(Console):
    """`log` as rich draws it on a terminal; elsewhere one unpadded, unwrapped line per call."""

    def log(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        if self.is_terminal:
            super().log(*objects, **kwargs)
            return
        stamp = time.strftime("[%H:%M:%S] ") if self._log_time_enabled else ""
        self.print(stamp, *objects, sep="", soft_wrap=True, markup=kwargs.get("markup"),
                   highlight=kwargs.get("highlight", False), emoji=kwargs.get("emoji"))

    @property
    def _log_time_enabled(self) -> bool:
        return bool(self._log_render.show_time)


def _plain_width(stderr: bool) -> int | None:
    probe = Console(stderr=stderr)
    return None if probe.is_terminal else max(probe.width, PLAIN_WIDTH)


def log_console(*, timestamps: bool | None = None) -> Console:
    """A stderr console whose ``.log`` lines have no source column, and a time column only with -v."""
    return _LogConsole(stderr=True, log_path=False, log_time=verbose() if timestamps is None else timestamps,
                       width=_plain_width(True), soft_wrap=not Console(stderr=True).is_terminal)


def output_console(*, stderr: bool = False, **kwargs: Any) -> Console:
    """The console a report or table prints on: as rich draws it on a terminal; in a file or pipe,
    lines whole (no wrapping) and tables laid out at `PLAIN_WIDTH` instead of 80 columns."""
    soft_wrap = bool(kwargs.pop("soft_wrap", False)) or not Console(stderr=stderr).is_terminal
    return Console(stderr=stderr, width=_plain_width(stderr), soft_wrap=soft_wrap, **kwargs)


class ProgressThrottle:
    """Whether a progress line is due off a terminal: the first and the last, and in between at most
    every `PROGRESS_STEP` of the total or `PROGRESS_SECONDS` (whichever comes first)."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = max(int(total), 1)
        self._clock = clock
        self._last_done: int | None = None
        self._last_time = 0.0

    def due(self, done: int) -> bool:
        if done == self._last_done:
            return False
        now = self._clock()
        if (self._last_done is None or done >= self.total or now - self._last_time >= PROGRESS_SECONDS
                or done - self._last_done >= PROGRESS_STEP * self.total):
            self._last_done, self._last_time = done, now
            return True
        return False
