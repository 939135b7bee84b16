"""`rkdet diff RESULTS BUILD` refuses a build folder whose manifest.json is missing, unreadable, not a
regular file or invalid: one line naming the file, exit 2 (issue 28). Before, such a build judged as
`SAME (bitwise)`, exit 0, so a build whose manifest recorded a failed gate passed for a good one once
its manifest was removed or replaced by a FIFO."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from diff_helpers import DEFAULT_NAMES, build_manifest, default_outputs, repeated_set

ROOT = Path(__file__).resolve().parents[2]


def _case(tmp_path: Path) -> tuple[Path, Path]:
    """A board result set and a build folder (golden/simulator) whose outputs are bit-identical."""
    arrays = {"page": default_outputs(3)}
    build = build_manifest(tmp_path / "build" / "doc-rk3588")
    repeated_set(build / "golden" / "simulator", arrays, 1, DEFAULT_NAMES, backend="rknn-simulator").close()
    board = repeated_set(tmp_path / "board", arrays, 3, DEFAULT_NAMES, backend="rknnlite").close()
    return board, build


def _diff(*args: Path) -> subprocess.CompletedProcess[str]:
    """The real command in its own process (a FIFO that blocked would fail the timeout, not hang the suite)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "rkdet.cli", "diff", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env, cwd=args[0].parent)


def test_a_build_with_a_good_manifest_is_judged(tmp_path: Path) -> None:
    board, build = _case(tmp_path)
    res = _diff(board, build)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SAME" in res.stdout


@pytest.mark.parametrize("kind", ["missing", "brace", "fifo", "dangling", "list", "no-fingerprint"])
@pytest.mark.parametrize("target", ["build", "golden-set"])
def test_a_build_whose_manifest_cannot_be_read_is_refused(tmp_path: Path, kind: str, target: str) -> None:
    board, build = _case(tmp_path)
    manifest = build / "manifest.json"
    manifest.unlink()
    if kind == "brace":
        manifest.write_text("{")
    elif kind == "fifo":
        os.mkfifo(manifest)
    elif kind == "dangling":
        manifest.symlink_to(tmp_path / "nowhere.json")
    elif kind == "list":
        manifest.write_text("[1, 2]")
    elif kind == "no-fingerprint":
        manifest.write_text('{"platform": "rk3588"}')
    res = _diff(board, build if target == "build" else build / "golden" / "simulator")
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert "SAME" not in out and "Traceback" not in out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    assert "manifest.json" in lines[0], out
