"""This machine's real kernel knobs stay untouched: the guard (tests/host_guard.py), checked here.

The guard reads (never writes) every knob class the board scripts can write and the /sys, /proc
mount table, per test module and per session, and fails the run if any changed. Here we check that
it covers every file pin.sh changes, that it would notice a change, that its session hook and its
per-module check each fail a real (inner) pytest run, and that a full pin/restore cycle of the board
scripts against a fake root leaves the host exactly as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import host_guard as guard

from rkdet.emulator.fake_tree import build_fake_tree, tree_digest
from rkdet.boardinfo.scripts import run_script_locally
from rkdet.emulator.socs import PROFILES

TESTS = Path(__file__).resolve().parent


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
    rc, _ = run_script_locally("pin", root, tmp_path / "state", env=env)
    assert rc == 0
    assert (root / "proc/sys/vm/compaction_proactiveness").read_text() == "0\n"  # the fake one moved
    assert host_guard.changes(before, host_guard.snapshot()) == []  # the real one did not
    rc, _ = run_script_locally("restore", root, tmp_path / "state")
    assert rc == 0
    assert host_guard.changes(before, host_guard.snapshot()) == []


PIN_EVERYTHING = {"RKDET_THP": "never", "RKDET_CPUIDLE_DEEP": "disable", "RKDET_CPU_GOVERNOR": "userspace"}


def test_guard_covers_every_file_pin_changes(tmp_path: Path) -> None:
    """Every file pin.sh writes on a fake board (all options on) matches one of the guard's patterns."""
    for soc in sorted(PROFILES):
        root = build_fake_tree(PROFILES[soc], tmp_path / soc / "root")
        before = tree_digest(root)
        rc, out = run_script_locally("pin", root, tmp_path / soc / "state", env=PIN_EVERYTHING)
        assert rc == 0, out
        changed = sorted(k for k, v in tree_digest(root).items() if before.get(k) != v)
        assert changed, soc
        # what the guard reads on that tree, by real path (/sys/class/devfreq/* are links into devices/)
        read = {os.path.realpath(f"{root}{key}") for key in guard.host_knob_snapshot(str(root)) if key not in (guard.MOUNTS_KEY, guard.RUN_KEY)}
        uncovered = [rel for rel in changed if os.path.realpath(root / rel) not in read]
        assert uncovered == [], f"{soc}: pin writes knobs the host guard does not read: {uncovered}"


def _fake_host(root: Path) -> Path:
    knob = root / "proc/sys/vm/compaction_proactiveness"
    knob.parent.mkdir(parents=True)
    knob.write_text("20\n")
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/mountinfo").write_text("22 1 0:21 / /sys rw - sysfs sysfs rw\n")
    thp = root / "sys/kernel/mm/transparent_hugepage/enabled"
    thp.parent.mkdir(parents=True)
    thp.write_text("always [madvise] never\n")
    return knob


def _inner_pytest(inner: Path, fake: Path, *files: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RKDET_HOST_GUARD_ROOT": str(fake), "PYTHONPATH": f"{TESTS}{os.pathsep}{TESTS.parent}"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "host_guard",
                           "--rootdir", str(inner), *[str(inner / f) for f in files]],
                          capture_output=True, text=True, env=env, cwd=inner, timeout=120)


_WRITE = ("import os\n"
          "def write(value):\n"
          "    with open(os.path.join(os.environ['RKDET_HOST_GUARD_ROOT'], 'proc/sys/vm/compaction_proactiveness'),"
          " 'w') as f:\n"
          "        f.write(value)\n")


def test_guard_fails_a_real_run_per_module_and_per_session(tmp_path: Path) -> None:
    """Inner pytest sessions with the guard pointed at a fake tree (the real /proc is never written)."""
    fake = tmp_path / "fake"
    knob = _fake_host(fake)
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "writer.py").write_text(_WRITE)
    (inner / "conftest.py").write_text(
        "import sys, os, pytest\nsys.path.insert(0, os.path.dirname(__file__))\nfrom writer import write\n"
        "@pytest.fixture(scope='session')\ndef late_writer():\n    yield\n    write('0\\n')\n")
    (inner / "test_a_changes.py").write_text("from writer import write\ndef test_a():\n    write('0\\n')\n")
    (inner / "test_b_restores.py").write_text("from writer import write\ndef test_b():\n    write('20\\n')\n")
    (inner / "test_c_late.py").write_text("def test_c(late_writer):\n    pass\n")
    (inner / "test_d_clean.py").write_text("def test_d():\n    pass\n")

    clean = _inner_pytest(inner, fake, "test_d_clean.py")
    assert clean.returncode == 0, clean.stdout[-2000:]

    # changed in one module, put back by the next: the session compare alone would miss it
    per_module = _inner_pytest(inner, fake, "test_a_changes.py", "test_b_restores.py")
    assert per_module.returncode == 1, per_module.stdout[-2000:]
    assert f"{guard.MODULE_BANNER} test_a_changes" in per_module.stdout
    assert "/proc/sys/vm/compaction_proactiveness: '20\\n' -> '0\\n'" in per_module.stdout
    assert guard.BANNER not in per_module.stdout and knob.read_text() == "20\n"

    # changed after every module's check (a session fixture's teardown): the session hook fails the run
    late = _inner_pytest(inner, fake, "test_c_late.py")
    assert late.returncode == 1, late.stdout[-2000:]
    assert "1 passed" in late.stdout and guard.BANNER in late.stdout
    assert "/proc/sys/vm/compaction_proactiveness: '20\\n' -> '0\\n'" in late.stdout


def test_the_real_guard_reads_the_real_machine() -> None:
    assert guard.guard_root() == "/", "RKDET_HOST_GUARD_ROOT is for the guard's self-test only"
