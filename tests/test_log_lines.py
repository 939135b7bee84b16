"""On a terminal, rkdet's progress log reads like a tool's: no `file.py:NN` column, the time only with -v.

Why a pseudo-terminal: rich lays log lines out differently when stderr is a terminal (that is where the
source column and the time showed), so the command runs as a user would see it.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "convert"))
from tiny_models import conv_model, image_folder, write_config  # noqa: E402

pytestmark = pytest.mark.slow

# CSI sequences, and OSC ones (rich draws the source column as OSC 8 hyperlinks) ended by BEL or ST
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
SOURCE_COLUMN = re.compile(r"\b[\w/]+\.py:\d+\b")
CLOCK = re.compile(r"\b\d\d:\d\d:\d\d\b")


def run_on_a_terminal(argv: list[str], cwd: Path, timeout: float = 600) -> tuple[int, list[str]]:
    """Run argv with stderr on a 160-column pseudo-terminal; return its exit code and the terminal's lines."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=slave, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:  # a full pty buffer would block the command
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        os.close(master)
    text = ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace"))
    lines = [part.strip() for line in text.splitlines() for part in line.split("\r") if part.strip()]
    return rc, lines


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    return write_config(root / "tiny.yaml", conv_model(root / "tiny.onnx"), image_folder(root / "cal", 4, seed=1),
                        image_folder(root / "gold", 1, seed=2))


PHRASES = ("checking the ONNX model", "building with rknn-toolkit2")
SPINNER = re.compile("^[\u2800-\u28ff] ")
CLOCK_BEFORE = re.compile(r"\[?\d\d:\d\d:\d\d\]? ?$")


def _log_lines(lines: list[str]) -> list[str]:
    """The log lines, not the status spinner's (which shows the same message after a braille frame).
    A log line may land right behind a spinner frame on the same terminal line (no newline between
    them, depending on timing): then the log line is the second copy of the message, with its time."""
    wanted = []
    for ln in lines:
        for phrase in PHRASES:
            starts = [m.start() for m in re.finditer(re.escape(phrase), ln)]
            if not starts:
                continue
            if SPINNER.match(ln):
                if len(starts) < 2:
                    break  # the spinner's own frame
                clock = CLOCK_BEFORE.search(ln[:starts[1]])
                wanted.append(ln[clock.start() if clock else starts[1]:])
            else:
                wanted.append(ln)
            break
    assert len(wanted) >= 2, lines[-40:]
    return wanted


def test_log_lines_have_no_source_column_and_no_time(tiny_config: Path, tmp_path: Path) -> None:
    rc, lines = run_on_a_terminal([sys.executable, "-m", "rkdet.cli", "convert", "--config", str(tiny_config),
                                   "--out", str(tmp_path / "out")], tmp_path)
    assert rc == 0, lines[-40:]
    for line in _log_lines(lines):
        assert not SOURCE_COLUMN.search(line), line
        assert not CLOCK.search(line), line
    assert not any(SOURCE_COLUMN.search(ln) for ln in lines), [ln for ln in lines if SOURCE_COLUMN.search(ln)]


def test_verbose_adds_the_time_but_no_source_column(tiny_config: Path, tmp_path: Path) -> None:
    rc, lines = run_on_a_terminal([sys.executable, "-m", "rkdet.cli", "-v", "convert", "--config", str(tiny_config),
                                   "--out", str(tmp_path / "out")], tmp_path)
    assert rc == 0, lines[-40:]
    logged = _log_lines(lines)
    assert CLOCK.match(logged[0].lstrip("[")), logged  # rich leaves the time blank when the second repeats
    assert not any(SOURCE_COLUMN.search(ln) for ln in lines), [ln for ln in lines if SOURCE_COLUMN.search(ln)]
