"""pytest plugin: this machine's real kernel knobs stay untouched by the tests (READ ONLY).

Tests write sysfs/procfs only under fake roots (RKDET_ROOT) or in private mount namespaces. This
guard proves it: it reads every knob class the board scripts can write (cpufreq governor, min/max,
setspeed; devfreq governor, min/max, userspace set_freq; cpuidle state disable; THP enabled and
defrag; compaction_proactiveness; thermal zone mode) and the /sys, /proc mount table

* before and after every test module (an autouse module-scoped fixture: a change fails the last
  test of the module that made it, even if a later module would put the value back), and
* at session start and end (a change fails the session: exit status 1 and a banner).

Never writes anything. `RKDET_HOST_GUARD_ROOT` points it at a fake tree instead of "/": for the
guard's own self-test only (tests/test_host_untouched.py runs an inner session against one).
Loaded by tests/conftest.py (`pytest_plugins`).
"""

from __future__ import annotations

import glob
import os

import pytest

#: every class of knob that board_scripts/*.sh can write, relative to the root (glob patterns)
KNOB_PATTERNS = (
    "proc/sys/vm/compaction_proactiveness",
    "sys/kernel/mm/transparent_hugepage/enabled",
    "sys/kernel/mm/transparent_hugepage/defrag",
    "sys/kernel/mm/transparent_hugepage/shmem_enabled",
    "sys/kernel/mm/transparent_hugepage/khugepaged/defrag",
    "sys/kernel/mm/transparent_hugepage/hugepages-*/enabled",
    "sys/devices/system/cpu/cpufreq/policy*/scaling_governor",
    "sys/devices/system/cpu/cpufreq/policy*/scaling_min_freq",
    "sys/devices/system/cpu/cpufreq/policy*/scaling_max_freq",
    "sys/devices/system/cpu/cpufreq/policy*/scaling_setspeed",
    "sys/devices/system/cpu/cpu[0-9]*/cpuidle/state*/disable",
    "sys/class/devfreq/*/governor",
    "sys/class/devfreq/*/min_freq",
    "sys/class/devfreq/*/max_freq",
    "sys/class/devfreq/*/userspace/set_freq",
    "sys/class/thermal/thermal_zone*/mode",
)
MOUNTS_KEY = "mounts under /sys and /proc"
RUN_KEY = "rkdet's possible marks in /run"
#: what a mount namespace's mount(8) (libmount's utab), sshd or the board scripts would leave in the
#: host's /run if a namespace were set up wrong: none may appear or vanish during the suite
RUN_MARKS = ("run/mount", "run/sshd", "run/rkdet", "run/lock/rkdet-emulator.lock")
BANNER = "THIS MACHINE'S REAL KERNEL KNOBS CHANGED DURING THE TEST SESSION"
MODULE_BANNER = "THIS MACHINE'S REAL KERNEL KNOBS CHANGED IN TEST MODULE"
_AT_START: dict = {}


def guard_root() -> str:
    """"/" (the real machine), or the self-test's fake tree."""
    return os.environ.get("RKDET_HOST_GUARD_ROOT", "/")


def _read_knob(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return "<absent>"
    except OSError as err:
        return f"<unreadable: {err.strerror}>"


def _sys_proc_mounts(root: str) -> list:
    """Mounts at or under /sys and /proc, without the (volatile-looking) mount IDs."""
    entries = []
    try:
        with open(os.path.join(root, "proc/self/mountinfo"), encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                point = fields[4] if len(fields) > 4 else ""
                if point in ("/sys", "/proc") or point.startswith(("/sys/", "/proc/")):
                    entries.append(" ".join(fields[3:]))
    except FileNotFoundError:
        pass
    return sorted(entries)


def host_knob_snapshot(root: str | None = None) -> dict:
    """What the guard compares, keyed by real path: knob files (read only) and the mount table."""
    root = root or guard_root()
    snap = {}
    for pattern in KNOB_PATTERNS:
        full = os.path.join(root, pattern)
        matches = sorted(glob.glob(full)) if glob.has_magic(pattern) else [full]
        for path in matches:
            snap["/" + os.path.relpath(path, root)] = _read_knob(path)
    snap[MOUNTS_KEY] = "\n".join(_sys_proc_mounts(root))
    snap[RUN_KEY] = " ".join(m for m in RUN_MARKS if os.path.lexists(os.path.join(root, m)))
    return snap


def host_knob_changes(before: dict, after: dict) -> list:
    """One line per knob whose value differs (or appeared/disappeared) between two snapshots."""
    return [f"{key}: {before.get(key, '<absent>')!r} -> {after.get(key, '<absent>')!r}"
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]


def pytest_sessionstart(session) -> None:
    _AT_START.clear()
    _AT_START.update(host_knob_snapshot())


def pytest_sessionfinish(session, exitstatus) -> None:
    if not _AT_START:
        return
    changes = host_knob_changes(_AT_START, host_knob_snapshot())
    if changes:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = f"{BANNER}:\n" + "\n".join(changes)
        if reporter is not None:
            reporter.write_sep("!", "host-knob guard")
            reporter.write_line(text, red=True, bold=True)
        else:
            print(text)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="module", autouse=True)
def _host_knobs_per_module(request):
    """Fails the module's last test (at teardown) when a real knob changed during the module."""
    before = host_knob_snapshot()
    yield
    changes = host_knob_changes(before, host_knob_snapshot())
    if changes:
        pytest.fail(f"{MODULE_BANNER} {request.module.__name__}:\n" + "\n".join(changes), pytrace=False)


class HostGuard:
    """The guard's functions and its session-start snapshot, for tests/test_host_untouched.py."""

    snapshot = staticmethod(host_knob_snapshot)
    changes = staticmethod(host_knob_changes)
    patterns = KNOB_PATTERNS

    @property
    def at_start(self) -> dict:
        return dict(_AT_START)


@pytest.fixture(scope="session")
def host_guard() -> HostGuard:
    """Access to the host-knob guard (snapshot, compare, the session-start values)."""
    return HostGuard()
