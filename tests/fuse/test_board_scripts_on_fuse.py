"""board_scripts/pin.sh and restore.sh against the kernel-semantics board (not plain files).

On the plain tree every write "succeeds" and reads back, so a pin read-back and a restore prove
nothing there; here a thermal cap really lowers the clock and set_freq really comes and goes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from fuse_helpers import CLIENT_TIMEOUT_S, NPU, digest, ops, read, sh

from rkdet.emulator.socs import all_variants

SCRIPTS = Path(__file__).resolve().parents[2] / "board_scripts"


def _run(script: str, root: Path, state: Path) -> tuple[int, list[dict]]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RKDET_ROOT": str(root), "RKDET_STATE_DIR": str(state)}
    done = subprocess.run(["dash", str(SCRIPTS / script)], capture_output=True, text=True, env=env,
                          timeout=CLIENT_TIMEOUT_S * 3)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_pin_reports_a_thermal_cap_and_restore_returns_every_knob(board, tmp_path):
    # The NPU starts under userspace at 300 MHz, fully loaded, in a 50 C room: soc-thermal 72 C, no cap yet.
    assert sh(f'echo userspace > "$R/{NPU}/governor" && echo 300000000 > "$R/{NPU}/userspace/set_freq"',
              board.root).returncode == 0
    board.control.set("ambient_millicelsius", 50000)
    board.control.set_load("npu", 100)
    before = digest(board.root)

    code, records = _run("pin.sh", board.root, tmp_path / "state")
    assert code == 1  # pinned, but a knob did not read back
    npu = next(r for r in records if r.get("knob") == "devfreq/fdab0000.npu")
    assert (npu["status"], npu["wanted_hz"], npu["cur_hz"]) == ("failed", 1000000000, 800000000)
    # pinned to performance at 1 GHz, the SoC heats past 85 C and the system monitor holds the NPU at 800 MHz
    assert int(read(board.root, "sys/class/thermal/thermal_zone0/temp")) > 85000  # soc-thermal
    assert ops(board.root, ("exists", f"{NPU}/userspace/set_freq")) == [{"ok": False}]

    code, records = _run("restore.sh", board.root, tmp_path / "state")
    assert code == 0, records
    assert read(board.root, f"{NPU}/userspace/set_freq") == "300000000\n"  # came back with its value
    after = digest(board.root)
    assert {k for k in before if before[k] != after.get(k)} == set()
    assert before == after


@pytest.mark.parametrize("profile", all_variants(), ids=lambda p: p.label)
def test_pin_then_restore_is_byte_identical(make_board, tmp_path, profile):
    """On every variant (speed bins, an old BSP kernel, images without compaction or THP, NPU
    governors that hold their clock): pin reads back, restore returns the board byte for byte."""
    board = make_board(profile)
    before = digest(board.root)
    code, records = _run("pin.sh", board.root, tmp_path / "state")
    assert code == 0, [r for r in records if r.get("status") not in ("set", "skipped", "saved")]
    assert digest(board.root) != before  # the pin really changed clocks
    code, _ = _run("restore.sh", board.root, tmp_path / "state")
    assert code == 0
    assert digest(board.root) == before
    code, records = _run("probe.sh", board.root, tmp_path / "state")
    assert code == 0 and any(r.get("record") == "soc" and r.get("soc") == profile.soc for r in records), records
