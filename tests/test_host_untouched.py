"""This machine's real kernel knobs stay untouched: the guard in conftest.py, checked mid-session.

The guard reads (never writes) compaction_proactiveness, THP, every cpufreq governor and the
/sys, /proc mount table at session start and fails the session at the end if any changed. Here we
check that it sees what it should, that it would notice a change, and that a full pin/restore
cycle of the board scripts against a fake root leaves the host exactly as it was.
"""

from __future__ import annotations

import os
from pathlib import Path

from rkdet.board.fake_tree import build_fake_tree
from rkdet.board.scripts import run_board_script
from rkdet.board.socs import PROFILES


def test_guard_reads_the_real_knobs(host_guard) -> None:
    snap = host_guard.snapshot()
    assert "/proc/sys/vm/compaction_proactiveness" in snap
    assert "/sys/kernel/mm/transparent_hugepage/enabled" in snap
    mounts = snap["mounts under /sys and /proc"].splitlines()
    assert any(" /sys " in f" {m} " for m in mounts), mounts
    assert any(" /proc " in f" {m} " for m in mounts), mounts
    if os.path.exists("/proc/sys/vm/compaction_proactiveness"):
        assert snap["/proc/sys/vm/compaction_proactiveness"].strip().isdigit()


def test_guard_notices_a_change(host_guard) -> None:
    before = host_guard.snapshot()
    after = dict(before, **{"/proc/sys/vm/compaction_proactiveness": "0\n"})
    if before["/proc/sys/vm/compaction_proactiveness"] == "0\n":
        after["/proc/sys/vm/compaction_proactiveness"] = "20\n"
    changes = host_guard.changes(before, after)
    assert len(changes) == 1 and changes[0].startswith("/proc/sys/vm/compaction_proactiveness")
    assert host_guard.changes(before, dict(before)) == []


def test_host_unchanged_so_far(host_guard) -> None:
    assert host_guard.at_start, "the session-start snapshot was not taken"
    assert host_guard.changes(host_guard.at_start, host_guard.snapshot()) == []


def test_pin_restore_on_fake_root_leaves_host_alone(host_guard, tmp_path: Path) -> None:
    before = host_guard.snapshot()
    root = build_fake_tree(PROFILES["rk3588"], tmp_path / "root")
    env = {"RKDET_THP": "never", "RKDET_CPUIDLE_DEEP": "disable"}
    rc, _ = run_board_script("pin", root, tmp_path / "state", env=env)
    assert rc == 0
    assert (root / "proc/sys/vm/compaction_proactiveness").read_text() == "0\n"  # the fake one moved
    assert host_guard.changes(before, host_guard.snapshot()) == []  # the real one did not
    rc, _ = run_board_script("restore", root, tmp_path / "state")
    assert rc == 0
    assert host_guard.changes(before, host_guard.snapshot()) == []
