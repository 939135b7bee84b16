"""The emulated board leaves the host as it found it (issue 9 item 7): its user, sudo and /run exist
only inside its own mount namespace; a killed emulator's board is powered off by its reaper, or by
the next start's sweep; a work dir others could write is refused.

Other sessions may run emulators of older rkdet versions beside these tests (they create host users
rkdetboard/rkdetsudo/rkdetbb and sudo rules for their ports): only what this instance could create
is compared (tests/host_leftovers.py).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from host_leftovers import alive, children, inventory

from rkdet.link import jobs
from rkdet.emulator import lifeline, users
from rkdet.emulator.mount import fuse_unavailable_reason
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import InputError


def _wait(predicate, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_board_user_sudo_and_run_exist_only_inside_the_board(tmp_path: Path) -> None:
    probe = f"/run/rkdet-hostsafe-probe-{os.getpid()}"
    with EmulatedBoard("rk3588", tmp_path / "w", "sudo") as b, b.connect() as c:
        paths = [b.workdir, b.board_dir]
        before = inventory(paths, [b.account.uid], [b.root], ports=[b.port])
        assert c.run(["id", "-u"]).out == f"{b.account.uid}\n"
        assert b.account.uid in users.UID_RANGE
        assert c.run(["sh", "-c", "getent passwd \"$(id -un)\" | cut -d: -f6"]).out == f"{b.home}\n"
        assert c.run(["sudo", "-n", "sh", "-c", f"mkdir -p /run/rkdet {probe} && id -u"]).out == "0\n"
        assert c.run(["ls", "/run"]).out.split() == sorted(["lock", "rkdet", probe.rsplit("/", 1)[1], "sshd"])
        with pytest.raises(KeyError):
            pwd.getpwuid(b.account.uid)  # the host does not know the board's user
        assert not Path(probe).exists()  # the board's /run is its own
    assert not Path(probe).exists()
    after = inventory(paths, [b.account.uid], [b.root], ports=[b.port])
    assert after.new_since(before) == {k: [] for k in after.new_since(before)}
    assert not after.processes and not after.mounts


def test_deploy_style_session_leaves_nothing_on_the_host(tmp_path: Path) -> None:
    """Start/stop as `rkdet demo` does (sudo variant, FUSE where possible) with a pin and a detached job."""
    before = inventory([tmp_path])
    sysfs = "plain" if fuse_unavailable_reason() else "fuse"
    with EmulatedBoard("rk3588", tmp_path / "w", "sudo", sysfs=sysfs) as b, b.connect() as c:
        uid, root, port, sshd = b.account.uid, b.root, b.port, b._proc.pid  # noqa: SLF001
        jobs.start(c, ["sleep", "300"], "~/j.pid", "~/j.log")
        c.run(["sudo", "-n", "env", f"RKDET_ROOT={root}", "sh", "-c", "mkdir -p /run/rkdet && echo x > /run/rkdet/s"])
        during = inventory([tmp_path], [uid], [root], [sshd], [port])
        assert during.processes and during.accounts == before.accounts
    after = inventory([tmp_path], [uid], [root], [sshd], [port])
    assert after.new_since(before) == {k: [] for k in after.new_since(before)}, after
    assert not Path("/run/rkdet/s").exists() or Path("/run/rkdet/s").read_text() != "x\n"


def _start_cli(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, dict[str, str]]:
    rkdet = Path(sys.executable).with_name("rkdet")
    proc = subprocess.Popen([str(rkdet), "emulator", "start", "--variant", "sudo", *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    info: dict[str, str] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "listening on" in line:
            info["target"] = line.split("listening on ", 1)[1].split()[0]
        if "RKDET_ROOT=" in line:
            info["root"] = line.split("RKDET_ROOT=", 1)[1].strip()
        if line.strip().startswith("or: rkdet deploy"):
            info["identity"] = line.split("--identity ", 1)[1].split()[0]
            info["known_hosts"] = line.split("--known-hosts ", 1)[1].split()[0]
            break
    assert "root" in info and "identity" in info, info
    return proc, info


def _cmdline(pid: int) -> list[bytes]:
    """argv of `pid`; empty for a moment while it is in execve (the Popen that started it may already
    have returned), so read again until it is set."""
    deadline = time.monotonic() + 5
    while True:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        if argv or time.monotonic() > deadline:
            return argv.split(b"\0")
        time.sleep(0.01)


def _board_of(proc: subprocess.Popen) -> tuple[int, list[int]]:
    """The emulator's sshd (its child running sshd) and its reaper pid(s), from its own process tree."""
    sshd, reapers = None, []
    for pid in children(proc.pid):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            argv = _cmdline(pid)
        except OSError:
            continue
        if exe == "/usr/sbin/sshd":
            sshd = pid
        if b"rkdet.emulator.lifeline" in argv:
            reapers.append(pid)
    assert sshd is not None
    return sshd, reapers


