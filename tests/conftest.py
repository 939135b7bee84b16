"""Root test configuration: shared fixtures (see tests/shared_build.py) and suite-wide guards."""

pytest_plugins = ("shared_build",)


# ==== host-knob guard (owner: board scripts) ==========================================================
# Tests write sysfs/procfs only under fake roots (RKDET_ROOT) or in private mount namespaces. This
# guard proves it: it READS this machine's real knobs at session start and again at session end, and
# fails the whole session loudly when any changed. tests/test_host_untouched.py checks it mid-run.
import glob as _glob  # noqa: E402

import pytest as _pytest  # noqa: E402

HOST_KNOB_FILES = ("/proc/sys/vm/compaction_proactiveness", "/sys/kernel/mm/transparent_hugepage/enabled")
_HOST_KNOBS_AT_START: dict = {}


def _read_knob(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return "<absent>"
    except OSError as err:
        return f"<unreadable: {err.strerror}>"


def _sys_proc_mounts() -> list:
    """Mounts at or under /sys and /proc, without the (volatile-looking) mount IDs."""
    entries = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split()
            point = fields[4] if len(fields) > 4 else ""
            if point in ("/sys", "/proc") or point.startswith(("/sys/", "/proc/")):
                entries.append(" ".join(fields[3:]))
    return sorted(entries)


def host_knob_snapshot() -> dict:
    """What the guard compares: real knob files (read only) and the /sys, /proc mount table."""
    paths = list(HOST_KNOB_FILES) + sorted(_glob.glob("/sys/devices/system/cpu/cpufreq/policy*/scaling_governor"))
    snap = {path: _read_knob(path) for path in paths}
    snap["mounts under /sys and /proc"] = "\n".join(_sys_proc_mounts())
    return snap


def host_knob_changes(before: dict, after: dict) -> list:
    """One line per knob whose value differs (or appeared/disappeared) between two snapshots."""
    return [f"{key}: {before.get(key, '<absent>')!r} -> {after.get(key, '<absent>')!r}"
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]


def pytest_sessionstart(session) -> None:
    _HOST_KNOBS_AT_START.clear()
    _HOST_KNOBS_AT_START.update(host_knob_snapshot())


def pytest_sessionfinish(session, exitstatus) -> None:
    if not _HOST_KNOBS_AT_START:
        return
    changes = host_knob_changes(_HOST_KNOBS_AT_START, host_knob_snapshot())
    if changes:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "THIS MACHINE'S REAL KERNEL KNOBS CHANGED DURING THE TEST SESSION:\n" + "\n".join(changes)
        if reporter is not None:
            reporter.write_sep("!", "host-knob guard")
            reporter.write_line(text, red=True, bold=True)
        else:
            print(text)
        session.exitstatus = _pytest.ExitCode.TESTS_FAILED


class HostGuard:
    """The guard's functions and its session-start snapshot, for tests/test_host_untouched.py."""

    snapshot = staticmethod(host_knob_snapshot)
    changes = staticmethod(host_knob_changes)

    @property
    def at_start(self) -> dict:
        return dict(_HOST_KNOBS_AT_START)


@_pytest.fixture(scope="session")
def host_guard() -> HostGuard:
    """Access to the host-knob guard (snapshot, compare, the session-start values)."""
    return HostGuard()
# ==== end of host-knob guard ===========================================================================
