"""The emulated board's front door: a real OpenSSH sshd on 127.0.0.1 with its own keys and config.

Why a real sshd and not a Python SSH server: deploy must meet what a board runs (OpenSSH on
Debian images, Dropbear without SFTP on Buildroot, busybox shells, sudo with env_reset), and
quoting, host keys, channel windows and detached jobs only prove anything against the real thing.
The session environment points the board scripts and the runner at the emulated hardware:
``RKDET_ROOT`` (fake sysfs/procfs tree), a PATH whose ``python3`` is this venv's python (numpy +
onnxruntime), and PYTHONPATH with the emulated ``rknnlite`` (``runtime_double/``, a test double:
its results are labelled emulated). The emulator is sshd's parent: it waits for it and cleans up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.emulator import hostile, lifeline, users
from rkdet.emulator.fake_tree import build_fake_tree
from rkdet.emulator.socs import SocProfile, with_compute
from rkdet.emulator.socs import profile as soc_profile
from rkdet.errors import BoardError, InputError
from rkdet.onboard.backend_table import NATIVE_EXEC_ENV

SSHD = Path("/usr/sbin/sshd")
ECHO = Path("/bin/echo")
RUNTIME_DOUBLE = Path(__file__).resolve().parent / "runtime_double"
CAPI_DOUBLE = Path(__file__).resolve().parent / "capi_double"  # the C runtime's double and the native launcher
_STD_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class SshdVariant:
    """What kind of board to emulate (login shell, SFTP, sudo)."""

    name: str
    user: str
    sftp: bool = True
    busybox: bool = False  # busybox ash login shell and a PATH of busybox applets only
    sudo: bool = False  # passwordless `sudo -n` for the login user (this instance only)
    sudo_password: bool = False  # TEST CONTROL: the sudo rule lacks NOPASSWD (`sudo -n` refuses: password required)
    hostile: bool = False  # TEST CONTROL: crafted listings, results and a stalling SFTP (hostile.py)


VARIANTS: dict[str, SshdVariant] = {
    "standard": SshdVariant("standard", "rkdetboard"),
    "nosftp": SshdVariant("nosftp", "rkdetboard", sftp=False),
    "busybox": SshdVariant("busybox", "rkdetbb", sftp=False, busybox=True),
    "sudo": SshdVariant("sudo", "rkdetsudo", sudo=True),
    "hostile": SshdVariant("hostile", "rkdetboard", hostile=True),
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _venv_python() -> Path:
    """This interpreter's venv python (not the base interpreter behind its symlink)."""
    candidate = Path(sys.prefix) / "bin" / "python3"
    return candidate if candidate.exists() else Path(sys.executable)


def _keygen(path: Path, comment: str) -> str:
    """An ed25519 key pair at `path`; returns the public key line."""
    res = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise BoardError(f"emulator: ssh-keygen failed: {res.stderr.strip()}")
    return path.with_name(path.name + ".pub").read_text().strip()


def _native_launcher(bindir: Path, python: Path, soc: str) -> Path:
    """The board's launcher for a native runner (NATIVE_EXEC_ENV): capi_double/board_exec.py, which runs
    the cross-compiled program for this SoC's architecture under qemu-user over the C runtime's double."""
    from rkdet import socs

    rknpu1 = socs.is_rknpu1(soc)
    launcher = bindir / "rkdet-native-exec"
    launcher.write_text(f"#!/bin/sh\nexec {_sh_quote(str(python))} {_sh_quote(str(CAPI_DOUBLE / 'board_exec.py'))} "
                        f"{'armhf rknpu1' if rknpu1 else 'aarch64 rknpu2'} \"$@\"\n")
    os.chmod(launcher, 0o755)
    return launcher


def _config_value(text: str) -> str:
    """A double-quoted sshd_config argument; sshd has no escape for quotes, and expands % tokens."""
    if any(c in text for c in '"\n%'):
        raise InputError(f"emulator: path {text!r} contains a quote, newline or %; use a plainer --dir")
    return f'"{text}"'


