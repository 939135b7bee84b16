"""Deploy on the FUSE-backed board (kernel sysfs semantics: root-only knobs, so the sudo login), and
a thermal cap forced through the emulator's control dir: seen by pin's read-back (pin.json warnings)
and by the runner's snapshots mid-run (deploy warnings), with every knob restored afterwards."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_helpers import REPO, assert_untouched, deploy, deploy_args, run_folders

from rkdet.deploy.deploy_state import load_record
from rkdet.emulator.mount import fuse_unavailable_reason
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.emulator.fake_tree import tree_digest
from rkdet.errors import InputError

HOT = 95000  # millicelsius: above the RK3588 trip (85 C), caps NPU and GPU at 800 MHz
NPU_TOP, NPU_CAP = 1_000_000_000, 800_000_000


def _fuse_board(workdir: Path) -> Iterator[EmulatedBoard]:
    reason = fuse_unavailable_reason()
    if reason:  # this project's CI has FUSE (tests/fuse fails loudly there when it does not)
        pytest.skip(f"FUSE unavailable: {reason}")
    with EmulatedBoard("rk3588", workdir, variant="sudo", sysfs="fuse") as b:
        assert b.sysfs is not None and b.sysfs.backend == "fuse"
        yield b
        assert not b.sysfs.daemon_errors()


@pytest.fixture(scope="module")
def fuse_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedBoard]:
    """A FUSE RK3588 board with a sudo login, shared by the module."""
    yield from _fuse_board(tmp_path_factory.mktemp("fuse-board"))


@pytest.fixture
def own_fuse_board(tmp_path: Path) -> Iterator[EmulatedBoard]:
    """A FUSE board of the test's own (the test may leave it changed)."""
    yield from _fuse_board(tmp_path / "fuse-board")


def _sudo(board: EmulatedBoard) -> list[str]:
    return ["--sudo", "--state-dir", f"{board.home}/pin-state"]  # never the host's /run/rkdet


def _npu_clocks(snapshot: dict) -> int | None:
    return next((v["cur_hz"] for k, v in snapshot.get("devfreq", {}).items() if k.endswith(".npu")), None)


def _remote_snapshots(out: Path) -> list[dict]:
    """The runner's snapshots as written on the board so far (the board's disk is this host's)."""
    folders = run_folders(out)
    if not folders:
        return []
    try:
        remote = (load_record(folders[-1]).remote or {})["result"]
        text = Path(remote, "snapshots.jsonl").read_text()
    except (OSError, KeyError, InputError):
        return []
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


# Long enough for a test to act on the run while it goes on: configs/yolov8.yaml snapshots every 5 runs, so the
# run's first in-run snapshot comes at run 5 (the one these tests wait for) and 10 more runs still follow it.
RUN_LONG_ENOUGH = 15


def _run_with(board: EmulatedBoard, build: Path, out: Path, log: Path, repeats: int) -> subprocess.Popen:
    with open(log, "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "rkdet.cli",
                                 *deploy_args(board, build, out, *_sudo(board), repeats=repeats)],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)


