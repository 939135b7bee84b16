"""Thermal model: temperature follows clock and load; above the trip the vendor caps lower cur_freq."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuse_helpers import GPU, NPU, read, sh

from rkdet.board.emulator.thermal import Control
from rkdet.board.socs import RK3588, RV1126
from rkdet.errors import InputError

RV_NPU = "sys/class/devfreq/ffbc0000.npu"


def _zone(root, zone_type: str) -> str:
    for index in range(10):
        if read(root, f"sys/class/thermal/thermal_zone{index}/type").strip() == zone_type:
            return f"sys/class/thermal/thermal_zone{index}"
    raise AssertionError(zone_type)


def test_forced_temperature_above_trip_caps_the_pinned_gpu_and_releasing_restores_it(board):
    assert sh(f'echo performance > "$R/{GPU}/governor"', board.root).returncode == 0
    assert read(board.root, f"{GPU}/cur_freq") == "1000000000\n"
    board.control.force_temperature(90000)
    assert read(board.root, f"{_zone(board.root, 'gpu-thermal')}/temp") == "90000\n"
    assert read(board.root, f"{GPU}/cur_freq") == "800000000\n"  # RK3588 GPU <= 800 MHz above 85 C
    assert read(board.root, f"{GPU}/max_freq") == "800000000\n"  # devfreq cooling is a QoS max
    assert read(board.root, f"{GPU}/governor") == "performance\n"  # the pin itself is untouched
    board.control.force_temperature(85000)  # at the trip, not above
    assert read(board.root, f"{GPU}/cur_freq") == "1000000000\n"
    board.control.force_temperature(90000)
    board.control.force_temperature(None)
    assert read(board.root, f"{GPU}/cur_freq") == "1000000000\n"
    assert read(board.root, f"{GPU}/max_freq") == "1000000000\n"


def test_rv1126_npu_is_held_to_600mhz_above_80c(make_board):
    board = make_board("rv1126")
    assert sh(f'echo performance > "$R/{RV_NPU}/governor"', board.root).returncode == 0
    assert read(board.root, f"{RV_NPU}/cur_freq") == "934000000\n"
    board.control.force_temperature(80500, zone="npu-thermal")
    assert read(board.root, f"{RV_NPU}/cur_freq") == "600000000\n"
    board.control.force_temperature(80500, zone="cpu-thermal")  # another zone: no effect
    board.control.force_temperature(None, zone="npu-thermal")
    assert read(board.root, f"{RV_NPU}/cur_freq") == "934000000\n"


def test_npu_cap_and_trip_are_configurable(board):
    assert sh(f'echo performance > "$R/{NPU}/governor"', board.root).returncode == 0
    board.control.set("trip_millicelsius", 50000)
    board.control.set("npu_cap_hz", 500000000)
    board.control.force_temperature(55000, zone="npu-thermal")
    assert read(board.root, f"{NPU}/cur_freq") == "500000000\n"
    board.control.set("npu_cap_hz", 650000000)  # not an OPP: the highest OPP below it
    assert read(board.root, f"{NPU}/cur_freq") == "600000000\n"
    assert sh(f'echo disabled > "$R/{_zone(board.root, "npu-thermal")}/mode"', board.root).returncode == 0
    assert read(board.root, f"{NPU}/cur_freq") == "1000000000\n"  # a disabled zone applies no cap


def test_temperature_rises_with_clock_and_load_and_heat_alone_throttles(board):
    temp = f"{_zone(board.root, 'npu-thermal')}/temp"
    idle = int(read(board.root, temp))
    assert idle == 40900
    assert sh(f'echo powersave > "$R/{NPU}/governor"', board.root).returncode == 0
    board.control.set_load("npu", 100)
    slow = int(read(board.root, temp))
    assert sh(f'echo performance > "$R/{NPU}/governor"', board.root).returncode == 0
    fast = int(read(board.root, temp))
    board.control.set_load("npu", 50)
    half = int(read(board.root, temp))
    assert idle < slow < half < fast
    assert read(board.root, f"{NPU}/cur_freq") == "1000000000\n"  # 76 C at 25 C ambient: no cap
    board.control.set("ambient_millicelsius", 45000)
    board.control.set_load("npu", 100)
    assert int(read(board.root, temp)) > 85000
    assert read(board.root, f"{NPU}/cur_freq") == "800000000\n"  # hot room + full load: throttled


def test_bad_control_values_are_refused_by_the_writer_and_ignored_by_the_daemon(board):
    with pytest.raises(InputError, match="unknown emulator control"):
        board.control.set("forced_temp", 90000)
    with pytest.raises(InputError, match="load.npu"):
        Control(board.control_dir, RK3588).set_load("npu", 150)
    (board.control_dir / "forced_millicelsius").write_text("hot\n")  # bypassing the writer
    assert read(board.root, f"{GPU}/cur_freq") == "700000000\n"
    assert "ignoring 'hot'" in board.log_path.read_text()


def test_control_names_follow_the_profile():
    with pytest.raises(InputError):
        Control(Path("/nonexistent"), RV1126).set("forced_millicelsius.gpu-thermal", 1)