def _detached_job(info: dict[str, str]) -> int:
    from rkdet.link.ssh import BoardConnection

    with BoardConnection.open(info["target"], user="rkdetsudo", identity=Path(info["identity"]),
                              known_hosts=Path(info["known_hosts"]), system_known_hosts=None, ssh_config=None,
                              allow_agent=False) as c:
        return jobs.start(c, ["sleep", "300"], "~/j.pid", "~/j.log").pid


@pytest.mark.parametrize("sysfs", ["plain", "fuse"])
def test_killed_emulator_board_is_powered_off_by_its_reaper(tmp_path: Path, sysfs: str) -> None:
    if sysfs == "fuse" and fuse_unavailable_reason():
        sysfs = "plain"  # the plain case still proves the reaper
    proc, info = _start_cli(tmp_path, "--sysfs", sysfs)
    try:
        sshd, reapers = _board_of(proc)
        assert len(reapers) == 1
        job = _detached_job(info)
        assert alive(job)
        workdir = Path(info["identity"]).parent
        board_dir = Path(info["root"]).parent.parent if sysfs == "fuse" else Path(info["root"]).parent
        os.killpg(proc.pid, signal.SIGKILL)  # the emulator's whole process group, no chance to clean up
        proc.wait(timeout=10)
        assert _wait(lambda: not alive(sshd) and not alive(job) and not alive(reapers[0])), \
            (alive(sshd), alive(job))
        assert _wait(lambda: not workdir.exists() and not board_dir.exists()), (workdir, board_dir)
        assert not inventory([workdir, board_dir]).mounts
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_next_start_sweeps_a_board_whose_reaper_died_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator's own work dir is made in a temp dir of this test's (TMPDIR), not the shared /tmp:
    every EmulatedBoard start sweeps the temp dir's records whose owner died, so a start in another
    xdist worker would power the left-over board off before this test looks at it (CI: the board's
    sshd gone, `alive(3259)` False). The next start here sweeps that temp dir (tempfile.tempdir). It is
    beside pytest's 0700 tmp_path, not in it: the board user must reach the board dir made there."""
    own_tmp = Path(tempfile.mkdtemp(prefix="rkdet-test-tmp-"))
    os.chmod(own_tmp, 0o711)
    monkeypatch.setattr(tempfile, "tempdir", str(own_tmp))
    proc, info = _start_cli(tmp_path, "--sysfs", "plain", env={**os.environ, "TMPDIR": str(own_tmp)})
    try:
        sshd, reapers = _board_of(proc)
        assert len(reapers) == 1
        job = _detached_job(info)
        workdir = Path(info["identity"]).parent
        os.kill(reapers[0], signal.SIGKILL)  # our own tree's reaper: now nothing powers the board off
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait(lambda: not alive(reapers[0]))  # gone before it could have seen its pipe end
        assert workdir.parent == own_tmp, workdir  # out of every other start's sweep
        assert alive(sshd) and alive(job) and (workdir / lifeline.RECORD).exists(), (reapers, sshd, proc.pid)  # the leftovers
        with EmulatedBoard("rk3568", tmp_path / "next"):  # its start sweeps them
            assert not alive(sshd) and not alive(job)
            assert not workdir.exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        lifeline.sweep([])  # of own_tmp only: a failure above leaves no board running
        shutil.rmtree(own_tmp, ignore_errors=True)


def test_stop_after_sshd_ended_spares_what_runs_under_its_reused_pid(tmp_path: Path) -> None:
    """A board whose sshd already ended and was reaped (pull_cable, a crash) stops later (a fleet at its
    module's end): its old pid is free, and with pid_max 32768 the kernel hands it out again within
    minutes under the suite. stop() must not treat the pid's new owner as its listener and kill what runs
    under it (any process's children: another board's SSH connection, say)."""
    stranger = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    try:
        child = int(stranger.stdout.readline())
        board = EmulatedBoard("rk3588", tmp_path / "w").start()
        try:
            board.pull_cable()  # sshd killed and reaped: its pid is free
            assert board._proc is not None and board._proc.returncode is not None  # noqa: SLF001
            board._proc.pid = stranger.pid  # noqa: SLF001 - the kernel gave that pid to another process
        finally:
            board.stop()
        assert alive(child) and alive(stranger.pid)
    finally:
        os.killpg(stranger.pid, signal.SIGKILL)
        stranger.wait()


def test_a_work_dir_others_could_write_is_refused(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o777)
    os.chmod(loose, 0o777)
    with pytest.raises(InputError, match="writable by group or others"):
        EmulatedBoard("rk3588", loose).start()
    nobody = tmp_path / "nobody"
    nobody.mkdir(mode=0o700)
    os.chown(nobody, 65534, 65534)
    with pytest.raises(InputError, match="not owned by root"):
        EmulatedBoard("rk3588", nobody / "w").start()
    assert not (nobody / "w").exists() or not any((nobody / "w").iterdir())