def _until(predicate, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"deploy ended before the test could act: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)


@pytest.mark.slow
def test_fuse_board_happy_path(fuse_board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    before = tree_digest(fuse_board.root)
    out = tmp_path / "r"
    proc = deploy(fuse_board, fast_build, out, *_sudo(fuse_board))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SAME (bitwise)" in proc.stderr
    assert_untouched(fuse_board, before)
    [folder] = run_folders(out)
    record = json.loads((folder / "deploy.json").read_text())
    assert record["restored"] is True and record["warnings"] == []  # a kernel-like board reads back as pinned
    shots = [json.loads(line) for line in (folder / "result" / "snapshots.jsonl").read_text().splitlines()]
    assert {_npu_clocks(s) for s in shots} == {NPU_TOP}  # the pinned NPU really ran at its top OPP


@pytest.mark.slow
def test_thermal_cap_before_pin_shows_in_pin_warnings(own_fuse_board: EmulatedBoard, fast_build: Path,
                                                      tmp_path: Path) -> None:
    """Pin while hot, cool during the run: the cap shows in the warnings, and afterwards the board is
    byte-identical to before (no capped max_freq left behind as a user limit)."""
    fuse_board = own_fuse_board
    before = tree_digest(fuse_board.root)
    out, log = tmp_path / "r", tmp_path / "deploy.log"
    control = fuse_board.sysfs.control
    control.force_temperature(HOT)
    try:
        proc = _run_with(fuse_board, fast_build, out, log, repeats=RUN_LONG_ENOUGH)
        try:  # cool down once the run is under way, so restore can read its values back
            _until(lambda: len(_remote_snapshots(out)) >= 2, proc, log)
        finally:
            control.force_temperature(None)
        proc.wait(timeout=180)
    finally:
        control.force_temperature(None)
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    [folder] = run_folders(out)
    pin = [r for r in json.loads((folder / "pin.json").read_text())["records"] if r.get("script") == "pin"]
    npu = [r for r in pin if r.get("record") == "knob" and r.get("knob", "").endswith(".npu") and r.get("warning")]
    assert npu and f"cur_freq {NPU_CAP} Hz differs from pinned {NPU_TOP} Hz" in npu[0]["warning"], pin
    record = json.loads((folder / "deploy.json").read_text())
    assert any(".npu" in w and "thermal limit" in w for w in record["warnings"]), record["warnings"]
    assert any(".npu" in w and f"{NPU_CAP} -> {NPU_TOP} Hz" in w for w in record["warnings"]), record["warnings"]
    assert "thermal limit" in " ".join(text.split())  # and the user saw it
    # pin told the cap from a user limit (RK3588's NPU has no cooling device: max_freq set to the top OPP
    # did not move) and saved "no user limit" (the top OPP) rather than the capped 800 MHz, and said so
    [state] = [r for r in pin if r.get("record") == "state"]
    assert "fdab0000.npu" in state["thermal_capped"], state
    at_save = npu[0]["thermal_cap_at_save"]
    assert (at_save["max_freq_read"], at_save["max_freq_saved"]) == (NPU_CAP, NPU_TOP), at_save
    restore = [r for r in json.loads((folder / "pin.json").read_text())["records"]
               if r.get("script") == "restore" and r.get("knob", "").endswith("fdab0000.npu/max_freq")]
    assert [r["wanted"] for r in restore] == [str(NPU_TOP)], restore
    assert_untouched(fuse_board, before)


@pytest.mark.slow
def test_thermal_cap_during_the_run_shows_in_the_warnings(fuse_board: EmulatedBoard, fast_build: Path,
                                                          tmp_path: Path) -> None:
    before = tree_digest(fuse_board.root)
    out, log = tmp_path / "r", tmp_path / "deploy.log"
    control = fuse_board.sysfs.control
    proc = _run_with(fuse_board, fast_build, out, log, repeats=RUN_LONG_ENOUGH)
    try:
        _until(lambda: re.search(r"inference [1-9]", log.read_text()) is not None, proc, log)
        control.force_temperature(HOT)
        try:  # hold the cap until a snapshot has seen it, then cool down before the run ends
            _until(lambda: NPU_CAP in {_npu_clocks(s) for s in _remote_snapshots(out)}, proc, log)
        finally:
            control.force_temperature(None)
        proc.wait(timeout=180)
    finally:
        control.force_temperature(None)
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "SAME (bitwise)" in text  # a slower clock changes latency, not the emulated outputs
    [folder] = run_folders(out)
    record = json.loads((folder / "deploy.json").read_text())
    moved = [w for w in record["warnings"] if ".npu" in w and "clock moved during the run" in w]
    assert moved and f"{NPU_TOP} -> {NPU_CAP} Hz" in moved[0] and "hottest zone 95 C" in moved[0], record["warnings"]
    assert "clock moved during the run" in " ".join(text.split())
    assert not any("thermal limit" in w for w in record["warnings"])  # pin itself saw a cool board
    assert_untouched(fuse_board, before)
