"""Remote commands: quoting, draining, timeouts, sudo, busybox shell, detached jobs."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import job_helpers

from rkdet.link import jobs
from rkdet.link.shell import build_command, remote_command
from rkdet.link.ssh import BoardConnection, Timeouts
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import EXIT_BOARD, BoardError, InputError
from bounds import ended_within

FAST = Timeouts(connect=5, banner=5, auth=5, command=60, keepalive=5)
NASTY = "a b;$(touch x)'\"`touch y`|&<>*?~ \\n"


def test_remote_command_quotes_every_argument() -> None:
    assert remote_command(["echo", "a b", "$(x)"]) == "echo 'a b' '$(x)'"
    with pytest.raises(InputError):
        remote_command([])
    assert build_command(["id"], sudo=True) == "sudo -n -- id"
    assert build_command(["id"], sudo=True, env={"A": "x y"}, keep_env=["B"]) == "sudo -n env B=\"$B\" 'A=x y' id"
    with pytest.raises(InputError):
        build_command(["id"], keep_env=["A;rm"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40))
def test_any_argument_reaches_the_board_verbatim(conn: BoardConnection, text: str) -> None:
    assert conn.run(["printf", "%s", text]).out == text


def test_shell_metacharacters_in_paths_execute_nothing(conn: BoardConnection, remote_tmp: str) -> None:
    weird = f"{remote_tmp}/{NASTY}"
    conn.run(["mkdir", "-p", weird])
    conn.run(["sh", "-c", 'printf hi > "$1/f"', "sh", weird])
    assert conn.run(["cat", f"{weird}/f"]).out == "hi"
    listing = conn.run(["find", remote_tmp, conn.home, "-maxdepth", "1"]).out  # where an injected `touch` lands
    assert "/x\n" not in listing and "/y\n" not in listing
    assert conn.run(["ls", remote_tmp]).out == NASTY + "\n"


def test_large_output_on_both_streams_is_drained(conn: BoardConnection) -> None:
    # stderr first, then stdout: without draining both, the channel window fills and this hangs
    script = "head -c 6000000 /dev/zero | tr '\\0' e >&2; head -c 5000000 /dev/zero | tr '\\0' o; echo done >&2"
    rc, out, err = conn.run(["sh", "-c", script], timeout=60)
    assert rc == 0 and len(out) == 5_000_000 and set(out) == {"o"}
    assert len(err) == 6_000_005 and err.endswith("done\n")


def test_nonzero_exit_raises_board_error_unless_unchecked(conn: BoardConnection) -> None:
    with pytest.raises(BoardError, match=r"exited 3: boom") as info:
        conn.run(["sh", "-c", "echo boom >&2; exit 3"])
    assert info.value.exit_code == EXIT_BOARD
    assert conn.run(["sh", "-c", "exit 3"], check=False).rc == 3


def test_command_timeout_is_enforced_and_the_command_killed(conn: BoardConnection, remote_tmp: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(BoardError, match="timed out after 0.5 s") as info:
        conn.run(["sh", "-c", 'echo $$ > "$1"; sleep 30; echo late > "$1.late"', "sh", f"{remote_tmp}/pid"],
                 timeout=0.5)
    assert info.value.exit_code == EXIT_BOARD and ended_within(t0, 0.5)
    pid = conn.run(["cat", f"{remote_tmp}/pid"]).out.strip()
    deadline = time.monotonic() + 5
    while conn.run(["test", "-e", f"/proc/{pid}"], check=False).rc == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert conn.run(["test", "-e", f"/proc/{pid}"], check=False).rc != 0  # the session was signalled
    assert conn.run(["echo", "still usable"]).out == "still usable\n"


def test_stdin_is_fed(conn: BoardConnection) -> None:
    assert conn.run(["wc", "-c"], stdin=b"x" * 100_000).out.strip() == "100000"


def test_session_environment_points_at_the_emulated_board(conn: BoardConnection, board: EmulatedBoard) -> None:
    assert conn.getenv("RKDET_ROOT") == str(board.root)
    assert conn.getenv("RKDET_NOT_SET_ANYWHERE") is None
    model = conn.run(["cat", f"{board.root}/proc/device-tree/model"]).out
    assert model.rstrip("\0") == "Radxa ROCK 5B"
    out = conn.run(["python3", "-c", "import numpy, onnxruntime, sys; print(numpy.__version__, sys.path)"]).out
    assert out.startswith("1.26.4") and "runtime_double" in out
    assert conn.default_workdir() == f"{board.home}/.cache/rkdet"


def test_sudo_variant_runs_as_root_and_keeps_requested_env(boards) -> None:
    board = boards["sudo"]
    with board.connect(timeouts=FAST) as c:
        assert c.run(["id", "-u"], sudo=True).out.strip() == "0"
        show = ["sh", "-c", 'printf "%s|%s" "$RKDET_ROOT" "$MY"']
        # sudo resets the environment: the board's RKDET_ROOT is gone unless kept explicitly
        assert c.run(show, sudo=True).out == "|"
        assert c.run(show, sudo=True, keep_env=["RKDET_ROOT"], env={"MY": "a b"}).out == f"{board.root}|a b"


def test_sudo_without_rule_says_so(conn: BoardConnection) -> None:
    with pytest.raises(BoardError, match="a password is required") as info:
        conn.run(["id"], sudo=True)
    assert info.value.exit_code == EXIT_BOARD


def test_busybox_shell_variant(boards) -> None:
    board = boards["busybox"]
    out = bytearray()
    with board.connect(timeouts=FAST) as c:
        busybox = os.path.realpath("/bin/busybox")
        assert c.run(["readlink", "-f", "/proc/self/exe"]).out.strip() == busybox  # PATH: applets only
        # the login shell itself is busybox: $0 and the interpreter of the shell running the line
        assert c.stream("readlink -f /proc/$$/exe", stdout=lambda b: out.extend(b)) == 0
        assert out.decode().strip() == busybox
        assert c.run(["printf", "%s", NASTY]).out == NASTY
        assert c.sftp() is None


def _detached_roundtrip(board: EmulatedBoard) -> None:
    with board.connect(timeouts=FAST) as first:
        base = f"{first.home}/job {NASTY[:8]}"
        first.run(["mkdir", "-p", base])
        pidfile, logfile = f"{base}/job.pid", f"{base}/job.log"
        job = jobs.start(first, ["sh", "-c", 'echo "started $1"; exec sleep 60', "sh", "arg;x"], pidfile, logfile)
        assert job.pid > 1 and jobs.is_running(first, job)
    # the first connection is gone; the job lives on and a new connection re-attaches to it
    with board.connect(timeouts=FAST) as second:
        again = jobs.attach(second, pidfile, logfile)
        assert again.pid == job.pid and jobs.is_running(second, again)
        deadline = time.monotonic() + 5
        while b"started" not in job_helpers.read_log(second, again) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job_helpers.read_log(second, again) == b"started arg;x\n"
        assert job_helpers.read_log(second, again, offset=8) == b"arg;x\n"
        job_helpers.kill(second, again, grace=2)
        assert not jobs.is_running(second, again)
        assert jobs.exit_code(second, again) is None  # killed, not finished
        done = jobs.start(second, ["sh", "-c", "exit 7"], f"{base}/b.pid", f"{base}/b.log")
        assert jobs.wait(second, done, timeout=10) == 7
        # liveness and a report in one round trip: the report's arguments are quoted like any other
        lines = f"{base}/{NASTY}.txt"
        counting = jobs.start(second, ["sh", "-c", 'for i in 1 2 3; do echo $i >> "$1"; sleep 0.2; done; exit 3',
                                       "sh", lines], f"{base}/c.pid", f"{base}/c.log")
        reports: list[str] = []
        assert jobs.wait(second, counting, timeout=10, poll=0.05, max_poll=0.3, report=('wc -l < "$1"', lines),
                         on_report=reports.append) == 3
        assert reports[-1].strip() == "3" and len(reports) >= 2  # once more after the job ended
        assert jobs.running_and(second, counting, 'echo "$2/$1"', "a b", "c;d") == (False, "c;d/a b\n")
        second.run(["rm", "-rf", base])


def test_detached_job_survives_disconnect_and_is_reattached(board: EmulatedBoard) -> None:
    _detached_roundtrip(board)


def test_detached_job_on_busybox_board(boards) -> None:
    _detached_roundtrip(boards["busybox"])


def test_detached_job_with_sudo(boards) -> None:
    board = boards["sudo"]
    with board.connect(timeouts=FAST) as c:
        job = jobs.start(c, ["sh", "-c", "id -u; sleep 60"], "/tmp/rkdet-sudo-job.pid", "/tmp/rkdet-sudo-job.log",
                               sudo=True)
        try:
            assert jobs.is_running(c, job)
            deadline = time.monotonic() + 5
            while not job_helpers.read_log(c, job) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert job_helpers.read_log(c, job) == b"0\n"
        finally:
            job_helpers.kill(c, job, grace=2)
        assert not jobs.is_running(c, job)
        c.run(["rm", "-f", job.pidfile, job.logfile], sudo=True)


@pytest.mark.parametrize("variant", ["standard", "busybox"])
def test_signal_reaches_a_job_whose_leader_ended_but_whose_group_lives_on(boards, variant: str) -> None:
    """The detach wrapper has exited (exit code written); a child it left in the background is still in the
    job's group and session: signal finds the group by scanning /proc (dash and busybox ash) and stops it."""
    with boards[variant].connect(timeouts=FAST) as conn:
        remote_tmp = f"{conn.home}/orphan-{os.getpid()}"
        conn.run(["mkdir", "-p", remote_tmp])
        try:
            _orphan_is_signalled(conn, remote_tmp)
        finally:
            conn.run(["rm", "-rf", remote_tmp], check=False)


