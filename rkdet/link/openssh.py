"""Bulk bytes through OpenSSH's own client over a ControlMaster, beside paramiko (`OpenSshStreams`).

Why: paramiko does the SSH packet work in Python (a cipher call and BufferedPipe copies per 32 KiB
packet, on the GIL); OpenSSH's `ssh` does it in C, in its own process. Streamed pushes and pulls of
files of 32 MiB and more on a connection that keeps moving them go through it, and smaller verified
uploads while its master is up (64 MiB, loaded 2-CPU
A/B, host CPU: push 101 vs 161 ms with the client reading the pushed file itself, pull 141 vs 200 ms:
bench/results/ssh.md; rules in `BoardConnection.bulk_streams`). A fresh `ssh` per file would pay a handshake (~120 ms of host CPU,
~300 ms of wall) each time, so one master runs per `BoardConnection`, started on demand, ended with
it or by itself MASTER_IDLE_S after its last client. It is as strict as paramiko's connection:
BatchMode (never a prompt), StrictHostKeyChecking=yes against a known_hosts holding only the host
key paramiko's connection verified, the connection's own key files only (no agent, no user
ssh_config: `-F /dev/null`), a client that cannot connect on its own if the master is gone
(ProxyCommand=false), and the same quoted command lines. Anything else (no `ssh` on PATH, agent or
password auth, a jump host, a master that does not come up) leaves the connection on paramiko.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import IO

import paramiko

from rkdet.errors import BoardError
from rkdet.link.target import Target

_CHUNK = 1 << 20
_PIPE_BYTES = 1 << 20  # pipe buffers to and from the client (64 KiB by default: 16x more wakeups)
_SOCKET_PATH_MAX = 100  # AF_UNIX paths are at most 107 bytes
_CIPHERS = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr,aes256-ctr"
# the master goes to the background once up (its exit 0 says so) and ends by itself after this many
# seconds without a client: a killed rkdet leaves nothing running for longer; a master idle for
# _RESTART_IDLE_S is replaced before a stream rather than raced against its own timer
MASTER_IDLE_S = 30
_RESTART_IDLE_S = 20


def available(target: Target) -> bool:
    """True when this connection may use OpenSSH's client: `ssh` on PATH, no jump host, key files."""
    return (shutil.which("ssh") is not None and not target.proxy_jump
            and any(Path(p).expanduser().is_file() for p in target.identities))


def _host_key_algorithms(key: paramiko.PKey) -> str:
    name = key.get_name()
    return "rsa-sha2-512,rsa-sha2-256" if name == "ssh-rsa" else name


def _grow_pipe(stream: IO[bytes] | None) -> None:
    with contextlib.suppress(OSError, AttributeError):
        if stream is not None:
            fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)


