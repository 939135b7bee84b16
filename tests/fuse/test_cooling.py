"""Cooling devices: how the board scripts tell a thermal cap from a user limit.

RK3588 boards show cpufreq-cpu0/4/6, devfreq-fb000000.gpu and devfreq-dmc (no NPU cooling device;
older kernels number devfreq ones thermal-devfreq-N); found by type, never by index. ``cur_state``
follows the thermal model (0 uncapped, k = OPPs removed from the top) and root may write it as an
override, which the kernel applies as the cap until the governor decides again. The plain tree has
the same files and boot values (test_sysfs_semantics checks digests).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fuse_helpers import GPU, NPU, ops, read

from rkdet.emulator.fake_tree import build_fake_tree, cooling_nodes, cooling_type
from rkdet.emulator.socs import PROFILES, rk3588


def _cooling_dir(root: Path, cooling_type_name: str) -> str:
    """A cooling device by its type."""
    names = ops(root, ("listdir", "sys/class/thermal"))[0]["ok"]
    for name in names:
        if name.startswith("cooling_device") and read(root, f"sys/class/thermal/{name}/type") == f"{cooling_type_name}\n":
            return f"sys/class/thermal/{name}"
    raise AssertionError(f"no cooling device {cooling_type_name} among {names}")


def _plain_cooling(root: Path) -> list[tuple[str, str, str]]:
    found = []
    for cdir in sorted((root / "sys/class/thermal").glob("cooling_device*"), key=lambda p: int(p.name[14:])):
        found.append(tuple((cdir / f).read_text().strip() for f in ("type", "cur_state", "max_state")))
    return found


def test_rk3588_has_the_boards_cooling_devices_and_none_for_the_npu(tmp_path: Path) -> None:
    found = _plain_cooling(build_fake_tree(PROFILES["rk3588"], tmp_path / "plain"))
    assert found == [("cpufreq-cpu0", "0", "7"), ("cpufreq-cpu4", "0", "10"), ("cpufreq-cpu6", "0", "10"),
                     ("devfreq-fb000000.gpu", "0", "7"), ("devfreq-dmc", "0", "3")]
    assert cooling_type("fb000000.gpu") == "devfreq-fb000000.gpu"  # as an RK3588 BSP kernel names it
    # devfreq order is npu, gpu, dmc; a script that assumed an index would fail
    assert [n.name for n in cooling_nodes(PROFILES["rk3588"])] == ["fb000000.gpu", "dmc"]


def test_old_bsp_kernels_number_devfreq_cooling_devices(tmp_path: Path) -> None:
    found = _plain_cooling(build_fake_tree(rk3588(kernel="5.10.66"), tmp_path / "plain"))
    assert [t for t, _, _ in found] == ["cpufreq-cpu0", "cpufreq-cpu4", "cpufreq-cpu6", "thermal-devfreq-0",
                                        "thermal-devfreq-1"]


@pytest.mark.parametrize("soc", ["rk3568", "rv1126"])
def test_no_cooling_device_without_a_source(soc: str, tmp_path: Path) -> None:
    assert _plain_cooling(build_fake_tree(PROFILES[soc], tmp_path / "plain")) == []


def test_cur_state_follows_the_thermal_cap(board) -> None:
    gpu, big = _cooling_dir(board.root, "devfreq-fb000000.gpu"), _cooling_dir(board.root, "cpufreq-cpu4")
    assert read(board.root, f"{gpu}/cur_state") == "0\n" and read(board.root, f"{gpu}/max_state") == "7\n"
    board.control.force_temperature(90000, zone="soc-thermal")  # GPU capped at 800 MHz: 2 OPPs below 1 GHz
    assert read(board.root, f"{gpu}/cur_state") == "2\n" and read(board.root, f"{GPU}/max_freq") == "800000000\n"
    assert read(board.root, f"{big}/cur_state") == "1\n"  # 2256000 -> 2208000 kHz: one step
    assert read(board.root, f"{NPU}/max_freq") == "800000000\n"  # capped, with no cooling device to show it
    board.control.force_temperature(None, zone="soc-thermal")
    assert read(board.root, f"{gpu}/cur_state") == "0\n" and read(board.root, f"{GPU}/max_freq") == "1000000000\n"


def test_root_may_override_cur_state_until_the_governor_decides_again(board) -> None:
    gpu = _cooling_dir(board.root, "devfreq-fb000000.gpu")
    result = ops(board.root, ("write", f"{gpu}/cur_state", "4\n"), ("read", f"{gpu}/cur_state"),
                 ("read", f"{GPU}/max_freq"), ("write", f"{gpu}/cur_state", "8"),
                 ("write", f"{gpu}/cur_state", "-1"), ("write", f"{gpu}/cur_state", "x"),
                 ("open_w", f"{gpu}/max_state"), ("open_w", f"{gpu}/type"))
    assert result == [{"ok": None}, {"ok": "4\n"}, {"ok": "600000000\n"}, {"errno": "EINVAL"}, {"errno": "EINVAL"},
                      {"errno": "EINVAL"}, {"errno": "EACCES"}, {"errno": "EACCES"}]
    board.control.force_temperature(90000)  # the governor's own decision (state 2) replaces the override
    assert read(board.root, f"{gpu}/cur_state") == "2\n" and read(board.root, f"{GPU}/max_freq") == "800000000\n"
    board.control.force_temperature(None)
    assert read(board.root, f"{gpu}/cur_state") == "0\n" and read(board.root, f"{GPU}/max_freq") == "1000000000\n"
