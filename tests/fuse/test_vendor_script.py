"""A pinning script written for real boards reads back on the emulator what the sources say a board reads.

The script below is the usual vendor/forum fixed-frequency script (userspace governor, a frequency
into scaling_setspeed / userspace/set_freq, read back, print Success or Failed), written for real
boards and run unchanged (only the "$R" root prefix) against the FUSE board of each profile variant.
What it must read back comes from the device trees and board dumps cited in rkdet/emulator/soc_sources.py,
never from the emulator: the RK3588 big cores top out at the chip's speed-bin OPP (a 2256 bin board
answers a 2400000 request with 2256000), RK3568's NPU has 600 MHz and no 1 GHz OPP, RV1126's has 396 MHz.
"""

from __future__ import annotations

import pytest
from fuse_helpers import read, sh

from rkdet.emulator.socs import RK3568, RK3588_SPEED_BINS, RV1126, rk3588

# The vendor-style script: $1 a cpufreq policy dir, $2 kHz, $3 a devfreq dir, $4 Hz.
VENDOR_SCRIPT = r"""
cpu=$R/$1; npu=$R/$3
echo userspace > "$cpu/scaling_governor"
echo "$2" > "$cpu/scaling_setspeed"
got=$(cat "$cpu/scaling_cur_freq")
if [ "$got" = "$2" ]; then echo "CPU Success $got"; else echo "CPU Failed $got"; fi
echo userspace > "$npu/governor"
echo "$4" > "$npu/userspace/set_freq"
got=$(cat "$npu/cur_freq")
if [ "$got" = "$4" ]; then echo "NPU Success $got"; else echo "NPU Failed $got"; fi
"""

BIG = "sys/devices/system/cpu/cpufreq/policy4"
RK3588_NPU = "sys/class/devfreq/fdab0000.npu"


def _vendor(root, policy: str, khz: int, devfreq: str, hz: int) -> list[str]:
    script = f"set -- {policy} {khz} {devfreq} {hz}\n" + VENDOR_SCRIPT
    done = sh(script, root)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("speed_bin", RK3588_SPEED_BINS)
def test_rk3588_big_cores_read_back_their_speed_bin(make_board, speed_bin: int) -> None:
    board = make_board(rk3588(speed_bin=speed_bin))
    # the bin's own top OPP: Success, as on a board of that bin
    assert _vendor(board.root, BIG, speed_bin, RK3588_NPU, 1000000000) == \
        [f"CPU Success {speed_bin}", "NPU Success 1000000000"]
    if speed_bin != 2400000:  # a 2400000 request on a lower bin: clamped to the bin's top, "Failed"
        assert _vendor(board.root, BIG, 2400000, RK3588_NPU, 1000000000)[0] == f"CPU Failed {speed_bin}"
    listed = read(board.root, f"{BIG}/scaling_available_frequencies").split()
    assert listed[-2:] == ["2208000", str(speed_bin)]  # board dump: ...2208000 2256000


def test_rk3568_npu_reads_back_its_dtsi_opps(make_board) -> None:
    board = make_board(RK3568)
    npu = "sys/class/devfreq/fde40000.npu"
    policy = "sys/devices/system/cpu/cpufreq/policy0"
    assert _vendor(board.root, policy, 1992000, npu, 600000000) == ["CPU Success 1992000", "NPU Success 600000000"]
    assert _vendor(board.root, policy, 1992000, npu, 1000000000)[1] == "NPU Failed 900000000"  # 1 GHz disabled
    assert read(board.root, f"{npu}/available_frequencies") == \
        "200000000 297000000 400000000 600000000 700000000 800000000 900000000\n"


def test_rv1126_npu_reads_back_396mhz(make_board) -> None:
    board = make_board(RV1126)
    npu = "sys/class/devfreq/ffbc0000.npu"
    assert _vendor(board.root, "sys/devices/system/cpu/cpufreq/policy0", 1512000, npu, 396000000) == \
        ["CPU Success 1512000", "NPU Success 396000000"]
    assert read(board.root, f"{npu}/available_governors") == "userspace\n"
    assert read(board.root, "sys/devices/system/cpu/cpufreq/policy0/scaling_available_governors") == \
        "ondemand userspace performance \n"


def test_what_vendor_scripts_get_away_with_on_a_board(make_board) -> None:
    """Writes a board accepts although they look wrong: an empty set_freq (unset variable),
    another node's governor on the NPU (one global list), a sysctl with two numbers."""
    board = make_board("rk3588")
    npu = RK3588_NPU
    assert sh(f'echo userspace > "$R/{npu}/governor" && echo 800000000 > "$R/{npu}/userspace/set_freq"',
              board.root).returncode == 0
    empty = sh(f'echo $UNSET_FREQ > "$R/{npu}/userspace/set_freq"', board.root)
    assert empty.returncode == 0 and read(board.root, f"{npu}/cur_freq") == "800000000\n"
    assert sh(f'echo dmc_ondemand > "$R/{npu}/governor"', board.root).returncode == 0
    assert sh('echo 50 60 > "$R/proc/sys/vm/compaction_proactiveness"', board.root).returncode == 0
    assert read(board.root, "proc/sys/vm/compaction_proactiveness") == "50\n"
    gpu = read(board.root, "sys/class/devfreq/fb000000.gpu/available_frequencies").split()
    assert gpu == sorted(gpu, key=int, reverse=True) and gpu[0] == "1000000000"  # Mali lists descending