def test_keys_left_readable_by_others_are_not_reused(tmp_path: Path) -> None:
    work = tmp_path / "w"
    with EmulatedBoard("rk3588", work):
        first = (work / "id_ed25519.pub").read_text()
    os.chmod(work / "id_ed25519", 0o644)  # someone could have read (or planted) it
    with EmulatedBoard("rk3588", work) as b, b.connect() as c:
        assert (work / "id_ed25519.pub").read_text() != first
        assert c.run(["true"]).rc == 0
    sshd_config = (work / "sshd_config").read_text()
    assert "StrictModes yes" in sshd_config and "AuthorizedKeysFile none" in sshd_config


def test_stale_legacy_sudo_rules_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    import socket

    d = tmp_path / "sudoers.d"
    d.mkdir()
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen()
        live_port = live.getsockname()[1]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead_port = s.getsockname()[1]  # bound, not listening
            rule = f"{users.LEGACY_RULE_MARKER}\nrkdetsudo ALL=(ALL) NOPASSWD: ALL\n"
            (d / f"rkdet-emulator-{dead_port}").write_text(rule)
            (d / f"rkdet-emulator-{live_port}").write_text(rule)
            (d / "rkdet-emulator-1").write_text("someone else's rule\n")
            assert users.sweep_legacy_sudo_rules(d) == [d / f"rkdet-emulator-{dead_port}"]
    assert sorted(p.name for p in d.iterdir()) == sorted([f"rkdet-emulator-{live_port}", "rkdet-emulator-1"])


def test_cleanup_removes_only_idle_users_created_by_older_emulators(tmp_path: Path) -> None:
    """`rkdet emulator cleanup`'s selection and removal, on users made for this test (never the shared
    legacy users: older emulators beside this test may be using them). A board running meanwhile keeps
    its own users although useradd/userdel replace the host's /etc/passwd and /etc/shadow by rename."""
    tag = f"{os.getpid() % 100000}"
    ours, busy, foreign = f"rkdetold{tag}", f"rkdetbusy{tag}", f"rkdetother{tag}"
    made = []
    sleeper = None
    board = EmulatedBoard("rk3588", tmp_path / "w", "busybox").start()
    try:
        for name, gecos in ((ours, users.MARKER), (busy, users.MARKER), (foreign, "someone else")):
            subprocess.run(["useradd", "--create-home", "--comment", gecos, name], check=True, capture_output=True)
            made.append(name)
        sleeper = subprocess.Popen(["setpriv", f"--reuid={pwd.getpwnam(busy).pw_uid}", "--clear-groups",
                                    "sleep", "60"])
        assert _wait(lambda: alive(sleeper.pid) and os.stat(f"/proc/{sleeper.pid}").st_uid != 0, 5)
        items = {i.what: i for i in users.legacy_leftovers((ours, busy, foreign))}
        assert items[f"user {ours}"].removable
        assert not items[f"user {busy}"].removable and "running processes" in items[f"user {busy}"].reason
        assert not items[f"user {foreign}"].removable and "not created by rkdet" in items[f"user {foreign}"].reason
        home = Path(pwd.getpwnam(ours).pw_dir)
        users.remove_legacy(items[f"user {ours}"])
        with pytest.raises(KeyError):
            pwd.getpwnam(ours)
        assert not home.exists()
        import grp

        with pytest.raises(KeyError):
            grp.getgrnam(ours)
        with board.connect() as c:  # the board's /etc did not follow the host's
            assert c.run(["id", "-u"]).out == f"{board.account.uid}\n"
            assert c.run(["sh", "-c", "mkdir ~/still-mine && echo ok"]).out == "ok\n"
    finally:
        board.stop()
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        for name in made:
            subprocess.run(["userdel", "--remove", name], capture_output=True)


def test_each_sudo_board_has_its_own_run_rkdet(tmp_path: Path) -> None:
    """pin.sh's default state dir under sudo is /run/rkdet: per board, so two boards on one host
    (or concurrent deploys to them) never share a pin state (issue 15)."""
    with EmulatedBoard("rk3588", tmp_path / "a", "sudo") as a, EmulatedBoard("rk3568", tmp_path / "b", "sudo") as b, \
            a.connect() as ca, b.connect() as cb:
        for conn, tag in ((ca, "board-a"), (cb, "board-b")):
            conn.run(["sudo", "-n", "sh", "-c", f"mkdir -p /run/rkdet && echo {tag} > /run/rkdet/pin.state"])
        assert ca.run(["cat", "/run/rkdet/pin.state"]).out == "board-a\n"
        assert cb.run(["cat", "/run/rkdet/pin.state"]).out == "board-b\n"
        assert a.account.uid != b.account.uid


def test_a_work_dir_in_use_by_a_live_emulator_is_refused(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c",
                             "import sys, time\nfrom rkdet.emulator.sshd import EmulatedBoard\n"
                             "with EmulatedBoard('rk3588', sys.argv[1]):\n    print('up', flush=True); time.sleep(60)\n",
                             str(tmp_path / "w")], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline() == "up\n"
        with pytest.raises(InputError, match=f"in use by the running emulator pid {proc.pid}"):
            EmulatedBoard("rk3588", tmp_path / "w").start()
        assert (tmp_path / "w" / lifeline.RECORD).exists() and (tmp_path / "w" / "etc" / "passwd").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
