"""The board scripts on the FUSE board, which has kernel semantics the plain tree lacks.

What differs from the plain tree: writing "<unsupported>" to scaling_setspeed or the full THP line
is EINVAL (restore falls back and verifies by reading back); ``userspace/set_freq`` only exists
while the governor is userspace; max_freq reads the effective limit, so a thermal cap shows there
and must not be restored as a user limit. Skips where FUSE cannot work, except under CI=true.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from bs_helpers import SOCS

from rkdet.emulator.mount import EmulatedSysfs, emulated_sysfs, fuse_unavailable_reason
from rkdet.boardinfo.scripts import parse_pin, parse_restore, run_script_locally, run_script_locally_full
from rkdet.emulator.socs import PROFILES

TIMEOUT_S = 30
NPU = "sys/class/devfreq/fdab0000.npu"
GPU = "sys/class/devfreq/fb000000.gpu"


@pytest.fixture
def fuse_board(tmp_path: Path) -> Iterator[Callable[[str], EmulatedSysfs]]:
    reason = fuse_unavailable_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but FUSE is unavailable: {reason}")
        pytest.skip(f"FUSE unavailable: {reason}")
    stack = contextlib.ExitStack()
    boards: list[EmulatedSysfs] = []

    def make(soc: str) -> EmulatedSysfs:
        board = stack.enter_context(emulated_sysfs(soc, tmp_path / soc, backend="fuse"))
        boards.append(board)
        return board

    with stack:
        yield make
    for board in boards:
        assert not board.daemon_errors(), board.daemon_errors()


def digest(root: Path) -> dict[str, str]:
    """tree_digest in a child process: a hung FUSE daemon must not hang the test run."""
    code = "import json,sys; from rkdet.emulator.fake_tree import tree_digest; print(json.dumps(tree_digest(sys.argv[1])))"
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=True)
    return json.loads(done.stdout)


def sh(script: str, root: Path) -> str:
    done = subprocess.run(["sh", "-c", script], env={"PATH": os.environ["PATH"], "R": str(root)},
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("soc", SOCS)
def test_pin_restore_with_kernel_semantics(soc: str, fuse_board, tmp_path: Path) -> None:
    board = fuse_board(soc)
    before = digest(board.root)
    env = {"RKDET_CPU_GOVERNOR": "userspace", "RKDET_THP": "never", "RKDET_CPUIDLE_DEEP": "disable"}
    run = run_script_locally_full("pin", board.root, tmp_path / "state", shell="busybox sh", env=env)
    rep = parse_pin(run.records)
    assert run.returncode == 0 and rep.ok and not rep.by_status("failed"), run.stdout
    for node in PROFILES[soc].devfreq:  # the kernel model really runs at the pinned clock
        knob = rep.knob(f"devfreq/{node.name}")
        assert knob.detail["cur_hz"] == max(node.frequencies_hz) and knob.warning is None
    run = run_script_locally_full("restore", board.root, tmp_path / "state", shell="busybox sh")
    assert run.returncode == 0 and parse_restore(run.records).ok, run.stdout
    assert digest(board.root) == before


def test_thermal_cap_is_reported_and_not_left_as_a_user_limit(fuse_board, tmp_path: Path) -> None:
    board = fuse_board("rk3588")
    board.control.force_temperature(90000)  # above the 85 C trip: NPU and GPU held at 800 MHz
    hot = digest(board.root)
    run = run_script_locally_full("pin", board.root, tmp_path / "state", shell="dash")
    rep = parse_pin(run.records)
    assert run.returncode == 1 and rep.status == "partial"
    npu = rep.knob("devfreq/fdab0000.npu")
    assert npu.status == "failed" and npu.wanted == "1000000000" and npu.detail["cur_hz"] == 800000000
    assert npu.actual == "800000000..800000000" and "thermal" in (npu.warning or "")
    assert run_script_locally("restore", board.root, tmp_path / "state", shell="dash")[0] == 0
    assert digest(board.root) == hot
    board.control.force_temperature(None)  # cooled down: the original "no user limit" is back
    assert sh(f'cat "$R/{NPU}/max_freq"', board.root) == "1000000000"


def test_userspace_governor_and_set_freq_come_back(fuse_board, tmp_path: Path) -> None:
    board = fuse_board("rk3588")
    sh(f'echo userspace > "$R/{GPU}/governor"; echo 500000000 > "$R/{GPU}/userspace/set_freq"', board.root)
    before = digest(board.root)
    assert run_script_locally("pin", board.root, tmp_path / "state", shell="bash --posix")[0] == 0
    assert sh(f'cat "$R/{GPU}/governor"; test -e "$R/{GPU}/userspace/set_freq" || echo gone', board.root) \
        == "performance\ngone"
    assert run_script_locally("restore", board.root, tmp_path / "state", shell="bash --posix")[0] == 0
    assert sh(f'cat "$R/{GPU}/governor" "$R/{GPU}/userspace/set_freq" "$R/{GPU}/cur_freq"', board.root) \
        == "userspace\n500000000\n500000000"
    assert digest(board.root) == before


def test_rk3568_listed_frequency_on_the_kernel_model(fuse_board, tmp_path: Path) -> None:
    board = fuse_board("rk3568")
    rc, records = run_script_locally("pin", board.root, tmp_path / "state", env={"RKDET_NPU_FREQ": "297000000"})
    knob = parse_pin(records).knob("devfreq/fde40000.npu")
    assert rc == 0 and knob.status == "set" and knob.detail["cur_hz"] == 297000000
    assert run_script_locally("restore", board.root, tmp_path / "state")[0] == 0


def _stores(board: EmulatedSysfs) -> list[str]:
    """The attributes written so far, from the daemon's store log."""
    text = board.log_path.read_text(errors="replace") if board.log_path else ""
    return [line.split(" store ", 1)[1].split(" ", 1)[0] for line in text.splitlines() if " store " in line]


