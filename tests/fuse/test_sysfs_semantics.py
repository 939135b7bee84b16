"""Kernel semantics of the FUSE board, exercised the way board scripts do: shell and file I/O."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from rkdet.emulator.fake_tree import build_fake_tree
from rkdet.emulator.socs import PROFILES, RK3588

from fuse_helpers import GPU, NPU, POLICY0, digest, ops, read, sh


@pytest.mark.parametrize("soc", sorted(PROFILES))
def test_layout_and_boot_values_equal_the_plain_tree(make_board, soc):
    handle = make_board(soc)
    with tempfile.TemporaryDirectory() as plain:
        expected = digest(build_fake_tree(PROFILES[soc], Path(plain)))
    got = digest(handle.root)
    assert sorted(got) == sorted(expected)
    assert got == expected


def test_reads_are_one_value_and_a_newline(board):
    rels = [f"{NPU}/cur_freq", f"{NPU}/governor", f"{POLICY0}/scaling_cur_freq", f"{POLICY0}/scaling_setspeed",
            "proc/sys/vm/compaction_proactiveness", "sys/class/thermal/thermal_zone0/temp"]
    for rel, result in zip(rels, ops(board.root, *[("read", r) for r in rels])):
        text = result["ok"]
        assert text.endswith("\n") and text.count("\n") == 1 and text.strip(), (rel, text)


def test_read_only_attribute_refuses_open_for_write_even_for_root(board):
    assert os.geteuid() == 0  # FUSE mounting needs root: the point is that root is refused too
    for rel in (f"{POLICY0}/scaling_cur_freq", f"{NPU}/cur_freq", f"{NPU}/available_frequencies"):
        before = read(board.root, rel)
        assert ops(board.root, ("open_w", rel)) == [{"errno": "EACCES"}]
        assert sh(f'echo 1 > "$R/{rel}"', board.root).returncode != 0
        assert read(board.root, rel) == before
    assert ops(board.root, ("mode", f"{POLICY0}/cpuinfo_cur_freq"), ("mode", f"{NPU}/governor")) == \
        [{"ok": 0o400}, {"ok": 0o644}]


@pytest.mark.parametrize("rel", [f"{POLICY0}/scaling_governor", f"{NPU}/governor"])
def test_unknown_governor_is_einval_and_changes_nothing(board, rel):
    before = read(board.root, rel)
    assert ops(board.root, ("write", rel, "turbo\n")) == [{"errno": "EINVAL"}]
    assert sh(f'echo turbo > "$R/{rel}"', board.root).returncode != 0
    assert read(board.root, rel) == before
    assert sh(f'echo performance > "$R/{rel}"', board.root).returncode == 0
    assert read(board.root, rel) == "performance\n"


def test_scaling_setspeed_only_under_userspace(board):
    rel = f"{POLICY0}/scaling_setspeed"
    assert read(board.root, rel) == "<unsupported>\n"
    assert ops(board.root, ("write", rel, "1008000\n")) == [{"errno": "EINVAL"}]
    assert sh(f'echo 1008000 > "$R/{rel}"', board.root).returncode != 0
    assert sh(f'echo userspace > "$R/{POLICY0}/scaling_governor" && echo 1000000 > "$R/{rel}"',
              board.root).returncode == 0
    # CPUFREQ_RELATION_L: the lowest OPP at or above the request
    assert read(board.root, f"{POLICY0}/scaling_cur_freq") == "1008000\n"
    assert read(board.root, rel) == "1008000\n"
    assert ops(board.root, ("write", rel, "fast\n")) == [{"errno": "EINVAL"}]


def test_set_freq_exists_only_while_governor_is_userspace(board):
    user = f"{NPU}/userspace"
    assert ops(board.root, ("exists", user), ("read", f"{user}/set_freq"), ("write", f"{user}/set_freq", "1")) == \
        [{"ok": False}, {"errno": "ENOENT"}, {"errno": "ENOENT"}]
    assert "userspace" not in ops(board.root, ("listdir", NPU))[0]["ok"]
    assert sh(f'echo 500000000 > "$R/{user}/set_freq"', board.root).returncode != 0
    assert sh(f'echo userspace > "$R/{NPU}/governor"', board.root).returncode == 0
    assert "userspace" in ops(board.root, ("listdir", NPU))[0]["ok"]
    assert read(board.root, f"{user}/set_freq") == "undefined\n"  # governor_userspace: no value yet
    assert sh(f'echo 500000000 > "$R/{user}/set_freq"', board.root).returncode == 0
    assert read(board.root, f"{NPU}/cur_freq") == "500000000\n"
    assert sh(f'echo performance > "$R/{NPU}/governor"', board.root).returncode == 0
    assert ops(board.root, ("exists", f"{user}/set_freq")) == [{"ok": False}]
    assert read(board.root, f"{NPU}/cur_freq") == "1000000000\n"


def test_set_freq_is_clamped_and_rounded_to_an_opp_not_rejected(board):
    set_freq = f"{NPU}/userspace/set_freq"
    assert sh(f'echo userspace > "$R/{NPU}/governor"', board.root).returncode == 0
    for wanted, cur in ((450000000, 500000000), (1, 300000000), (5000000000, 1000000000), (700000000, 700000000)):
        assert sh(f'echo {wanted} > "$R/{set_freq}"', board.root).returncode == 0
        assert read(board.root, set_freq) == f"{wanted}\n"  # shows the request as written
        assert read(board.root, f"{NPU}/cur_freq") == f"{cur}\n"
    assert sh(f'echo 650000000 > "$R/{NPU}/max_freq" && echo 900000000 > "$R/{set_freq}"', board.root).returncode == 0
    assert read(board.root, f"{NPU}/max_freq") == "650000000\n"
    assert read(board.root, f"{NPU}/cur_freq") == "600000000\n"  # clamped at max: the OPP below it


def test_set_freq_ignores_a_write_that_does_not_parse(board):
    """governor_userspace.c store_freq does not check sscanf: an empty or wordy write succeeds."""
    set_freq = f"{NPU}/userspace/set_freq"
    assert sh(f'echo userspace > "$R/{NPU}/governor" && echo 500000000 > "$R/{set_freq}"', board.root).returncode == 0
    assert ops(board.root, ("write", set_freq, "lots\n"), ("write", set_freq, "\n")) == [{"ok": None}, {"ok": None}]
    assert sh(f'echo > "$R/{set_freq}"', board.root).returncode == 0  # what `echo $EMPTY > set_freq` does
    assert (read(board.root, set_freq), read(board.root, f"{NPU}/cur_freq")) == ("500000000\n", "500000000\n")


def test_rknpu_ondemand_holds_its_frequency_whatever_the_load(board):
    """rknpu_ondemand does not follow load: it boots at 1 GHz on RK3588 and keeps what it is given."""
    cur = f"{NPU}/cur_freq"
    assert (read(board.root, f"{NPU}/governor"), read(board.root, cur)) == ("rknpu_ondemand\n", "1000000000\n")
    for load in (0, 100, 30):
        board.control.set_load("npu", load)
        assert read(board.root, cur) == "1000000000\n"
    assert sh(f'echo powersave > "$R/{NPU}/governor" && echo rknpu_ondemand > "$R/{NPU}/governor"',
              board.root).returncode == 0
    board.control.set_load("npu", 100)
    assert read(board.root, cur) == "300000000\n"  # it holds the frequency it took over


def test_devfreq_governors_are_one_global_list(board):
    """available_governors is devfreq_governor_list on every node, so the NPU takes dmc_ondemand."""
    lists = {read(board.root, f"{node}/available_governors") for node in (NPU, GPU, "sys/class/devfreq/dmc")}
    assert lists == {"rknpu_ondemand dmc_ondemand userspace powersave performance simple_ondemand\n"}
    assert sh(f'echo dmc_ondemand > "$R/{NPU}/governor"', board.root).returncode == 0
    assert read(board.root, f"{NPU}/governor") == "dmc_ondemand\n"


def test_devfreq_max_wins_over_min(board):
    assert sh(f'echo performance > "$R/{GPU}/governor"', board.root).returncode == 0
    assert sh(f'echo 500000000 > "$R/{GPU}/max_freq" && echo 700000000 > "$R/{GPU}/min_freq"',
              board.root).returncode == 0
    assert (read(board.root, f"{GPU}/min_freq"), read(board.root, f"{GPU}/max_freq")) == ("500000000\n", "500000000\n")
    assert read(board.root, f"{GPU}/cur_freq") == "500000000\n"
    assert sh(f'echo 0 > "$R/{GPU}/max_freq"', board.root).returncode == 0  # 0: no limit
    assert read(board.root, f"{GPU}/min_freq") == "700000000\n"  # the min request comes back
    assert read(board.root, f"{GPU}/cur_freq") == "1000000000\n"


def test_cpufreq_max_wins_over_min_and_limits_clamp_to_cpuinfo(board):
    script = (f'echo powersave > "$R/{POLICY0}/scaling_governor" && echo 1200000 > "$R/{POLICY0}/scaling_max_freq" '
              f'&& echo 1608000 > "$R/{POLICY0}/scaling_min_freq"')
    assert sh(script, board.root).returncode == 0
    assert read(board.root, f"{POLICY0}/scaling_min_freq") == "1200000\n"
    assert read(board.root, f"{POLICY0}/scaling_cur_freq") == "1200000\n"
    assert sh(f'echo 9999999 > "$R/{POLICY0}/scaling_max_freq" && echo 1 > "$R/{POLICY0}/scaling_min_freq"',
              board.root).returncode == 0
    assert read(board.root, f"{POLICY0}/scaling_max_freq") == "1800000\n"
    assert read(board.root, f"{POLICY0}/scaling_min_freq") == "408000\n"
    assert ops(board.root, ("write", f"{POLICY0}/scaling_max_freq", "-5\n")) == [{"errno": "EINVAL"}]


def test_cur_freq_follows_the_governor_and_the_load(board):
    cur = f"{NPU}/cur_freq"
    assert sh(f'echo powersave > "$R/{NPU}/governor"', board.root).returncode == 0
    assert read(board.root, cur) == "300000000\n"
    assert sh(f'echo performance > "$R/{NPU}/governor"', board.root).returncode == 0
    assert read(board.root, cur) == "1000000000\n"
    assert sh(f'echo simple_ondemand > "$R/{NPU}/governor"', board.root).returncode == 0
    board.control.set_load("npu", 0)
    assert read(board.root, cur) == "300000000\n"
    board.control.set_load("npu", 100)
    assert read(board.root, cur) == "1000000000\n"
    assert read(board.root, "sys/kernel/debug/rknpu/load") == "NPU load:  Core0:100%, Core1:100%, Core2:100%,\n"
    board.control.set_load("cpu", 100)
    assert read(board.root, f"{POLICY0}/scaling_cur_freq") == "1800000\n"


def test_compaction_proactiveness_takes_0_to_100(make_board):
    board = make_board("rk3588")
    rel = "proc/sys/vm/compaction_proactiveness"
    for bad in ("101", "-1", "abc", ""):
        assert ops(board.root, ("write", rel, bad + "\n")) == [{"errno": "EINVAL"}], bad
        assert sh(f'echo "{bad}" > "$R/{rel}"', board.root).returncode != 0
    assert read(board.root, rel) == "20\n"
    for good in ("0", "100", "35"):
        assert sh(f'echo {good} > "$R/{rel}"', board.root).returncode == 0
        assert read(board.root, rel) == f"{good}\n"
    # sysctl strict writes: a second write() at a non-zero offset is ignored
    assert ops(board.root, ("write", rel, "40", "50")) == [{"ok": None}]
    assert read(board.root, rel) == "40\n"
    # proc_dointvec_minmax on one int: the first number, which must end at a blank
    assert ops(board.root, ("write", rel, "50 60\n"), ("read", rel), ("write", rel, "7x\n")) == \
        [{"ok": None}, {"ok": "50\n"}, {"errno": "EINVAL"}]
    rv = make_board("rv1126")
    assert ops(rv.root, ("exists", rel)) == [{"ok": False}]  # 4.19 has no compaction_proactiveness


def test_other_stores_validate_like_the_kernel(board):
    thp = "sys/kernel/mm/transparent_hugepage/enabled"
    idle = "sys/devices/system/cpu/cpu4/cpuidle/state1/disable"
    mode = "sys/class/thermal/thermal_zone0/mode"
    assert ops(board.root, ("write", thp, "sometimes\n"), ("write", thp, "never\n"), ("read", thp),
               ("write", idle, "x\n"), ("write", idle, "1\n"), ("read", idle),
               ("write", mode, "off\n"), ("write", mode, "disabled\n"), ("read", mode)) == [
        {"errno": "EINVAL"}, {"ok": None}, {"ok": "always madvise [never]\n"},
        {"errno": "EINVAL"}, {"ok": None}, {"ok": "1\n"},
        {"errno": "EINVAL"}, {"ok": None}, {"ok": "disabled\n"}]


def test_sysfs_refuses_new_files_and_removals(board):
    assert ops(board.root, ("create", f"{NPU}/new_knob"), ("unlink", f"{NPU}/governor"), ("mkdir", f"{NPU}/d"),
               ("open_w", RK3588.runtime_library)) == \
        [{"errno": "EACCES"}, {"errno": "EPERM"}, {"errno": "EPERM"}, {"errno": "EROFS"}]


def test_symlinks_are_those_of_the_plain_tree(board):
    assert ops(board.root, ("readlink", "sys/devices/system/cpu/cpu5/cpufreq"), ("readlink", NPU),
               ("read", "sys/devices/system/cpu/cpu5/cpufreq/affected_cpus")) == [
        {"ok": "../cpufreq/policy4"}, {"ok": "../../devices/platform/fdab0000.npu/devfreq/fdab0000.npu"},
        {"ok": "4 5\n"}]
    glob = sh('cat "$R"/sys/class/devfreq/*.npu/cur_freq', board.root)
    assert (glob.returncode, glob.stdout) == (0, "1000000000\n")


def test_rv1126_kernel_4_19_refuses_min_above_max_at_the_write(make_board):
    board = make_board("rv1126")
    npu = "sys/class/devfreq/ffbc0000.npu"
    assert sh(f'echo 500000000 > "$R/{npu}/max_freq"', board.root).returncode == 0
    assert sh(f'echo 700000000 > "$R/{npu}/min_freq"', board.root).returncode != 0
    assert ops(board.root, ("write", f"{npu}/min_freq", "700000000\n"), ("read", f"{npu}/min_freq")) == \
        [{"errno": "EINVAL"}, {"ok": "200000000\n"}]
