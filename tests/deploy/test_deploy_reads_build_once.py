"""One `rkdet deploy` reads the build's manifest.json exactly once (issue 28 "A build is loaded once").

Why: the CLI resolves the build folder into one record (rkdet.records.build.BuildRecord) and passes it
down (the flow, the preflight, the push, the judge, the diff's reference set, the self-check install),
so no step re-reads and re-judges the folder with its own reaction to a broken file. The real CLI runs
in its own process against an emulated board; every open of the manifest in that process is counted
(`os.open`, through which every bounded read goes, and `open`), whichever module opens it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_helpers import REPO, board_args

from rkdet.emulator.sshd import EmulatedBoard

COUNTING_CLI = r"""
import builtins, io, json, os, sys
target, report, args = os.path.realpath(sys.argv[1]), sys.argv[2], sys.argv[3:]
real_os_open, real_open, opened = os.open, builtins.open, []
def counted(real):
    def wrapper(file, *a, **k):
        if isinstance(file, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(file)) == target:
            opened.append(real.__name__)
        return real(file, *a, **k)
    return wrapper
os.open = counted(real_os_open)
builtins.open = io.open = counted(real_open)
from rkdet.cli import main
try:
    main(args)
finally:
    with real_open(report, "w") as fh:
        json.dump(opened, fh)
"""


def _deploy_counting(build: Path, args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`rkdet deploy ARGS` in its own process; the opens of BUILD/manifest.json it made."""
    report = cwd / "opened.json"
    proc = subprocess.run([sys.executable, "-c", COUNTING_CLI, str(build / "manifest.json"), str(report),
                           "deploy", *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000"})
    return proc, json.loads(report.read_text())


@pytest.mark.parametrize("extra", [["--install-selfcheck"], ["--core-mask", "0,1"]], ids=["selfcheck", "cells"])
def test_one_deploy_reads_the_manifest_once(board: EmulatedBoard, fast_build: Path, tmp_path: Path,
                                            extra: list[str]) -> None:
    proc, opened = _deploy_counting(fast_build, [*board_args(board), "--build", str(fast_build), "--out",
                                                 str(tmp_path / "results"), "--repeats", "1", "--warmup", "0",
                                                 "--no-pin", *extra], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SAME" in proc.stderr + proc.stdout  # the whole flow ran: preflight, push, run, pull, judge
    assert len(opened) == 1, opened


def test_the_count_sees_a_second_read(fast_build: Path, tmp_path: Path) -> None:
    """The counter itself: a command that reads the manifest twice is counted twice (so `1` above means one)."""
    script = COUNTING_CLI.replace("from rkdet.cli import main", "from rkdet.records.manifest import read_manifest\n"
                                  "main = lambda a: [read_manifest(sys.argv[1]) for _ in range(2)]")
    report = tmp_path / "opened.json"
    proc = subprocess.run([sys.executable, "-c", script, str(fast_build / "manifest.json"), str(report)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(report.read_text())) == 2
