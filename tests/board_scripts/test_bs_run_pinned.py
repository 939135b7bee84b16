"""run-pinned.sh: pin, run, and restore no matter how the run ends (exit, signal, hang-up).

The wrapper runs in its own session so a test can signal exactly it, and kill what is left of
its process group (by that id) at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rkdet.emulator.fake_tree import tree_digest
from rkdet.boardinfo.scripts import local_command, parse_pin, parse_records, parse_restore, run_script_locally, script_env
from bounds import ended_within

NPU_GOVERNOR = "sys/class/devfreq/fdab0000.npu/governor"


class Wrapper:
    """A running run-pinned.sh whose output goes to files: no pipe to fill up, and no pipe an
    orphaned child (after SIGKILL) would hold open."""

    def __init__(self, shell: str, root: Path, state: Path, out: Path, child: list[str], env: dict | None = None,
                 stdin: int | None = subprocess.DEVNULL) -> None:
        self.out = out
        self.err = out.with_suffix(".err")
        with out.open("wb") as stdout, self.err.open("wb") as stderr:
            self.proc = subprocess.Popen(local_command("run-pinned", shell, child), env=script_env(root, state, env),
                                         stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True)

    def wait(self, timeout: float = 60) -> int:
        self.proc.wait(timeout=timeout)
        return self.proc.returncode

    @property
    def stderr(self) -> str:
        return self.err.read_text()

    @property
    def records(self) -> list[dict]:
        return parse_records(self.out.read_text())

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)


@pytest.fixture
def wrappers() -> Iterator[list[Wrapper]]:
    started: list[Wrapper] = []
    yield started
    for w in started:
        w.kill_group()


def wait_for(path: Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text().strip()
        time.sleep(0.02)
    raise AssertionError(f"{path} did not appear within {timeout} s")


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_child_runs_pinned_and_its_exit_code_passes_through(shell: str, make_tree, state_dir: Path,
                                                              tmp_path: Path, wrappers: list) -> None:
    root = make_tree("rk3588")
    before = tree_digest(root)
    seen = tmp_path / "seen"
    child = ["sh", "-c", f'cat "$RKDET_ROOT/{NPU_GOVERNOR}" > "$1"; echo child-output; exit 7', "child", str(seen)]
    w = Wrapper(shell, root, state_dir, tmp_path / "out", child)
    wrappers.append(w)
    assert w.wait() == 7, w.stderr
    assert seen.read_text().strip() == "performance"  # the child ran on the pinned board
    assert "child-output" in w.out.read_text()  # its own output passes through, ignored by the parser
    recs = w.records
    assert parse_pin(recs).ok and parse_restore(recs).ok
    assert [r["status"] for r in recs if r["record"] == "child"] == ["started", "exited"]
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)],
                         ids=["TERM", "INT", "HUP"])
def test_signal_to_the_wrapper_stops_the_child_and_restores(sig: int, code: int, shell: str, make_tree,
                                                              state_dir: Path, tmp_path: Path, wrappers: list) -> None:
    root = make_tree("rk3568")
    before = tree_digest(root)
    marker = tmp_path / "started"
    child = ["sh", "-c", 'echo $$ > "$1"; exec sleep 60', "child", str(marker)]
    w = Wrapper(shell, root, state_dir, tmp_path / "out", child)
    wrappers.append(w)
    child_pid = int(wait_for(marker))
    assert (root / NPU_GOVERNOR.replace("fdab0000", "fde40000")).read_text() == "performance\n"
    w.proc.send_signal(sig)
    assert w.wait(timeout=60) == code, w.stderr
    assert not pid_alive(child_pid), "the child outlived the wrapper"
    recs = w.records
    assert [r["signal"] for r in recs if r["record"] == "signal"] == [signal.Signals(sig).name[3:]]
    assert parse_restore(recs).ok
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()


def test_sigkill_leaves_state_and_restore_repairs(shell: str, make_tree, state_dir: Path, tmp_path: Path,
                                                  wrappers: list) -> None:
    root = make_tree("rk3588")
    before = tree_digest(root)
    marker = tmp_path / "started"
    w = Wrapper(shell, root, state_dir, tmp_path / "out", ["sh", "-c", 'echo $$ > "$1"; exec sleep 60', "c", str(marker)])
    wrappers.append(w)
    child_pid = int(wait_for(marker))
    w.proc.kill()  # no trap can run
    assert w.wait() == -signal.SIGKILL
    assert (state_dir / "pin.state").is_file() and tree_digest(root) != before
    os.kill(child_pid, signal.SIGKILL)  # the orphan (a real board would keep it until it ends)
    gone_by = time.monotonic() + 30  # a killed process still holds the lock's fd until it has exited
    while pid_alive(child_pid) and time.monotonic() < gone_by:
        time.sleep(0.02)
    assert not pid_alive(child_pid), "a SIGKILLed sleep did not exit"
    rc, records = run_script_locally("restore", root, state_dir, shell=shell)
    assert rc == 0 and parse_restore(records).ok
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()


def test_refused_pin_runs_nothing(make_tree, state_dir: Path, tmp_path: Path, wrappers: list) -> None:
    root = make_tree("rk3568")
    before = tree_digest(root)
    marker = tmp_path / "ran"
    w = Wrapper("dash", root, state_dir, tmp_path / "out", ["touch", str(marker)], env={"RKDET_NPU_FREQ": "594000000"})
    wrappers.append(w)
    assert w.wait() == 125
    assert "pin failed (exit 2)" in w.stderr and not marker.exists()
    assert parse_pin(w.records).exit_code == 2
    assert tree_digest(root) == before


def test_strict_mode_refuses_a_partial_pin(make_tree, state_dir: Path, tmp_path: Path, wrappers: list) -> None:
    root = make_tree("rk3588")
    max_freq = root / "sys/class/devfreq/fdab0000.npu/max_freq"
    max_freq.unlink()
    max_freq.symlink_to("/dev/null")  # pin cannot read the NPU clock back: exit 1
    marker = tmp_path / "ran"
    w = Wrapper("dash", root, state_dir, tmp_path / "out", ["touch", str(marker)], env={"RKDET_PIN_STRICT": "1"})
    wrappers.append(w)
    assert w.wait() == 125 and not marker.exists()
    assert not (state_dir / "pin.state").exists()  # restored all the same
    w2 = Wrapper("dash", root, state_dir, tmp_path / "out2", ["touch", str(marker)])
    wrappers.append(w2)
    assert w2.wait() == 0 and marker.exists()  # without strict mode the run goes ahead, the report says why
    assert parse_pin(w2.records).status == "partial"


def test_restore_failure_after_the_run_is_exit_125(make_tree, state_dir: Path, tmp_path: Path, wrappers: list) -> None:
    root = make_tree("rk3588")
    governor = root / NPU_GOVERNOR
    child = ["sh", "-c", 'rm "$1" && ln -s /dev/null "$1"', "c", str(governor)]  # the restore write will vanish
    w = Wrapper("dash", root, state_dir, tmp_path / "out", child)
    wrappers.append(w)
    assert w.wait() == 125
    assert "restore failed" in w.stderr and "run restore.sh" in w.stderr
    assert (state_dir / "pin.state").is_file()


def test_stdin_reaches_the_child(make_tree, state_dir: Path, tmp_path: Path, wrappers: list) -> None:
    root = make_tree("rv1126")
    got = tmp_path / "got"
    w = Wrapper("busybox sh", root, state_dir, tmp_path / "out", ["sh", "-c", 'cat > "$1"', "c", str(got)],
                stdin=subprocess.PIPE)
    wrappers.append(w)
    w.proc.communicate(b"hello board\n", timeout=60)
    assert w.proc.returncode == 0, w.stderr
    assert got.read_text() == "hello board\n"


def test_child_ignoring_sigterm_is_killed_after_the_grace(make_tree, state_dir: Path, tmp_path: Path,
                                                          wrappers: list) -> None:
    root = make_tree("rk3588")
    before = tree_digest(root)
    marker = tmp_path / "started"
    child = ["sh", "-c", 'trap "" TERM; echo $$ > "$1"; while :; do sleep 1; done', "c", str(marker)]
    w = Wrapper("dash", root, state_dir, tmp_path / "out", child, env={"RKDET_KILL_GRACE": "1"})
    wrappers.append(w)
    child_pid = int(wait_for(marker))
    t0 = time.monotonic()
    w.proc.send_signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 143
    assert ended_within(t0, 1)  # the kill grace, not the child's endless loop
    assert not pid_alive(child_pid)
    assert tree_digest(root) == before


@pytest.mark.parametrize("shell_name", ["dash", "busybox sh", "bash --posix"])
@pytest.mark.parametrize("grace", ["x", "1+1", "a[$(touch MARK)]", "", "99999", "-1"])
def test_kill_grace_must_be_digits(shell_name: str, grace: str, make_tree, state_dir: Path, tmp_path: Path) -> None:
    """RKDET_KILL_GRACE goes into shell arithmetic: anything but digits is refused before pin runs."""
    root = make_tree("rk3588")
    before = tree_digest(root)
    ran = tmp_path / "ran"
    done = subprocess.run(local_command("run-pinned", shell_name, ["--", "touch", str(ran)]),
                          env=script_env(root, state_dir, {"RKDET_KILL_GRACE": grace}), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    if grace == "":  # empty means unset: the default grace
        assert done.returncode == 0 and ran.exists(), done.stderr
        return
    assert done.returncode == 2 and "RKDET_KILL_GRACE must be a whole number" in done.stderr, done.stderr
    assert not ran.exists() and not (tmp_path / "MARK").exists()
    assert tree_digest(root) == before


def test_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(local_command("run-pinned", "dash"), env=script_env(tmp_path, tmp_path),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "usage: run-pinned.sh" in done.stderr


@pytest.mark.parametrize("shell_name", ["dash", "busybox sh", "bash --posix"])
def test_dropped_output_channel_still_restores(shell_name: str, make_tree, state_dir: Path, tmp_path: Path,
                                               wrappers: list) -> None:
    """An SSH session without a pty gives no SIGHUP: the dead channel shows as SIGPIPE on a write."""
    root = make_tree("rk3588")
    before = tree_digest(root)
    marker = tmp_path / "started"
    child = ["sh", "-c", 'echo $$ > "$1"; while :; do echo tick || exit 9; sleep 0.1; done', "c", str(marker)]
    w = Wrapper.__new__(Wrapper)
    w.out, w.err = tmp_path / "unused", tmp_path / "err"
    with w.err.open("wb") as stderr:
        w.proc = subprocess.Popen(local_command("run-pinned", shell_name, child), env=script_env(root, state_dir),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                                  start_new_session=True)
    wrappers.append(w)
    wait_for(marker)
    w.proc.stdout.close()  # the connection drops
    assert w.wait(timeout=60) in (9, 141), w.stderr  # child noticed first (exit 9), or the wrapper did
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()