def _orphan_is_signalled(conn: BoardConnection, remote_tmp: str) -> None:
    pidfile = f"{remote_tmp}/orphan.pid"
    job = jobs.start(conn, ["sh", "-c", 'sleep 60 & echo $! > "$1"', "sh", f"{remote_tmp}/child"], pidfile,
                     f"{remote_tmp}/orphan.log")
    assert jobs.wait(conn, job, timeout=10, poll=0.05) == 0
    child = conn.run(["cat", f"{remote_tmp}/child"]).out.strip()
    assert conn.run(["test", "-e", f"/proc/{child}"], check=False).rc == 0
    jobs.signal(conn, job, "KILL")
    deadline = time.monotonic() + 5
    while conn.run(["test", "-e", f"/proc/{child}"], check=False).rc == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert conn.run(["test", "-e", f"/proc/{child}"], check=False).rc != 0


@pytest.mark.parametrize("kind", ["group leader of another session", "session leader after the job ended"])
def test_signal_spares_a_process_that_took_the_jobs_pid(boards, tmp_path, kind: str) -> None:
    """After a job ended its pid can be reused; a signal to the old job must not reach the new owner's group.
    On the sudo board the signal is sent as root and the board shares this host's processes, so a process
    started here (as root) stands in for the stranger that took the pid."""
    import subprocess
    if kind.startswith("group"):
        stranger = subprocess.Popen(["sleep", "60"], process_group=0)  # pgid = pid, but not a session leader
    else:
        stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)  # pid = pgid = sid, like a job
    try:
        with boards["sudo"].connect(timeouts=FAST) as c:
            pidfile = f"{c.home}/old-{os.getpid()}-{stranger.pid}.pid"
            c.run(["sh", "-c", 'echo "$1" > "$2"; echo 0 > "$2.rc"', "sh", str(stranger.pid), pidfile])
            try:
                jobs.signal(c, jobs.DetachedJob(stranger.pid, pidfile, pidfile + ".log", sudo=True), "KILL")
            finally:
                c.run(["rm", "-f", pidfile, pidfile + ".rc"])
        try:  # a KILL sent by the board's shell has landed before its command returned; wait() makes sure
            stranger.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()
