"""Report paths (issue 9 item 5) and the one atomic writer (issue 10): write THROUGH /dev/null, /dev/stdout
and FIFOs, through a symlink to its target, atomically onto a regular file, exit 2 for a directory."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from diff_helpers import repeated_set

from rkdet.cli import main
from rkdet.onboard.atomic import write_atomic

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def result_set(tmp_path: Path) -> Path:
    return repeated_set(tmp_path / "s", {"p": [np.arange(16, dtype=np.float32)]}, 3, ["out"]).close()


def _diff(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["diff", *args])
    assert isinstance(result.exception, (SystemExit, type(None))), repr(result.exception)
    return result.exit_code, result.output


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_regular_file_is_replaced_atomically(tmp_path: Path, result_set: Path) -> None:
    out = tmp_path / "r" / "report.json"
    out.parent.mkdir()
    out.write_text("old")
    os.chmod(out, 0o640)
    code, _ = _diff(str(result_set), "--json-out", str(out))
    assert code == 0 and json.loads(out.read_text())["same"] is True
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and _leftovers(out.parent) == []


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    out = tmp_path / "keep.json"
    out.write_text("old")

    def boom(handle) -> None:
        handle.write(b"half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        write_atomic(str(out), boom)
    assert out.read_text() == "old" and _leftovers(tmp_path) == []


def test_dev_null_stays_a_character_device(result_set: Path) -> None:
    code, _ = _diff(str(result_set), "--json-out", "/dev/null", "--html", "/dev/null")
    assert code == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_fifo_is_written_through(tmp_path: Path, result_set: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, _ = _diff(str(result_set), "--json-out", str(fifo))
    reader.join(30)
    assert code == 0 and json.loads(got[0])["schema"] == "rkdet.diff/3"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and _leftovers(tmp_path) == []


def test_symlink_is_written_through_to_its_target(tmp_path: Path, result_set: Path) -> None:
    target = tmp_path / "real" / "report.html"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "real" / "new.json")
    code, _ = _diff(str(result_set), "--html", str(link), "--json-out", str(dangling))
    assert code == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert dangling.is_symlink() and json.loads((tmp_path / "real" / "new.json").read_text())["same"] is True
    assert _leftovers(tmp_path / "real") == []


@pytest.mark.parametrize("option", ["--json-out", "--html"])
def test_directory_is_one_line_exit_2(tmp_path: Path, result_set: Path, option: str) -> None:
    code, out = _diff(str(result_set), option, str(tmp_path))
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("rkdet: ") and str(tmp_path) in lines[0]
    with pytest.raises(IsADirectoryError):
        write_atomic(str(tmp_path), b"x")


def test_dev_stdout_pipe_and_redirected_file(tmp_path: Path, result_set: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "rkdet.cli", "diff", str(result_set), "--json-out", "/dev/stdout"]
    piped = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert piped.returncode == 0 and '"schema": "rkdet.diff/3"' in piped.stdout and "SAME" in piped.stdout
    redirected = tmp_path / "stdout.txt"
    with redirected.open("w") as handle:
        proc = subprocess.run(cmd, stdout=handle, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    text = redirected.read_text()
    # the file the shell opened is written through (same inode), and the table printed after it is kept
    assert proc.returncode == 0 and '"schema": "rkdet.diff/3"' in text and "tolerance: bitwise" in text
    assert text.index('"schema"') < text.index("tolerance: bitwise")
    assert _leftovers(tmp_path) == []
