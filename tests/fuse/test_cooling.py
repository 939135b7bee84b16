"""Devfreq cooling devices: how the board scripts tell a thermal cap from a user limit.

One ``cooling_deviceN`` per capped devfreq node, typed ``devfreq-<node>`` (found by type, never by
index); ``cur_state`` follows the thermal model (0 uncapped, k = OPPs removed from the top) and
root may write it as an override, which the kernel applies as the cap until the governor decides
again. The plain tree has the same files and boot values (test_sysfs_semantics checks digests).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fuse_helpers import GPU, NPU, ops, read

from rkdet.board.fake_tree import build_fake_tree, cooling_nodes, cooling_type
from rkdet.board.socs import PROFILES

RV_NPU = "sys/class/devfreq/ffbc0000.npu"


def _cooling_dir(root: Path, node: str) -> str:
    """The cooling device of a devfreq node, by its type."""
    names = ops(root, ("listdir", "sys/class/thermal"))[0]["ok"]
    for name in names:
        if name.startswith("cooling_device") and read(root, f"sys/class/thermal/{name}/type") == f"devfreq-{node}\n":
            return f"sys/class/thermal/{name}"
    raise AssertionError(f"no cooling device for {node} among {names}")


@pytest.mark.parametrize("soc", sorted(PROFILES))
def test_plain_tree_has_one_cooling_device_per_capped_node(soc: str, tmp_path: Path) -> None:
    profile = PROFILES[soc]
    root = build_fake_tree(profile, tmp_path / "plain")
    found = {}
    for cdir in sorted((root / "sys/class/thermal").glob("cooling_device*")):
        found[(cdir / "type").read_text()] = ((cdir / "cur_state").read_text(), (cdir / "max_state").read_text())
    capped = {cap.node for cap in profile.thermal_caps}
    nodes = {n.name: n for n in profile.devfreq}
    assert found == {f"{cooling_type(name)}\n": ("0\n", f"{len(nodes[name].frequencies_hz) - 1}\n") for name in capped}
    assert cooling_type("fb000000.gpu") == "devfreq-fb000000.gpu"  # as an RK3588 BSP kernel names it


def test_rk3588_cooling_indices_differ_from_devfreq_order() -> None:
    # devfreq order is npu, gpu, dmc; a script that assumed cooling_device0 is the NPU would fail
    assert [n.name for n in cooling_nodes(PROFILES["rk3588"])] == ["fb000000.gpu", "fdab0000.npu"]


def test_cur_state_follows_the_thermal_cap(board) -> None:
    npu, gpu = _cooling_dir(board.root, "fdab0000.npu"), _cooling_dir(board.root, "fb000000.gpu")
    assert read(board.root, f"{npu}/cur_state") == "0\n" and read(board.root, f"{npu}/max_state") == "7\n"
    board.control.force_temperature(90000, zone="npu-thermal")  # NPU capped at 800 MHz: 2 OPPs below 1 GHz
    assert read(board.root, f"{npu}/cur_state") == "2\n" and read(board.root, f"{NPU}/max_freq") == "800000000\n"
    assert read(board.root, f"{gpu}/cur_state") == "0\n"  # its zone is cool
    board.control.set("npu_cap_hz", 550000000)  # rounds down to the 500 MHz OPP: 5 steps
    assert read(board.root, f"{npu}/cur_state") == "5\n" and read(board.root, f"{NPU}/max_freq") == "500000000\n"
    board.control.force_temperature(None, zone="npu-thermal")
    assert read(board.root, f"{npu}/cur_state") == "0\n" and read(board.root, f"{NPU}/max_freq") == "1000000000\n"


def test_rv1126_cap_counts_steps_of_its_own_table(make_board) -> None:
    board = make_board("rv1126")
    cdev = _cooling_dir(board.root, "ffbc0000.npu")
    board.control.force_temperature(85000)  # above 80 C: <= 600 MHz; 700, 800, 934 MHz removed
    assert read(board.root, f"{cdev}/cur_state") == "3\n" and read(board.root, f"{RV_NPU}/max_freq") == "600000000\n"


def test_root_may_override_cur_state_until_the_governor_decides_again(board) -> None:
    gpu = _cooling_dir(board.root, "fb000000.gpu")
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
