"""The toolkit's own progress and ETA, read from the worker's log while a build runs.

Why: an rknn-toolkit2 `mmse` build can run for hours; the progress line must say where the toolkit is and
what it estimates is left, not sit on "building with rknn-toolkit2". The toolkit reports through tqdm
bars (`I Quantizating :  3%|▎   | 5/176 [25:00<1:46:00, 3.2s/it]`, redrawn with carriage returns); the
last complete redraw is the state. The remaining time is the toolkit's (tqdm's) estimate, said as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BAR = re.compile(r"^(?:[IWED] )?(?P<stage>[A-Za-z][\w .-]*?)\s*:\s*(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)"
                  r"\s*\[(?P<elapsed>[\d:]+)<(?P<remaining>[\d:?]+)")
TAIL_BYTES = 8192  # a redraw is ~100 bytes: the last few are enough


@dataclass(frozen=True)
class ToolkitProgress:
    """One tqdm redraw of the toolkit: which stage, how far, elapsed and the toolkit's remaining estimate."""

    stage: str
    done: int
    total: int
    percent: int
    elapsed: str
    remaining: str | None  # None: the toolkit has no estimate yet ("?")

    def line(self) -> str:
        left = f", about {self.remaining} left (the toolkit's estimate)" if self.remaining else ""
        return f"toolkit: {self.stage} {self.done}/{self.total} ({self.percent}%), {self.elapsed} elapsed{left}"


def parse(text: str) -> ToolkitProgress | None:
    """The last progress redraw in `text` (a log's tail), or None when it holds none."""
    for segment in reversed(re.split(r"[\r\n]+", _ANSI.sub("", text))):
        m = _BAR.match(segment.strip())
        if m:
            rem = m["remaining"]
            return ToolkitProgress(m["stage"].strip(), int(m["n"]), int(m["total"]), int(m["pct"]), m["elapsed"],
                                   None if "?" in rem else rem)
    return None


def read(log: Path) -> ToolkitProgress | None:
    """The last progress redraw of a log file being written (None when unreadable or without one)."""
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(size - TAIL_BYTES, 0))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    return parse(tail)
