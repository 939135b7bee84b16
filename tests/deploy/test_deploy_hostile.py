"""`rkdet deploy` against the hostile emulated board (a TEST CONTROL that lies on purpose, issue 9).

Each lie ends in exit 3 with one line naming the bad entry, within the configured timeouts; nothing
is written outside results/<board>/...; deploy.json ends in a final state; and the board's knobs are
back to their saved values (the fake tree is byte-identical to before the deploy).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bounds import HANG_MARGIN
from deploy_helpers import assert_untouched, deploy, error_line, run_folders

from rkdet.emulator import hostile
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.emulator.fake_tree import tree_digest

SFTP_TIMEOUT = 3


@pytest.fixture(scope="module")
def bad_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedBoard]:
    with EmulatedBoard("rk3588", tmp_path_factory.mktemp("hostile"), "hostile") as b:
        yield b


def _files_outside(tmp_path: Path, out: Path) -> list[str]:
    """Everything this test's deploy created under tmp_path that is not under out/<board>/..."""
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
                  if not p.is_dir() and not str(p).startswith(str(out) + "/"))


def _run(bad_board: EmulatedBoard, fast_build: Path, tmp_path: Path, modes: tuple[str, ...]):
    hostile.write_control(bad_board.board_dir, modes)
    victim = hostile.victim_path(bad_board.board_dir)
    before_victim = (victim.stat().st_ino, victim.read_bytes())
    before_tree = tree_digest(bad_board.root)
    out = tmp_path / "results"
    start = time.monotonic()
    proc = deploy(bad_board, fast_build, out, "--sftp-timeout", str(SFTP_TIMEOUT), timeout=300)
    took = time.monotonic() - start
    assert (victim.stat().st_ino, victim.read_bytes()) == before_victim
    assert _files_outside(tmp_path, out) == []
    assert_untouched(bad_board, before_tree)  # knobs restored, no process left
    return proc, took, out


@pytest.mark.parametrize(("modes", "named"), [
    (hostile.MODES, "an absolute name"),
    (("types",), "not a regular file"),
    (("huge",), "per-file cap"),
    (("stall",), "gave no answer within 3 s"),
    (("records",), "snapshots.jsonl is malformed"),
    (("runjson",), "run.json is unreadable"),
])
def test_every_lie_is_exit_3_naming_the_entry(bad_board: EmulatedBoard, fast_build: Path, tmp_path: Path,
                                              modes: tuple[str, ...], named: str) -> None:
    proc, took, out = _run(bad_board, fast_build, tmp_path, modes)
    assert proc.returncode == 3, proc.stderr[-3000:]
    line = error_line(proc)
    assert named in line and bad_board.target in line, line
    assert "\x1b" not in proc.stderr
    if modes == hostile.MODES:
        assert str(hostile.victim_path(bad_board.board_dir)) in line
    if modes == ("types",):
        assert "'outputs/fifo.npy'" in line or "'outputs/passwd.npy'" in line or "'home-link'" in line
    if modes == ("huge",):
        assert "'outputs/huge.npy'" in line and "10000000000 bytes" in line
    assert took < 60 + HANG_MARGIN  # the SFTP stalls are cut at their timeouts, not left to hang
    [folder] = run_folders(out)
    record = json.loads((folder / "deploy.json").read_text())
    assert record["status"] == "failed" and named in record["error"] and record["restored"] is True
    if modes not in (("records",), ("runjson",)):  # refused during the pull: no result folder at all
        assert not (folder / "result").exists()


def test_markup_and_escapes_from_the_board_are_shown_literally(bad_board: EmulatedBoard, fast_build: Path,
                                                               tmp_path: Path) -> None:
    proc, _, out = _run(bad_board, fast_build, tmp_path, ("markup",))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    # the clock warning names the board's devfreq node as it is, visibly: markup not applied, ESC as \x1b
    assert "clock moved" in proc.stderr, proc.stderr[-3000:]
    assert "devfreq/[green]SAME[/green]\\x1b[2J\\x1b]0;owned\\x07:" in proc.stderr.replace("\n", ""), proc.stderr[-3000:]
    [folder] = run_folders(out)
    record = json.loads((folder / "deploy.json").read_text())
    assert record["status"] == "complete"
    assert (folder / "result" / "[bold red]DIFFERENT[green].txt").is_file()  # a legal name is pulled as is