class EmulatedBoard:
    """A board on 127.0.0.1: `with EmulatedBoard("rk3588", tmp) as b: BoardConnection.open(b.target, ...)`.

    `workdir` keeps the sshd-side files (config, keys, log); files the board user must reach
    (home, PATH dir, fake tree, login shell) go to `workdir/board` when the user can traverse
    `workdir`, else to a private temp dir. Sessions see RKDET_ROOT, PATH (python3 first), PYTHONPATH
    (runtime double), HOME (per instance) and RKDET_EMULATED=1. `root` uses an existing tree instead of building one;
    otherwise `sysfs` picks the tree: "plain" (files owned by the board user, fast), "fuse" or
    "auto" (kernel semantics via `mount.emulated_sysfs`; `.sysfs.control` drives the thermal model).
    """

    def __init__(self, soc: str | SocProfile = "rk3588", workdir: str | Path | None = None,
                 variant: str | SshdVariant = "standard", *, root: str | Path | None = None, sysfs: str = "plain",
                 python: str | Path | None = None, env: dict[str, str] | None = None,
                 netns: str | None = None, listen: str = "127.0.0.1") -> None:
        try:  # a SoC name (its default profile) or a profile variant (a speed bin, an image without compaction)
            self.profile = soc if isinstance(soc, SocProfile) else soc_profile(soc)
        except KeyError as err:
            raise InputError(f"emulator: {err.args[0]}") from None
        compute = os.environ.get("RKDET_EMU_COMPUTE")  # TEST CONTROL: "fp32" makes the runtime double compute the
        if compute and "compute" not in json.loads(self.profile.runtime_control or "{}"):  # FP32 ONNX, not the
            try:  # build's INT8 emulation; in the image (socs.with_compute), so it holds under sudo
                self.profile = with_compute(self.profile, compute)
            except ValueError as err:
                raise InputError(f"emulator: RKDET_EMU_COMPUTE: {err}") from None
        if isinstance(variant, str):
            if variant not in VARIANTS:
                raise InputError(f"emulator: unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
            variant = VARIANTS[variant]
        if sysfs not in ("plain", "fuse", "auto"):
            raise InputError(f"emulator: sysfs backend {sysfs!r}: use plain, fuse or auto")
        self.variant = variant
        self.sysfs_backend = sysfs
        self.sysfs: Any = None  # rkdet.emulator.mount.EmulatedSysfs when served by mount.py
        self._stack = contextlib.ExitStack()
        self.soc = self.profile.soc
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="rkdet-emu-")) if workdir is None else Path(workdir).resolve()
        if not self.profile.serial:  # a board of its own: a serial that stays with its work dir across restarts
            serial = hashlib.sha256(str(self.workdir).encode()).hexdigest()[:16]
            self.profile = dataclasses.replace(self.profile, serial=serial)
        self._given_root = Path(root).resolve() if root is not None else None
        self.python = Path(python) if python else _venv_python()
        self._extra_env = dict(env or {})
        # `netns` (a network namespace the caller made, e.g. a test's jump-host lab: a path such as
        # /proc/PID/ns/net, or a name under /run/netns) runs sshd in it, listening on `listen`: a board only
        # another board can reach (issue 22)
        self.netns = netns
        self.host = listen
        self.port = 0
        self.user = variant.user
        self.identity_file = self.workdir / "id_ed25519"
        self.known_hosts_file = self.workdir / "known_hosts"
        self.ssh_config_file = self.workdir / "ssh_config"
        self.log_file = self.workdir / "sshd.log"
        self.alias = f"rkdet-emulator-{self.soc}"
        self.board_dir: Path | None = None
        self.root: Path = self._given_root or Path()
        self.home: Path = Path()
        self.env: dict[str, str] = {}
        self._proc: subprocess.Popen | None = None
        self.account: users.BoardAccount | None = None
        self._reaper: lifeline.Reaper | None = None
        self._claimed = False
        self._own_board_dir = False
        self._finalizer: weakref.finalize | None = None
        self._reach = users.Reach()  # host folders the board reaches through its namespace (_prepare_board_dir)

    # -- lifecycle --

    def __enter__(self) -> EmulatedBoard:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def target(self) -> str:
        """`host:port` for `BoardConnection.open` / `--board`."""
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def on_board_argv(self) -> list[str]:
        """argv prefix: run a command as root in the board's mount namespace (what the board sees,
        e.g. a mount on the board's side), never the host's."""
        if not self.running:
            raise BoardError("emulator: the board is not running")
        assert self._proc is not None
        return ["nsenter", "-t", str(self._proc.pid), "-m", "--"]

    def start(self) -> EmulatedBoard:
        """Check the work dir, sweep dead boards, create keys, the board's user and /etc files, tree
        and config; start sshd in its namespace, wait for its banner, arm the reaper."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> EmulatedBoard:
        users.require_root()
        if not SSHD.exists():
            raise BoardError(f"emulator: {SSHD} missing; install openssh-server (see .ci/setup)")
        _secure_workdir(self.workdir, given=not self._own_workdir)
        owner = lifeline.live_owner(self.workdir)
        if owner is not None and owner != os.getpid():
            raise InputError(f"emulator: {self.workdir} is in use by the running emulator pid {owner}; "
                             f"use another --dir")
        self._claimed = True  # from here on, stop() may clear the work dir's record and /etc files
        lifeline.sweep([] if self._own_workdir else [self.workdir])  # what killed emulators left
        users.sweep_legacy_sudo_rules()
        account = users.new_account(self.user, Path("/bin/sh"))
        self._prepare_board_dir(account)
        assert self.account is not None and self.board_dir is not None
        etc = self.workdir / "etc"
        shutil.rmtree(etc, ignore_errors=True)
        users.write_private_etc(etc, self.account, self.variant.sudo, nopasswd=not self.variant.sudo_password)
        host_pub = self._fresh_key(self.workdir / "ssh_host_ed25519_key", "rkdet-emulator-host")
        client_pub = self._fresh_key(self.identity_file, "rkdet-emulator-client")
        last_error = ""
        for _attempt in range(5):  # another process may grab the free port before sshd binds it
            self.port = free_port()
            self._write_sshd_config(client_pub)
            self._proc = self._spawn(etc)
            self._finalizer = weakref.finalize(self, _cleanup, self._proc, None)
            last_error = self._wait_ready()
            if not last_error:
                break
            self._finalizer()
        else:
            self.stop()
            raise BoardError(f"emulator: sshd did not start: {last_error} (log: {self.log_file})")
        try:
            keytype, keydata = host_pub.split()[:2]
            _atomic_write(self.known_hosts_file, f"[{self.host}]:{self.port} {keytype} {keydata}\n")
            _atomic_write(self.ssh_config_file, self._ssh_config_text())
            remove = [str(self.workdir)] if self._own_workdir else []
            if self._own_board_dir:
                remove.append(str(self.board_dir))
            inst = lifeline.Instance(os.getpid(), lifeline.start_time(os.getpid()) or 0, self._proc.pid,
                                     str(self.workdir / "sshd_config"), self.account.uid, str(self.root),
                                     str(self.workdir), remove)
            lifeline.write_record(self.workdir, inst)
            self._reaper = lifeline.Reaper(inst)
        except BaseException:
            self.stop()
            raise
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _cleanup, self._proc, self._reaper, self.account.uid, self.root)
        return self

    def power_off_sessions(self) -> None:
        """The first half of `stop()`: stand the reaper down, end the board's processes and stop its
        sshd (its mount namespace ends with them); the tree stays mounted until `stop()`. A board's
        namespace holds copies of the mounts that existed when it started, so boards started side by
        side (an emulated fleet) end all their namespaces first, then unmount: no FUSE daemon then
        waits for a namespace that still holds its mount. Idempotent."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None

    def stop(self) -> None:
        """Stand the reaper down, end the board's processes, stop sshd, unmount its tree and remove
        the temp dirs and namespace files this instance made; idempotent."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._stack.close()  # unmounts the FUSE tree, if any
        self._proc = None
        self._reaper = None
        if self._claimed:
            (self.workdir / lifeline.RECORD).unlink(missing_ok=True)
            shutil.rmtree(self.workdir / "etc", ignore_errors=True)
            self._claimed = False
        if self._own_board_dir and self.board_dir is not None:
            shutil.rmtree(self.board_dir, ignore_errors=True)
            self.board_dir = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def pull_cable(self, keep_pgid: int | None = None) -> list[int]:
        """TEST CONTROL: the board's network goes away. sshd stops listening and every open
        connection is cut (its processes killed, as a link drop ends them); processes in the
        process group `keep_pgid` (a detached job: it runs on, pins and restores the board as
        on a real board that lost its network) and jobs already detached from sshd keep running.
        Returns the pids killed. The board stays unreachable until `stop()`."""
        if not self.running:
            return []
        assert self._proc is not None
        listener = self._proc.pid
        parents: dict[int, int] = {}
        groups: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                fields = lifeline._stat_fields(int(entry))
                if fields is not None:
                    parents[int(entry)] = int(fields[1])
                    groups[int(entry)] = int(fields[2])
        under = []
        for pid in parents:
            cur, seen = pid, set()
            while cur in parents and cur not in seen and cur > 1:
                seen.add(cur)
                cur = parents[cur]
                if cur == listener:
                    if keep_pgid is None or groups.get(pid) != keep_pgid:
                        under.append(pid)
                    break
        self._proc.kill()  # no new connections from now on
        self._proc.wait(timeout=5)
        for pid in under:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return sorted(under)

    # -- pieces --

    def _fresh_key(self, path: Path, comment: str) -> str:
        """The key pair at `path`, generated unless a previous start in this workdir left one: a
        board keeps its host key across reboots, so known_hosts entries stay valid. Reused only
        from a root-only work dir (`_secure_workdir`) and when the files are root's, regular and
        not readable or writable by others; anything else is replaced by a fresh pair."""
        pub = path.with_name(path.name + ".pub")
        if _root_only_file(path) and _root_only_file(pub, allow_read=True):
            return pub.read_text().strip()
        for p in (path, pub):
            p.unlink(missing_ok=True)
        return _keygen(path, comment)

    def _prepare_board_dir(self, account: users.BoardAccount) -> None:
        """home, bin (python3 wrapper; busybox applets), the fake tree: all owned by the board user
        (sets `self.account`, whose home is `board_dir/home` and shell a busybox link there)."""
        entry = account
        if users.traversable_by(self.workdir, entry):
            self.board_dir = self.workdir / "board"
            if self.board_dir.exists():
                shutil.rmtree(self.board_dir)
            self.board_dir.mkdir()
        else:
            self.board_dir = Path(tempfile.mkdtemp(prefix="rkdet-board-"))
            self._own_board_dir = True
        os.chmod(self.board_dir, 0o755)
        self.home = self.board_dir / "home"
        bindir = self.board_dir / "bin"
        self.home.mkdir()
        bindir.mkdir()
        shell = users.busybox_shell(self.board_dir) if self.variant.busybox else account.shell
        self.account = entry = dataclasses.replace(account, home=self.home, shell=shell)
        if self._given_root is None and self.sysfs_backend == "plain":
            self.root = build_fake_tree(self.profile, self.board_dir / "root")
            users.chown_tree(self.root, entry)
        elif self._given_root is None:
            from rkdet.emulator.mount import emulated_sysfs

            sysfs_dir = self.board_dir / "sysfs"
            (sysfs_dir / "control").mkdir(parents=True)
            users.chown_tree(sysfs_dir / "control", entry)  # the emulated runtime writes its load there
            self.sysfs = self._stack.enter_context(emulated_sysfs(self.profile, sysfs_dir, self.sysfs_backend))
            self.root = self.sysfs.root
            if self.sysfs.backend == "plain":
                users.chown_tree(self.root, entry)
        elif not users.traversable_by(self.root, entry):
            raise InputError(f"emulator: {self.root} is not reachable by user {self.user}; "
                             f"give a root under a world-searchable directory")
        if not self.python.exists():
            raise InputError(f"emulator: python {self.python} not found")
        # what the board user runs (the interpreter, its venv, the emulated runtime) may sit behind a 0700
        # folder (a clone in /root, a venv under a private home or temp dir): reached in the namespace
        self._reach = users.reach_plan([*_python_prefixes(self.python), RUNTIME_DOUBLE, CAPI_DOUBLE], entry,
                                       also_keep=[self.workdir, self.board_dir, self.root])
        board_python = self.python
        wrapper = bindir / "python3"
        wrapper.write_text(f"#!/bin/sh\nexec {_sh_quote(str(board_python))} \"$@\"\n")
        if self.variant.hostile:  # TEST CONTROL: see hostile.py
            hostile.install(bindir, str(board_python))
            wrapper.write_text(hostile.wrapper_text(str(board_python), bindir))
            hostile.write_control(self.board_dir)
        os.chmod(wrapper, 0o755)
        native = _native_launcher(bindir, wrapper, self.soc)
        if self.variant.busybox:
            applets = subprocess.run([str(users.BUSYBOX), "--list"], capture_output=True, text=True).stdout.split()
            for name in applets:
                if name != "python3":
                    os.symlink(users.BUSYBOX, bindir / name)
        users.chown_tree(self.home, entry)
        # the double computes with the onnx-fp32 reference's one session definition (rkdet.onboard.reference):
        # rkdet-run carries it in rkdet-onboard.pyz; a plain script on the board finds it in this copy (the
        # checkout itself may be a 0700 clone the board user cannot read)
        from rkdet.onboard import program

        (self.board_dir / "lib").mkdir()
        onboard = program.build(str(self.board_dir / "lib"))
        path = str(bindir) if self.variant.busybox else f"{bindir}:{_STD_PATH}"
        self.env = {"RKDET_ROOT": str(self.root), "PATH": path, "PYTHONPATH": f"{RUNTIME_DOUBLE}:{onboard}",
                    "HOME": str(self.home), "RKDET_EMULATED": "1", NATIVE_EXEC_ENV: str(native), **self._extra_env}

    def _write_sshd_config(self, client_pub: str) -> None:
        setenv = " ".join(_config_value(f"{k}={v}") for k, v in self.env.items())
        keytype, keydata = client_pub.split()[:2]
        lines = [
            f"Port {self.port}",
            f"ListenAddress {self.host}",
            f"HostKey {_config_value(str(self.workdir / 'ssh_host_ed25519_key'))}",
            "PidFile none",
            # the one client key, in the root-only config itself: no key file a board user could edit
            "AuthorizedKeysFile none",
            f"AuthorizedKeysCommand {ECHO} {keytype} {keydata}",
            "AuthorizedKeysCommandUser nobody",
            "StrictModes yes",
            "UsePAM no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin no",
            f"AllowUsers {self.user}",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "MaxSessions 100",
            "MaxStartups 100:30:200",
            "LogLevel INFO",
            f"SetEnv {setenv}",
        ]
        if self.variant.hostile:
            assert self.board_dir is not None
            lines.append(f"Subsystem sftp {hostile.sftp_command(str(self.board_dir / 'bin' / 'python3'), self.board_dir / 'bin')}")
        elif self.variant.sftp:
            lines.append("Subsystem sftp internal-sftp")
        _atomic_write(self.workdir / "sshd_config", "\n".join(lines) + "\n")

    def _spawn(self, etc: Path) -> subprocess.Popen:
        """sshd in the board's own mount namespace (its users, sudo and /run; see users.py)."""
        # the config test runs where sshd will: in the board's namespace, whose fresh /run has /run/sshd
        # (a host where OpenSSH never ran as a service has none, and rkdet never creates it there)
        test = subprocess.run([*self._netns_prefix(), *users.namespace_prefix(etc, self._reach), str(SSHD), "-t",
                               "-f", str(self.workdir / "sshd_config")],
                              capture_output=True, text=True, timeout=60)
        if test.returncode != 0:
            raise BoardError(f"emulator: sshd rejects its config: {test.stderr.strip()}")
        log = open(self.log_file, "ab")
        try:
            return subprocess.Popen([*self._netns_prefix(), *users.namespace_prefix(etc, self._reach), str(SSHD), "-D", "-e",
                                     "-f", str(self.workdir / "sshd_config")],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()

    def _netns_prefix(self) -> list[str]:
        """argv prefix entering the board's network namespace (none: the host's); nsenter execs, so the pid stays."""
        if not self.netns:
            return []
        path = self.netns if self.netns.startswith("/") else f"/run/netns/{self.netns}"
        return ["nsenter", f"--net={path}", "--"]

    def _wait_ready(self, timeout: float = 10.0) -> str:
        """'' once sshd answers with a banner; else why it did not (it may have lost the port)."""
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = self.log_file.read_text(errors="replace").strip().splitlines()
                return tail[-1] if tail else f"sshd exited {self._proc.returncode}"
            if self.netns:  # the host may not reach it (that is the point): sshd says when it listens
                if f"Server listening on {self.host} port {self.port}" in self.log_file.read_text(errors="replace"):
                    return ""
                time.sleep(0.02)
                continue
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as s:
                    s.settimeout(2)
                    if s.recv(8).startswith(b"SSH-"):
                        return ""
            except OSError:
                time.sleep(0.02)
        self._proc.terminate()
        return f"no banner on port {self.port} within {timeout:g} s"

    def _ssh_config_text(self) -> str:
        return (f"Host {self.alias}\n  HostName {self.host}\n  Port {self.port}\n  User {self.user}\n"
                f"  IdentityFile {_config_value(str(self.identity_file))}\n  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile {_config_value(str(self.known_hosts_file))}\n  StrictHostKeyChecking yes\n")

    # -- ways in --

    def ssh_argv(self) -> list[str]:
        """An OpenSSH command line reaching this board (strict host keys, its own known_hosts)."""
        return ["ssh", "-F", str(self.ssh_config_file), self.alias]

    def connect(self, **kwargs: Any):
        """A `BoardConnection` to this board with its key and known_hosts (kwargs override)."""
        from rkdet.link.ssh import BoardConnection

        opts: dict[str, Any] = dict(user=self.user, identity=self.identity_file, known_hosts=self.known_hosts_file,
                                    system_known_hosts=None, ssh_config=None, allow_agent=False)
        opts.update(kwargs)
        return BoardConnection.open(self.target, **opts)


def _python_prefixes(python: Path) -> list[Path]:
    """The folders `python` runs from: its venv (sys.prefix), the interpreter's own (sys.base_prefix) and
    every folder on its sys.path (a .pth may add one from elsewhere, e.g. another venv's site-packages)."""
    code = ("import os, sys; print(sys.prefix); print(sys.base_prefix); "
            "[print(p) for p in sys.path if p and os.path.isdir(p)]")
    try:
        probe = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BoardError(f"emulator: cannot run {python}: {err}") from None
    if probe.returncode != 0:
        raise BoardError(f"emulator: {python} failed: {probe.stderr.strip().splitlines()[-1:]}")
    return list(dict.fromkeys(Path(line) for line in probe.stdout.splitlines() if line.strip()))


def _sh_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _atomic_write(path: Path, text: str) -> None:
    from rkdet.records.io import write_atomic  # the one atomic writer

    write_atomic(str(path), text)


def _root_only_file(path: Path, allow_read: bool = False) -> bool:
    """A regular file (not a link) owned by root that group/others cannot write (nor read, unless allowed)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    bad = 0o022 if allow_read else 0o077
    return stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & bad


def _secure_workdir(workdir: Path, given: bool) -> None:
    """Refuse a work dir that someone other than root could write (it holds the board's host key,
    the client key, sshd_config and the board's /etc): such a dir, or a parent of it writable by
    others without the sticky bit, would let its writer swap keys and log in with the board's sudo."""
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for part in [workdir, *workdir.parents]:
        st = part.stat()
        sticky = part != workdir and st.st_mode & stat.S_ISVTX
        if st.st_uid != 0 or (st.st_mode & 0o022 and not sticky):
            what = "--dir" if given else "work dir"
            raise InputError(f"emulator: {what} {workdir}: {part} is "
                             f"{'not owned by root' if st.st_uid != 0 else 'writable by group or others'}; "
                             f"use a directory only root can write (e.g. mkdir -m 700)")


def board_processes(listener: int | None, uid: int, root: Path) -> list[int]:
    """This board's processes (see lifeline.board_processes)."""
    return lifeline.board_processes(listener, uid, root)


def _cleanup(proc: subprocess.Popen, reaper: lifeline.Reaper | None, uid: int | None = None,
             root: Path | None = None) -> None:
    """Power the board off: stand its reaper down, end its sessions and detached jobs, stop sshd.
    Runs at stop() or at interpreter exit."""
    if reaper is not None:
        reaper.disarm()
    # sshd's pid names the listener only while sshd is ours: once it ended and was reaped (pull_cable, a crash)
    # the kernel may hand that pid to any process (pid_max 32768 wraps within minutes under the suite), and
    # everything under it would be killed as "this board's sessions" (another board's SSH connection, say: a
    # possible cause of a CI pull whose SFTP session closed, "Socket is closed"). Unreaped, the pid stays ours.
    listener = proc.pid if proc.poll() is None else None
    if uid is not None and root is not None:
        for pid in board_processes(listener, uid, root):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
