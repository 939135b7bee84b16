"""Off a terminal (CI logs, `| tee`, `> log`), rkdet's lines are whole and its progress is sparse.

Why: rich lays text out for an 80-column terminal when it has none: it padded every log line to 80
columns, wrapped verdicts mid-path and squeezed tables into five-character columns, and a deploy
wrote one `inference N/80` line per poll. Here the consoles are driven into a pipe, as CI has them.
"""

from __future__ import annotations

import io
import subprocess
import sys

from rich.table import Table

from rkdet.log import PROGRESS_SECONDS, ProgressThrottle, log_console, output_console

LONG = "agrees with the reference (onnx-fp32): " + "/a-rather-deep/workstation/path" * 8 + "/golden/onnx-fp32"


def test_progress_off_a_terminal_is_at_most_every_tenth_or_ten_seconds() -> None:
    now = [0.0]
    throttle = ProgressThrottle(80, clock=lambda: now[0])
    shown = [done for done in range(81) if throttle.due(done)]
    assert shown[0] == 0 and shown[-1] == 80
    assert all(b - a >= 8 for a, b in zip(shown, shown[1:-1]))  # 10 % of 80 between lines
    assert len(shown) <= 12
    slow = ProgressThrottle(1000, clock=lambda: now[0])
    assert slow.due(0)
    now[0] += PROGRESS_SECONDS - 0.1
    assert not slow.due(1)  # neither 10 % nor 10 s yet
    now[0] += 0.2
    assert slow.due(2)  # 10 s passed
    assert not slow.due(2)  # the same count twice is one line


def _in_a_pipe(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def test_log_lines_off_a_terminal_are_whole_and_unpadded() -> None:
    out = _in_a_pipe(f"from rkdet.log import log_console\nlog_console().log({LONG!r})\nlog_console().log('short')")
    assert out.splitlines() == [LONG, "short"]


def test_tables_off_a_terminal_keep_names_whole() -> None:
    code = ("from rich.table import Table\nfrom rkdet.log import output_console\n"
            "t = Table()\n"
            "[t.add_column(c) for c in ('set', 'vs', 'input', 'output', 'distinct/runs', 'max ULP', 'max abs', "
            "'cosine', 'rel L2', 'KL', 'direction', 'decision', 'status')]\n"
            "t.add_row('result', 'onnx-fp32', 'page-0001-with-a-long-name', 'output0:boxes', '1/80', '0', '0', "
            "'1.000000', '0', '0', 'none', 'same', 'within')\n"
            "output_console().print(t)\n"
            f"output_console().print({LONG!r})\n")
    out = _in_a_pipe(code)
    assert "page-0001-with-a-long-name" in out and "output0:boxes" in out  # not split over lines
    assert LONG in out.splitlines()


def test_a_terminal_console_is_left_as_rich_draws_it() -> None:
    buffer = io.StringIO()
    console = log_console()
    assert not console.is_terminal  # pytest captures: the plain path
    table_console = output_console(file=buffer)
    table = Table("x")
    table.add_row("y")
    table_console.print(table)
    assert "y" in buffer.getvalue()
