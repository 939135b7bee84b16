"""Thermal model: temperature follows clock and load; above the trip the vendor caps lower cur_freq."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuse_helpers import GPU, NPU, ops, read, sh

from rkdet.emulator.thermal import Control
from rkdet.emulator.socs import RK3588, RV1126
from rkdet.errors import InputError

RV_NPU = "sys/class/devfreq/ffbc0000.npu"


def _zone(root, zone_type: str) -> str:
    for index in range(10):
        if read(root, f"sys/class/thermal/thermal_zone{index}/type").strip() == zone_type:
            return f"sys/class/thermal/thermal_zone{index}"
    raise AssertionError(zone_type)


BIG = "sys/devices/system/cpu/cpufreq/policy4"
LITTLE = "sys/devices/system/cpu/cpufreq/policy0"


def test_system_monitor_caps_gpu_npu_and_cpus_above_85c_of_soc_thermal_with_5c_hysteresis(board):
    """rk3588s.dtsi: only soc-thermal has trips; the system monitor caps GPU/NPU at 800 MHz, little
    cores at 1608000 and big cores at 2208000 kHz above 85 C and releases them below 80 C."""
    script = (f'echo performance > "$R/{GPU}/governor" && echo performance > "$R/{NPU}/governor" && '
              f'echo performance > "$R/{LITTLE}/scaling_governor" && echo performance > "$R/{BIG}/scaling_governor"')
    assert sh(script, board.root).returncode == 0
    uncapped = ("1000000000\n", "1000000000\n", "1800000\n", "2256000\n")
    capped = ("800000000\n", "800000000\n", "1608000\n", "2208000\n")
    clocks = lambda: tuple(read(board.root, r) for r in (f"{GPU}/cur_freq", f"{NPU}/cur_freq",  # noqa: E731
                                                         f"{LITTLE}/scaling_cur_freq", f"{BIG}/scaling_cur_freq"))
    assert clocks() == uncapped
    board.control.force_temperature(95000, zone="npu-thermal")  # no trips on npu-thermal
    board.control.force_temperature(95000, zone="gpu-thermal")
    assert clocks() == uncapped
    board.control.force_temperature(85000, zone="soc-thermal")  # at the trip, not above
    assert clocks() == uncapped
    board.control.force_temperature(85001, zone="soc-thermal")
    assert clocks() == capped
    assert read(board.root, f"{GPU}/max_freq") == "800000000\n"  # a QoS max, as the monitor sets it
    assert read(board.root, f"{BIG}/scaling_max_freq") == "2208000\n"
    assert read(board.root, f"{GPU}/governor") == "performance\n"  # the pin itself is untouched
    board.control.force_temperature(80000, zone="soc-thermal")  # within the 5 C hysteresis: still capped
    assert clocks() == capped
    board.control.force_temperature(79999, zone="soc-thermal")
    assert clocks() == uncapped
    board.control.force_temperature(None, zone="soc-thermal")
    assert clocks() == uncapped and read(board.root, f"{GPU}/max_freq") == "1000000000\n"


def test_soc_thermal_trips_are_shown_and_other_zones_have_none(board):
    soc = _zone(board.root, "soc-thermal")
    trips = [(read(board.root, f"{soc}/trip_point_{i}_temp"), read(board.root, f"{soc}/trip_point_{i}_type"))
             for i in range(3)]
    assert trips == [("75000\n", "passive\n"), ("85000\n", "passive\n"), ("115000\n", "critical\n")]
    npu_zone = _zone(board.root, "npu-thermal")
    assert not any(n.startswith("trip_point") for n in ops(board.root, ("listdir", npu_zone))[0]["ok"])


def test_rv1126_has_no_invented_cap(make_board):
    board = make_board("rv1126")
    assert sh(f'echo 934000000 > "$R/{RV_NPU}/userspace/set_freq"', board.root).returncode == 0
    board.control.force_temperature(100000)
    assert read(board.root, f"{RV_NPU}/cur_freq") == "934000000\n"


def test_npu_cap_and_trip_are_configurable(board):
    assert sh(f'echo performance > "$R/{NPU}/governor"', board.root).returncode == 0
    board.control.set("trip_millicelsius", 50000)
    board.control.set("npu_cap_hz", 500000000)
    board.control.force_temperature(55000, zone="soc-thermal")
    assert read(board.root, f"{NPU}/cur_freq") == "500000000\n"
    board.control.set("npu_cap_hz", 650000000)  # not an OPP: the highest OPP below it
    assert read(board.root, f"{NPU}/cur_freq") == "600000000\n"
    assert sh(f'echo disabled > "$R/{_zone(board.root, "soc-thermal")}/mode"', board.root).returncode == 0
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
    board.control.set("ambient_millicelsius", 50000)
    board.control.set_load("npu", 100)
    assert int(read(board.root, f"{_zone(board.root, 'soc-thermal')}/temp")) > 85000
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