class OpenSshStreams:
    """One ControlMaster to a board and the commands streamed through it (see the module docstring)."""

    def __init__(self, target: Target, host_key: paramiko.PKey, start_timeout: float) -> None:
        self._target = target
        self._host_key = host_key
        self._start_timeout = start_timeout
        self._dir: Path | None = None
        self._used = 0.0  # when a stream last ended (the master's idle timer)
        self._finalizer: weakref.finalize | None = None
        self.why_not = ""  # what the master said when it did not come up

    @property
    def _control(self) -> Path:
        assert self._dir is not None
        return self._dir / "ctl"

    def _common(self) -> list[str]:
        assert self._dir is not None
        tgt = self._target
        return ["-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={self._dir / 'known_hosts'}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", f"HostKeyAlgorithms={_host_key_algorithms(self._host_key)}",
                "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
                "-o", f"ControlPath={self._control}", "-p", str(tgt.port), "-l", tgt.user]

    def ready(self) -> bool:
        """Up and not about to end on its idle timer (else closed: start it again)."""
        if self._dir is not None and self._control.exists() and time.monotonic() - self._used < _RESTART_IDLE_S:
            return True
        self.close()
        return False

    def start(self) -> bool:
        """Start the master and wait (bounded) until it is up; False, all undone, when it does not come up."""
        self._dir = Path(tempfile.mkdtemp(prefix="rkdet-ssh-"))
        self._finalizer = weakref.finalize(self, _end, self._dir)
        if len(str(self._control)) > _SOCKET_PATH_MAX or any(c.isspace() for c in str(self._dir)):
            self.close()  # a socket path too long, or a TMPDIR with spaces (ssh splits UserKnownHostsFile on them)
            return False
        tgt = self._target
        (self._dir / "known_hosts").write_text(
            f"{tgt.host_key_name} {self._host_key.get_name()} {self._host_key.get_base64()}\n")
        keys = [a for p in tgt.identities if Path(p).expanduser().is_file() for a in ("-i", str(Path(p).expanduser()))]
        argv = ["ssh", "-M", "-N", *self._common(), *keys, "-o", "ControlMaster=yes",
                "-o", f"ControlPersist={MASTER_IDLE_S}",
                "-o", f"ConnectTimeout={max(1, int(self._start_timeout))}", "-o", "ServerAliveInterval=15",
                "-o", "ServerAliveCountMax=3", "-o", f"Ciphers={_CIPHERS}", "-o", "ClearAllForwardings=yes",
                "-o", "PermitLocalCommand=no", "--", tgt.hostname]
        with open(self._dir / "master.log", "wb") as log:
            starter = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                       env={k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"},
                                       start_new_session=True)
        try:
            rc = starter.wait(self._start_timeout)  # 0 once authenticated and in the background
        except subprocess.TimeoutExpired:
            starter.kill()
            starter.wait()
            rc = -1
        if rc == 0 and self._control.exists():
            self._used = time.monotonic()
            return True
        with contextlib.suppress(OSError):
            self.why_not = (self._dir / "master.log").read_text("utf-8", "replace").strip()[-500:]
        self.close()
        return False

    def stream(self, command: str, *, stdout: Callable[[bytes], object] | None,
               stderr: Callable[[bytes], object] | None, stdin: IO[bytes] | bytes | None, deadline: float,
               on_send: Callable[[int], object] | None, label: str, what: str, limit: float) -> int:
        """Run a quoted command line through the master, as BoardConnection.stream does: both outputs
        drained, a deadline on the whole (`limit` s: the client is killed at it); its exit code.
        `stdin`: a reader that is a whole file (`direct_fd()`: a streamed push), handed over as the
        client's stdin, so the client reads it itself (no copy through Python and a pipe), or None.
        BoardError when the client could not reach the board through the master (exit 255)."""
        assert self._dir is not None
        direct = stdin.direct_fd() if stdin is not None else None  # type: ignore[union-attr]
        if stdin is not None and direct is None:
            raise TypeError("OpenSshStreams.stream takes a whole file's reader (direct_fd) or no stdin")
        argv = ["ssh", *self._common(), "-o", "ControlMaster=no", "-o", "ProxyCommand=false", "-T", "--",
                self._target.hostname, command]
        proc = subprocess.Popen(argv, stdin=direct if direct is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                env={k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"})
        _grow_pipe(proc.stdout)
        failed: list[BaseException] = []
        timed_out = threading.Event()
        tail = bytearray()

        def kill() -> None:
            timed_out.set()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

        def drain(pipe: IO[bytes], sink: Callable[[bytes], object] | None, keep: bool) -> None:
            try:
                while data := pipe.read1(_CHUNK):  # type: ignore[attr-defined]
                    if keep:
                        del tail[:max(0, len(tail) + len(data) - 4096)]
                        tail.extend(data[-4096:])
                    if sink is not None and not failed:
                        sink(data)
            except BaseException as err:  # noqa: BLE001  # a sink's refusal (over its cap): stop the command
                failed.append(err)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()

        watchdog = threading.Timer(max(0.001, deadline - time.monotonic()), kill)
        watchdog.start()
        err_thread = threading.Thread(target=drain, args=(proc.stderr, stderr, True), daemon=True)
        err_thread.start()
        try:
            drain(proc.stdout, stdout, False)  # type: ignore[arg-type]
            if direct is not None and on_send:
                on_send(os.fstat(direct).st_size)
            err_thread.join(max(0.001, deadline - time.monotonic()))
            rc = proc.wait(max(0.001, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill()
            proc.wait()
            rc = -1
        finally:
            watchdog.cancel()
            self._used = time.monotonic()
            if proc.poll() is None:  # left by any other exit (Ctrl-C, a sink's or on_send's error): its own
                with contextlib.suppress(ProcessLookupError):  # session takes no Ctrl-C, so end it here
                    proc.kill()
                proc.wait()
        if failed and not isinstance(failed[0], BrokenPipeError):
            raise failed[0]
        if timed_out.is_set():
            raise BoardError(f"{label}: `{what}` timed out after {limit:g} s")
        if rc == 255:
            said = tail.decode("utf-8", "replace").strip().splitlines()
            raise BoardError(f"{label}: connection lost during `{what}` (OpenSSH's client: "
                             f"{said[-1] if said else 'exit 255'})")
        return rc

    def close(self) -> None:
        """End the master (`ssh -O exit`, then SIGTERM to its pid) and remove its folder; safe twice.
        Also run when the object is collected or the interpreter exits without a close."""
        self._dir = None
        if self._finalizer is not None:
            self._finalizer()

    @property
    def master_pid(self) -> int | None:
        """The master's pid while it runs (`ssh -O check`), else None."""
        return _master_pid(self._dir) if self._dir is not None else None


def _master_pid(folder: Path) -> int | None:
    control = folder / "ctl"
    if not control.exists():
        return None
    try:
        said = subprocess.run(["ssh", "-F", "/dev/null", "-S", str(control), "-O", "check", "rkdet-master"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=5).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"pid=(\d+)", said)
    return int(found.group(1)) if found else None


def _end(folder: Path) -> None:
    """End the master whose control socket is in `folder`, then remove the folder."""
    pid = _master_pid(folder)
    if pid is not None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["ssh", "-F", "/dev/null", "-S", str(folder / "ctl"), "-O", "exit", "rkdet-master"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=5)
        deadline = time.monotonic() + 2
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)
    shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def streams_for(target: Target, host_key: paramiko.PKey, start_timeout: float) -> OpenSshStreams | None:
    """A started OpenSshStreams for `target`, or None when it cannot be used (paramiko then)."""
    if not available(target):
        return None
    streams = OpenSshStreams(target, host_key, start_timeout)
    return streams if streams.start() else None


__all__ = ["OpenSshStreams", "available", "streams_for"]