def test_restore_while_still_capped_is_restored_under_the_cap(fuse_board, tmp_path: Path) -> None:
    board = fuse_board("rk3588")
    before = digest(board.root)
    assert run_script_locally("pin", board.root, tmp_path / "state", shell="busybox sh")[0] == 0  # a cool pin
    board.control.force_temperature(90000)  # the run heated the board: NPU and GPU held at 800 MHz
    run = run_script_locally_full("restore", board.root, tmp_path / "state", shell="busybox sh")
    rep = parse_restore(run.records)
    assert run.returncode == 0 and rep.ok, run.stdout  # not a false "NOT restored"
    knob = next(k for k in rep.knobs if k.knob == "sys/class/devfreq/fb000000.gpu/max_freq")
    assert (knob.status, knob.wanted, knob.actual) == ("restored", "1000000000", "800000000")
    assert knob.detail["note"] == "restored (thermal cap active: reads 800000000)"
    assert knob.detail["thermal_cap"]["cur_state"] == 2
    # the NPU has no cooling device (the system monitor caps it): max_freq written 1 GHz reads 800 MHz
    for name in ("max_freq", "cur_freq"):
        knob = next(k for k in rep.knobs if k.knob == f"sys/class/devfreq/fdab0000.npu/{name}")
        assert (knob.status, knob.wanted, knob.actual) == ("restored", "1000000000", "800000000")
        assert knob.detail["thermal_cap"] == {"cooling_device": None, "cap_hz": 800000000}
    assert "3 held lower by an active thermal cap" in (rep.note or "")
    assert not (tmp_path / "state" / "pin.state").exists()
    board.control.force_temperature(None)  # cooled: exactly the board before the pin
    assert digest(board.root) == before
    assert not [s for s in _stores(board) if "cooling_device" in s]  # pin and restore never write cur_state


def test_pin_while_capped_then_cooled_restores_no_user_limit(fuse_board, tmp_path: Path) -> None:
    board = fuse_board("rk3588")
    before = digest(board.root)
    board.control.force_temperature(95000)
    run = run_script_locally_full("pin", board.root, tmp_path / "state", shell="bash --posix")
    pin = parse_pin(run.records)
    assert run.returncode == 1 and pin.knob("devfreq/fb000000.gpu").detail["cooling_state"] == 2
    # no NPU cooling device: pin told the system monitor's cap by max_freq := top not moving
    assert pin.knob("devfreq/fdab0000.npu").detail["thermal_cap_at_save"] == {
        "cooling_device": None, "detected_by": "max_freq did not move when set to the top OPP",
        "max_freq_read": 800000000, "max_freq_saved": 1000000000}
    board.control.force_temperature(None)
    run = run_script_locally_full("restore", board.root, tmp_path / "state", shell="bash --posix")
    assert run.returncode == 0 and parse_restore(run.records).ok, run.stdout
    assert digest(board.root) == before  # max_freq reads 1 GHz again: no 800 MHz user limit left behind
    assert sh(f'cat "$R/{NPU}/max_freq" "$R/{GPU}/max_freq"', board.root) == "1000000000\n1000000000"
    assert not [s for s in _stores(board) if "cooling_device" in s]
