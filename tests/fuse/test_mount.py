"""Mount lifecycle, fallback and the private-mount-namespace mode."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fuse_helpers
import pytest
from fuse_helpers import CLIENT_TIMEOUT_S, NPU, POLICY0, ops, read, require_fuse, sh

from rkdet.emulator import mount as mount_mod
from rkdet.emulator.mount import EmulatedSysfs, emulated_sysfs, mount_entry, namespace_argv
from rkdet.emulator.sysfs_fuse import profile_from_json, profile_to_json
from rkdet.emulator.socs import PROFILES, RK3588, rk3588
from rkdet.errors import EXIT_BOARD, BoardError, InputError


def _host_view() -> tuple[str, bool, str | None]:
    compaction = Path("/proc/sys/vm/compaction_proactiveness")
    return (Path("/proc/self/mountinfo").read_text(), Path("/sys/class/devfreq").exists(),
            compaction.read_text() if compaction.exists() else None)


def test_namespace_mode_shows_emulated_sys_at_real_paths_and_host_is_unchanged(board):
    assert sh(f'echo 77 > "$R/proc/sys/vm/compaction_proactiveness" && echo performance > "$R/{NPU}/governor"',
              board.root).returncode == 0
    before = _host_view()
    script = ("cat /sys/class/devfreq/*.npu/cur_freq; cat /proc/sys/vm/compaction_proactiveness; "
              "cat /proc/sys/kernel/osrelease")
    inside = subprocess.run(namespace_argv(board.root) + ["sh", "-c", script], capture_output=True, text=True,
                            timeout=CLIENT_TIMEOUT_S)
    assert inside.returncode == 0, inside.stderr
    lines = inside.stdout.splitlines()
    assert lines[0] == "1000000000"
    assert lines[-1] == RK3588.kernel
    if before[2] is not None:
        assert lines[1] == "77"
    assert _host_view() == before  # same mount table, still no devfreq, compaction untouched


def test_namespace_mode_hides_the_hosts_knob_an_image_without_it_lacks(tmp_path):
    """An image without CONFIG_COMPACTION: inside the namespace the knob is absent (as on that board)
    and a write aimed at it cannot reach this machine's real /proc/sys/vm/compaction_proactiveness."""
    require_fuse()
    before = _host_view()
    with emulated_sysfs(rk3588(compaction=False), tmp_path / "w", backend="fuse") as board:
        assert not (board.root / "proc/sys/vm/compaction_proactiveness").exists()
        script = ('test -e /proc/sys/vm/compaction_proactiveness && echo present || echo absent; '
                  'echo 0 > /proc/sys/vm/compaction_proactiveness 2>/dev/null && echo wrote || echo refused')
        inside = subprocess.run(namespace_argv(board.root) + ["sh", "-c", script], capture_output=True, text=True,
                                timeout=CLIENT_TIMEOUT_S)
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split() == ["absent", "refused"]
    assert _host_view() == before


def test_namespace_mode_fails_cleanly_when_the_root_has_no_sys(tmp_path):
    require_fuse()
    before = _host_view()
    done = subprocess.run(namespace_argv(tmp_path) + ["true"], capture_output=True, text=True,
                          timeout=CLIENT_TIMEOUT_S)
    assert done.returncode != 0
    assert _host_view() == before


def test_daemon_exits_and_mount_goes_away_with_the_context(tmp_path):
    require_fuse()
    with emulated_sysfs(RK3588, tmp_path) as handle:
        assert handle.backend == "fuse" and mount_entry(handle.root) == "fuse.rkdet"
        assert os.environ.get("RKDET_ROOT") != str(handle.root)
    assert handle.process is not None and handle.process.returncode == 0
    assert mount_entry(handle.root) is None
    assert not handle.daemon_errors()


def test_a_stale_mount_of_a_killed_daemon_is_cleared_before_mounting(tmp_path):
    require_fuse()
    with emulated_sysfs("rk3588", tmp_path) as first:
        assert first.process is not None
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(timeout=5)
        dead = subprocess.run(["stat", str(first.root / "sys")], capture_output=True, text=True, timeout=5)
        assert dead.returncode != 0 and "not connected" in dead.stderr
        with emulated_sysfs("rk3588", tmp_path) as second:
            assert read(second.root, f"{NPU}/cur_freq") == "1000000000\n"  # rknpu_ondemand holds 1 GHz
        assert not second.daemon_errors()
    assert mount_entry(tmp_path / "root") is None


def test_a_customised_profile_is_served(tmp_path):
    require_fuse()
    custom = dataclasses.replace(RK3588, model="Test Board 9000", compaction_proactiveness=33)
    assert profile_from_json(profile_to_json(custom)) == custom
    with emulated_sysfs(custom, tmp_path) as handle:
        assert ops(handle.root, ("read", "proc/device-tree/model"), ("read", "proc/sys/vm/compaction_proactiveness")) \
            == [{"ok": "Test Board 9000\x00"}, {"ok": "33\n"}]


@pytest.mark.parametrize("soc", sorted(PROFILES))
def test_profiles_round_trip_through_json(soc):
    assert profile_from_json(profile_to_json(PROFILES[soc])) == PROFILES[soc]


