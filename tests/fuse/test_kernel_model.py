"""The kernel model without FUSE: runs everywhere, so the semantics are checked even where FUSE skips."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from rkdet.emulator.kernel import KernelBoard, kernel_version, opp_ceil, opp_floor, parse_uint
from rkdet.emulator.thermal import Control, ControlReader
from rkdet.emulator.socs import RK3568, RK3588, RV1126

NPU = "sys/devices/platform/fdab0000.npu/devfreq/fdab0000.npu"
POLICY0 = "sys/devices/system/cpu/cpufreq/policy0"


def _show(board: KernelBoard, rel: str) -> str:
    return board.files[rel].show().decode()


def _store_errno(board: KernelBoard, rel: str, text: str) -> int | None:
    try:
        board.files[rel].store(text)  # type: ignore[misc]
    except OSError as err:
        return err.errno
    return None


@pytest.mark.parametrize("text,value", [("450\n", 450), ("  7", 7), ("12abc", 12)])
def test_parse_uint_accepts_what_sscanf_u_accepts(text, value):
    assert parse_uint(text) == value


@pytest.mark.parametrize("text", ["-5", "+5", "abc", "", "\n"])
def test_parse_uint_rejects_what_sscanf_u_rejects(text):
    with pytest.raises(OSError) as err:
        parse_uint(text)
    assert err.value.errno == errno.EINVAL


def test_opp_rounding_falls_back_at_the_ends():
    freqs = (200, 297, 400, 594)
    assert (opp_ceil(freqs, 300), opp_ceil(freqs, 900), opp_floor(freqs, 500), opp_floor(freqs, 100)) == \
        (400, 594, 400, 200)


def test_set_freq_lifecycle_and_rounding(tmp_path):
    board = KernelBoard(RK3588, tmp_path)
    assert board.kind(f"{NPU}/userspace/set_freq") is None and board.kind(f"{NPU}/userspace") is None
    assert _store_errno(board, f"{NPU}/governor", "ondemand_typo") == errno.EINVAL
    board.files[f"{NPU}/governor"].store("userspace\n")  # type: ignore[misc]
    assert board.kind(f"{NPU}/userspace/set_freq") == "file"
    assert _show(board, f"{NPU}/userspace/set_freq") == "undefined\n"
    assert _show(board, f"{NPU}/cur_freq") == "1000000000\n"  # previous_freq until a value is set
    board.files[f"{NPU}/userspace/set_freq"].store("333000000")  # type: ignore[misc]
    assert _show(board, f"{NPU}/cur_freq") == "400000000\n"
    board.files[f"{NPU}/governor"].store("powersave")  # type: ignore[misc]
    board.files[f"{NPU}/governor"].store("userspace")  # type: ignore[misc]
    assert _show(board, f"{NPU}/userspace/set_freq") == "undefined\n"  # fresh governor data
    assert "userspace" in board.listdir(NPU)


def test_rk3568_npu_opps_round_to_the_table_of_rk3568_dtsi(tmp_path):
    board = KernelBoard(RK3568, tmp_path)
    npu = "sys/devices/platform/fde40000.npu/devfreq/fde40000.npu"
    board.files[f"{npu}/governor"].store("userspace")  # type: ignore[misc]
    board.files[f"{npu}/userspace/set_freq"].store("500000000")  # type: ignore[misc]
    assert _show(board, f"{npu}/cur_freq") == "600000000\n"  # ceil inside the range
    board.files[f"{npu}/max_freq"].store("650000000")  # type: ignore[misc]
    assert _show(board, f"{npu}/cur_freq") == "600000000\n"  # clamped at max: floor
    board.files[f"{npu}/userspace/set_freq"].store("950000000")  # type: ignore[misc]
    board.files[f"{npu}/max_freq"].store("0")  # type: ignore[misc]
    assert _show(board, f"{npu}/cur_freq") == "900000000\n"  # the 1 GHz OPP is disabled in rk3568.dtsi


def test_max_freq_request_rounds_up_to_khz_and_zero_means_no_limit(tmp_path):
    board = KernelBoard(RK3588, tmp_path)
    board.files[f"{NPU}/max_freq"].store("666666666")  # type: ignore[misc]
    assert _show(board, f"{NPU}/max_freq") == "666667000\n"
    board.files[f"{NPU}/min_freq"].store("400000999")  # type: ignore[misc]
    assert _show(board, f"{NPU}/min_freq") == "400000000\n"  # min rounds down
    board.files[f"{NPU}/max_freq"].store("0")  # type: ignore[misc]
    assert _show(board, f"{NPU}/max_freq") == "1000000000\n"


def test_cpufreq_userspace_starts_at_the_current_speed(tmp_path):
    board = KernelBoard(RK3588, tmp_path)
    before = _show(board, f"{POLICY0}/scaling_cur_freq")
    board.files[f"{POLICY0}/scaling_governor"].store("userspace")  # type: ignore[misc]
    assert _show(board, f"{POLICY0}/scaling_setspeed") == before
    board.files[f"{POLICY0}/scaling_max_freq"].store("600000")  # type: ignore[misc]
    assert _show(board, f"{POLICY0}/scaling_cur_freq") == "600000\n"
    board.files[f"{POLICY0}/scaling_max_freq"].store("1800000")  # type: ignore[misc]
    assert _show(board, f"{POLICY0}/scaling_cur_freq") == before  # the set speed comes back


def test_thermal_model_caps_and_ignores_foreign_control_files(tmp_path):
    board = KernelBoard(RK3588, tmp_path)
    board.files[f"{NPU}/governor"].store("performance")  # type: ignore[misc]
    (tmp_path / "fault.json").write_text('{"occurrence": 0}')  # the runtime double's control
    Control(tmp_path, RK3588).force_temperature(86000, zone="soc-thermal")
    assert _show(board, f"{NPU}/cur_freq") == "800000000\n"
    assert _show(board, f"{NPU}/max_freq") == "800000000\n"
    snap = board.evaluate()
    assert snap.temps["soc-thermal"] == 86000
    assert snap.caps == {"fb000000.gpu": 800000000, "fdab0000.npu": 800000000, "policy0": 1608000000,
                         "policy4": 2208000000, "policy6": 2208000000}


def test_control_reader_logs_a_bad_file_once(tmp_path, caplog):
    (tmp_path / "load.npu").write_text("lots\n")
    reader = ControlReader(Path(tmp_path))
    assert reader.read().load == {} and reader.read().load == {}
    assert sum("ignoring 'lots'" in r.getMessage() for r in caplog.records) == 1


def test_kernels_before_5_4_reject_min_above_max(tmp_path):
    """RV1126's 4.19: devfreq and cpufreq refuse a crossing store (EINVAL) instead of letting max win."""
    board = KernelBoard(RV1126, tmp_path)
    npu = "sys/devices/platform/ffbc0000.npu/devfreq/ffbc0000.npu"
    board.files[f"{npu}/max_freq"].store("500000000")  # type: ignore[misc]
    assert _store_errno(board, f"{npu}/min_freq", "700000000") == errno.EINVAL
    assert _show(board, f"{npu}/min_freq") == "200000000\n"
    board.files[f"{npu}/min_freq"].store("400000000")  # type: ignore[misc]
    assert _store_errno(board, f"{npu}/max_freq", "300000000") == errno.EINVAL
    board.files[f"{npu}/max_freq"].store("0")  # type: ignore[misc]  # 0: back to the table's top
    assert _show(board, f"{npu}/max_freq") == "934000000\n"
    assert _store_errno(board, f"{POLICY0}/scaling_max_freq", "300000") == errno.EINVAL  # below min
    assert _store_errno(board, f"{POLICY0}/scaling_max_freq", "500000") is None
    assert _show(board, f"{POLICY0}/scaling_max_freq") == "500000\n"
    assert _store_errno(board, f"{POLICY0}/scaling_min_freq", "600000") == errno.EINVAL
    assert (kernel_version(RV1126.kernel), kernel_version(RK3588.kernel)) == ((4, 19), (5, 10))