def test_auto_falls_back_to_the_plain_tree_and_says_so_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(mount_mod, "fuse_unavailable_reason", lambda: "no /dev/fuse")
    with caplog.at_level(logging.WARNING, logger="rkdet.emulator"):
        with emulated_sysfs("rv1126", tmp_path, backend="auto") as handle:
            assert (handle.backend, handle.reason) == ("plain", "no /dev/fuse")
            assert (handle.root / "sys/class/devfreq/ffbc0000.npu/cur_freq").read_text() == "600000000\n"
            assert handle.control_dir.is_dir()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no /dev/fuse" in warnings[0] and "plain tree" in warnings[0]
    with pytest.raises(BoardError) as err:
        with emulated_sysfs("rv1126", tmp_path / "f", backend="fuse"):
            pass
    assert err.value.exit_code == EXIT_BOARD and "no /dev/fuse" in str(err.value)


def test_bad_arguments_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="rk9999"):
        with emulated_sysfs("rk9999", tmp_path):
            pass
    with pytest.raises(InputError, match="backend"):
        with emulated_sysfs("rk3588", tmp_path, backend="nfs"):
            pass


def test_daemon_errors_reports_tracebacks(tmp_path):
    log = tmp_path / "sysfs.log"
    handle = EmulatedSysfs(tmp_path, "fuse", tmp_path, log_path=log)
    log.write_text("2026 INFO store x 'y' -> ok\n")
    assert handle.daemon_errors() == []
    log.write_text("2026 ERROR Uncaught exception from FUSE operation read, returning errno.EINVAL.\n"
                   "Traceback (most recent call last):\n  File ...\nKeyError: 'x'\n")
    assert len(handle.daemon_errors()) == 2


def test_daemon_logs_a_handler_bug_with_its_traceback(tmp_path, monkeypatch):
    """A bug in a handler reaches the caller as EINVAL; the log must carry the traceback."""
    require_fuse()
    # sitecustomize in the daemon's path breaks one handler: a real Python error inside the daemon.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "from rkdet.emulator import kernel\n"
        "def broken(self, rel):\n    raise KeyError('injected bug')\n"
        "kernel.KernelBoard.listdir = broken\n")
    monkeypatch.setenv("PYTHONPATH", f"{hook}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    with emulated_sysfs("rk3588", tmp_path / "w") as handle:
        assert ops(handle.root, ("listdir", NPU)) == [{"errno": "EINVAL"}]
        time.sleep(0.05)
        errors = handle.daemon_errors()
    assert any(line.startswith("Traceback") for line in errors), errors
    assert "injected bug" in handle.log_path.read_text()


def test_a_non_root_user_gets_the_other_mode_bits(tmp_path):
    """Login users on the board are not root: 0444 readable, 0644 not writable, 0400 not readable."""
    require_fuse()
    work = Path(tempfile.mkdtemp(prefix="rkdet-fuse-user-"))
    try:
        work.chmod(0o755)  # let the user reach the mount point
        with emulated_sysfs("rk3588", work) as handle:
            root = handle.root
            policy = f"{root}/sys/devices/system/cpu/cpufreq/policy0"
            script = (f'cat {root}/{NPU}/cur_freq || exit 10; '
                      f'cat {policy}/cpuinfo_cur_freq 2>/dev/null && exit 11; '
                      f'echo performance 2>/dev/null > {root}/{NPU}/governor && exit 12; '
                      f'test -w {root}/{NPU}/governor && exit 13; '
                      f'test -r {policy}/scaling_cur_freq || exit 14; exit 0')
            as_user = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "dash", "-c",
                                      script], capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
            assert (as_user.returncode, as_user.stdout) == (0, "1000000000\n"), as_user.stderr
            assert read(root, f"{NPU}/governor") == "rknpu_ondemand\n"
            assert sh(f'cat "$R/{POLICY0}/cpuinfo_cur_freq"', root).stdout == "1200000\n"  # root may
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_daemon_unmounts_when_its_parent_is_killed(tmp_path):
    """A killed test run (SIGKILL, no cleanup) must not leave a mount or a daemon behind."""
    require_fuse()
    code = ("import sys, time; from pathlib import Path; from rkdet.emulator.mount import emulated_sysfs\n"
            "ctx = emulated_sysfs('rk3568', Path(sys.argv[1])); h = ctx.__enter__()\n"
            "print(h.process.pid, flush=True); time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        daemon_pid = int(parent.stdout.readline())  # type: ignore[union-attr]
        assert mount_entry(tmp_path / "root") == "fuse.rkdet"
    finally:
        parent.kill()
        parent.wait(timeout=5)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (mount_entry(tmp_path / "root") or Path(f"/proc/{daemon_pid}").exists()):
        time.sleep(0.1)
    assert mount_entry(tmp_path / "root") is None
    assert not Path(f"/proc/{daemon_pid}").exists() or "zombie" in Path(f"/proc/{daemon_pid}/status").read_text()
    log = (tmp_path / "sysfs.log").read_text()
    assert "parent process" in log and "after the parent exited" in log and "Traceback" not in log


def test_ci_fails_instead_of_skipping_when_fuse_is_missing(monkeypatch):
    monkeypatch.setattr(fuse_helpers, "fuse_unavailable_reason", lambda: "no /dev/fuse")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no /dev/fuse"):
        require_fuse()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="no /dev/fuse"):
        require_fuse()


def test_daemon_bad_arguments_are_one_line_usage_errors(tmp_path):
    bad_json = tmp_path / "profile.json"
    bad_json.write_text("{not json")
    for extra in (["--soc", "rk9999"], ["--profile", str(bad_json)]):
        done = subprocess.run([sys.executable, "-m", "rkdet.emulator.sysfs_fuse", *extra, "--mount",
                               str(tmp_path / "m"), "--control", str(tmp_path / "c"), "--log", str(tmp_path / "log")],
                              capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("rkdet-sysfs: error:")
