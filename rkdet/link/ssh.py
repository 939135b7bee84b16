"""How rkdet reaches a board: one SSH session (paramiko), the implementation of `CommandRunner`.

Why this shape: every wait has a timeout, so a wedged board fails with exit 3 instead of hanging the
host; stdout and stderr are drained together, so a chatty command cannot fill the channel window and
deadlock; output is capped (`Limits`), since a board's answers are untrusted. What is done over a
session lives beside it as functions over a connection: the command line (`shell.py`), detached jobs
(`jobs.py`), transfers (`transfer.py`, `pull.py`); where to connect is `target.py`, host keys
`hostkeys.py`.
"""

from __future__ import annotations

import errno
import select
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import paramiko

from rkdet.link import hostkeys, openssh
from rkdet.link.files import ExecFiles, FileTransfer
from rkdet.link.hostkeys import DEFAULT_RKDET_KNOWN_HOSTS
from rkdet.link.openssh import OpenSshStreams
from rkdet.link.sftp import SftpFiles
from rkdet.link.shell import CommandResult, build_command, check_env_name, remote_command
from rkdet.link.target import DEFAULT_SSH_CONFIG, DEFAULT_SYSTEM_KNOWN_HOSTS, Target, resolve_target
from rkdet.errors import BoardError


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed for each phase; `command` is the default for `run` when none is given;
    `sftp` bounds the wait for each answer of the board's SFTP server (a stalled server fails)."""

    connect: float = 10.0
    banner: float = 10.0
    auth: float = 15.0
    command: float = 120.0
    keepalive: int = 15
    sftp: float = 30.0


@dataclass(frozen=True)
class Limits:
    """How much the host takes from a board (its listings, sizes and outputs are untrusted).

    The one definition of each cap (docs/SECURITY.md): `output_bytes` for the stdout (and,
    separately, stderr) of one command or job log; for one pull: `files` listed entries,
    `file_bytes` per file, `total_bytes` in all, and `keep_free_bytes` the host disk must keep free
    after it. A pull over a cap is refused before a byte is written.
    """

    output_bytes: int = 64 << 20
    files: int = 100_000
    file_bytes: int = 4 << 30
    total_bytes: int = 16 << 30
    keep_free_bytes: int = 512 << 20


# --- connection -------------------------------------------------------------------------------

def _connect_socket(host: str, port: int, timeout: float, label: str) -> socket.socket:
    """A TCP socket with TCP_NODELAY (one exec round trip: 46 ms -> 3 ms); errors -> BoardError."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror as err:
        raise BoardError(f"cannot resolve board host {host!r} ({err.strerror}); check --board or ~/.ssh/config") from None
    except ConnectionRefusedError:
        raise BoardError(f"{label}: connection refused (is sshd running and the port right?)") from None
    except (socket.timeout, TimeoutError):
        raise BoardError(f"{label}: no answer within {timeout:g} s (host down or unreachable?)") from None
    except OSError as err:
        if err.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            raise BoardError(f"{label}: host unreachable ({err.strerror})") from None
        raise BoardError(f"{label}: cannot connect ({err.strerror or err})") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _signal(chan: paramiko.Channel, name: str) -> None:
    """Best effort: an RFC 4254 "signal" request; OpenSSH's sshd then kills the command's process
    group (so a timed-out command does not linger). paramiko has no public call for it."""
    try:
        msg = paramiko.Message()
        msg.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
        msg.add_int(chan.remote_chanid)
        msg.add_string("signal")
        msg.add_boolean(False)
        msg.add_string(name)
        chan.transport._send_user_message(msg)  # noqa: SLF001
    except Exception:  # a dead channel/transport: nothing left to signal
        pass


_FAST_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
REKEY_BYTES = 1 << 32  # bytes each way between key exchanges (see _fast_transport)
# a stream this big goes through OpenSSH's client (BoardConnection.bulk_streams) once the connection has
# moved OPENSSH_AFTER_BYTES in such streams; smaller downloads stay on paramiko, for which an `ssh` process
# per stream costs more than it saves (12 MiB pull, bench: 59 ms through `ssh` vs 48 for scp, ~1.0x on
# paramiko); smaller uploads use a master already up (12 MiB verified push: 76 ms through `ssh` vs 85
# over a paramiko exec channel, scp 74-80) but never start one
OPENSSH_MIN_BYTES = 32 << 20
OPENSSH_AFTER_BYTES = 64 << 20


def _fast_transport(sock: socket.socket | paramiko.Channel, **kwargs: object) -> paramiko.Transport:
    """A Transport preferring AES-GCM (one AEAD pass: ~20% faster SFTP than CTR+HMAC on loopback);
    other ciphers stay offered for boards without it (old Dropbear)."""
    transport = paramiko.Transport(sock, **kwargs)  # type: ignore[arg-type]
    # rekey after REKEY_BYTES each way, not paramiko's 512 MiB: paramiko's transport thread can block
    # itself for 30 s when a channel closes during a rekey ("Key-exchange timed out waiting for key
    # negotiation"; the connection then dies), which the transfer bench (~1 GiB each way) hit. OpenSSH
    # rekeys AES (128-bit blocks) after 2^32 blocks, 64 GiB (RFC 4344's bound): this is 1/16 of that
    transport.packetizer.REKEY_BYTES = REKEY_BYTES
    opts = transport.get_security_options()
    offered = tuple(opts.ciphers)
    opts.ciphers = tuple(c for c in _FAST_CIPHERS if c in offered) + tuple(c for c in offered if c not in _FAST_CIPHERS)
    return transport


class BoardConnection:
    """An open SSH session to one board; every method raises BoardError (exit 3) on trouble."""

    def __init__(self, client: paramiko.SSHClient, target: Target, timeouts: Timeouts,
                 jumps: Sequence[BoardConnection] = (), limits: Limits | None = None) -> None:
        self._client = client
        self.target = target
        self.timeouts = timeouts
        self.limits = limits or Limits()
        self._jumps = list(jumps)
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_checked = False
        self._home: str | None = None
        self._openssh: OpenSshStreams | None = None
        self._openssh_tried = False
        self._bulk_bytes = 0  # bytes announced by bulk streams so far (see OPENSSH_AFTER_BYTES)

    # -- opening --

    @classmethod
    def open(cls, target: str | Target, *, user: str | None = None, port: int | None = None,
             identity: str | Path | Sequence[str | Path] | None = None,
             known_hosts: str | Path | None = DEFAULT_RKDET_KNOWN_HOSTS,
             system_known_hosts: str | Path | None = DEFAULT_SYSTEM_KNOWN_HOSTS,
             accept_new_host_key: bool = False, timeouts: Timeouts | None = None,
             ssh_config: str | Path | None = DEFAULT_SSH_CONFIG, allow_agent: bool = True,
             limits: Limits | None = None, proxy_jump: str | None = None) -> BoardConnection:
        """Connect and authenticate; `known_hosts` is rkdet's own file (read, and written by accept-new),
        `system_known_hosts` is read only (OpenSSH's). Explicit arguments override ssh_config."""
        timeouts = timeouts or Timeouts()
        if isinstance(target, Target):
            tgt = target
        else:
            tgt = resolve_target(target, user=user, port=port, identity=identity, ssh_config=ssh_config,
                                 system_known_hosts=system_known_hosts, accept_new_host_key=accept_new_host_key,
                                 proxy_jump=proxy_jump)
        rkdet_known = Path(known_hosts).expanduser() if known_hosts else DEFAULT_RKDET_KNOWN_HOSTS.expanduser()
        jumps: list[BoardConnection] = []
        sock: socket.socket | paramiko.Channel
        try:
            if tgt.proxy_jump:
                hop_spec = tgt.proxy_jump.split(",")
                prev: BoardConnection | None = None
                for hop in hop_spec:
                    hop_target = resolve_target(hop, ssh_config=ssh_config, system_known_hosts=system_known_hosts,
                                                accept_new_host_key=tgt.accept_new)
                    hop_target = Target(**{**hop_target.__dict__, "proxy_jump": None})
                    prev = cls._open_direct(hop_target, rkdet_known, timeouts, allow_agent,
                                            via=prev)
                    jumps.append(prev)
                assert prev is not None
                sock = prev._channel_to(tgt)
            else:
                sock = _connect_socket(tgt.hostname, tgt.port, timeouts.connect, tgt.label)
            conn = cls._handshake(tgt, sock, rkdet_known, timeouts, allow_agent)
        except BaseException:
            for j in reversed(jumps):
                j.close()
            raise
        conn._jumps = jumps
        conn.limits = limits or Limits()
        return conn

    @classmethod
    def _open_direct(cls, tgt: Target, rkdet_known: Path, timeouts: Timeouts, allow_agent: bool,
                     via: BoardConnection | None) -> BoardConnection:
        sock = via._channel_to(tgt) if via else _connect_socket(tgt.hostname, tgt.port, timeouts.connect, tgt.label)
        return cls._handshake(tgt, sock, rkdet_known, timeouts, allow_agent)

    def _channel_to(self, tgt: Target) -> paramiko.Channel:
        """A direct-tcpip channel through this connection (ProxyJump)."""
        try:
            return self.transport.open_channel("direct-tcpip", (tgt.hostname, tgt.port), ("127.0.0.1", 0),
                                               timeout=self.timeouts.connect)
        except (paramiko.SSHException, OSError, EOFError) as err:
            raise BoardError(f"{tgt.label}: jump host {self.target.label} could not connect to it "
                             f"({err or type(err).__name__})") from None

    @classmethod
    def _handshake(cls, tgt: Target, sock: socket.socket | paramiko.Channel, rkdet_known: Path,
                   timeouts: Timeouts, allow_agent: bool) -> BoardConnection:
        client = paramiko.SSHClient()
        hostkeys.apply_policy(client, tgt, rkdet_known)
        try:
            client.connect(
                tgt.hostname, port=tgt.port, username=tgt.user, sock=sock,
                key_filename=[str(p) for p in tgt.identities] or None,
                allow_agent=allow_agent and not (tgt.identities_only and tgt.identities),
                look_for_keys=not tgt.identities,
                # paramiko's `timeout` also bounds banner + key exchange (start_client), and when it ends
                # first it goes on silently to auth ('No existing session'): give it the banner's time too
                timeout=timeouts.connect + timeouts.banner, banner_timeout=timeouts.banner, auth_timeout=timeouts.auth,
                channel_timeout=timeouts.connect, transport_factory=_fast_transport,
            )
        except hostkeys.UnknownHostKey as err:
            client.close()
            raise hostkeys.unknown_key_error(tgt, err, rkdet_known) from None
        except paramiko.BadHostKeyException as err:
            client.close()
            raise hostkeys.changed_key_error(tgt, err, rkdet_known) from None
        except paramiko.PasswordRequiredException:
            client.close()
            raise BoardError(f"{tgt.label}: the identity key is passphrase-protected; load it into ssh-agent") from None
        except paramiko.AuthenticationException as err:
            client.close()
            tried = ", ".join(map(str, tgt.identities)) or "ssh-agent and ~/.ssh/id_* keys"
            raise BoardError(f"{tgt.label}: authentication failed ({err}); tried {tried}. "
                             f"Check --user/--identity and the board's authorized_keys") from None
        except paramiko.SSHException as err:
            client.close()
            msg = str(err)
            if "banner" in msg.lower():
                raise BoardError(f"{tgt.label}: no SSH banner within {timeouts.banner:g} s "
                                 f"(not an SSH server, or overloaded)") from None
            if "no authentication methods" in msg.lower():
                raise BoardError(f"{tgt.label}: no key to authenticate with; pass --identity or start ssh-agent") from None
            raise BoardError(f"{tgt.label}: SSH handshake failed ({msg})") from None
        except (socket.timeout, TimeoutError, EOFError, OSError) as err:
            client.close()
            raise BoardError(f"{tgt.label}: connection lost during handshake ({err or type(err).__name__})") from None
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(timeouts.keepalive)
        return cls(client, tgt, timeouts)

    @property
    def transport(self) -> paramiko.Transport:
        t = self._client.get_transport()
        if t is None or not t.is_active():
            raise BoardError(f"{self.target.label}: connection is closed")
        return t

    def close(self) -> None:
        """Close the session (and any jump hosts); safe to call twice."""
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._openssh is not None:
            self._openssh.close()
            self._openssh = None
        self._client.close()
        for j in reversed(self._jumps):
            j.close()
        self._jumps = []

    def __enter__(self) -> BoardConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands --

    def run(self, argv: Sequence[str], timeout: float | None = None, check: bool = True, sudo: bool = False,
            env: Mapping[str, str] | None = None, keep_env: Iterable[str] = (),
            stdin: bytes | None = None) -> CommandResult:
        """Run argv on the board (quoted), return (rc, out, err); check=True raises BoardError on rc != 0.

        `sudo` uses `sudo -n` (never prompts); `env`/`keep_env` are applied after sudo with `env`,
        because sudo resets the environment (keep_env names are copied from the login session).
        """
        line = build_command(argv, sudo=sudo, env=env, keep_env=keep_env)
        out, err = bytearray(), bytearray()
        rc = self.stream(line, stdout=self.capped(out, argv[0]), stderr=self.capped(err, argv[0]), stdin=stdin,
                         timeout=timeout, what=argv[0])
        result = CommandResult(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        if check and rc != 0:
            raise BoardError(self._failure(argv, result, sudo))
        return result

    def capped(self, buf: bytearray, what: str, limit: int | None = None) -> Callable[[bytes], None]:
        """A sink appending to `buf` that refuses (BoardError, the command is cut off) more than
        `limit` bytes (default: the connection's `limits.output_bytes`)."""
        cap = self.limits.output_bytes if limit is None else limit

        def sink(data: bytes) -> None:
            if len(buf) + len(data) > cap:
                raise BoardError(f"{self.target.label}: `{what}` printed more than {cap} bytes; "
                                 f"refusing the rest (a broken or hostile board?)")
            buf.extend(data)

        return sink

    def _failure(self, argv: Sequence[str], result: CommandResult, sudo: bool) -> str:
        last = (result.err.strip().splitlines() or result.out.strip().splitlines() or [""])[-1][:200]
        if sudo and self.sudo_wants_password(result):
            return self.sudo_password_message()
        return f"{self.target.label}: `{remote_command(argv)[:120]}` exited {result.rc}: {last}"

    @staticmethod
    def sudo_wants_password(result: CommandResult) -> bool:
        """True when `sudo -n` refused because the board's sudoers asks this user for a password."""
        return "a password is required" in result.err

    def sudo_password_message(self) -> str:
        """The one line for a board whose sudo wants a password: the cause, as sudo says it, and the fix."""
        user = self.target.user
        return (f"{self.target.label}: sudo: a password is required for {user} (rkdet runs `sudo -n`, which never "
                f"prompts); on the board add a NOPASSWD rule for {user} (visudo -f /etc/sudoers.d/rkdet: "
                f"`{user} ALL=(ALL) NOPASSWD: ALL`), log in as root (--user root) without --sudo, or, on a board "
                f"where {user} has no sudo at all, deploy without --sudo and with --no-pin (unpinned, and the "
                "results say so)")

    def stream(self, command: str, *, stdout: Callable[[bytes], object] | None = None,
               stderr: Callable[[bytes], object] | None = None, stdin: bytes | IO[bytes] | None = None,
               timeout: float | None = None, what: str = "command",
               on_send: Callable[[int], object] | None = None, bulk: int = 0) -> int:
        """Run a ready-made (already quoted) shell line, feeding `stdin` and draining both outputs.

        Low-level: callers build `command` with `remote_command`/`build_command`. Returns the exit
        code; raises BoardError on timeout (the channel is closed) or a lost connection. `bulk`: the
        bytes the command moves (a big file's push or pull): such a stream may go through OpenSSH's
        client (`bulk_streams`).
        """
        limit = self.timeouts.command if timeout is None else timeout
        deadline = time.monotonic() + limit
        # OpenSSH's client takes a whole file's reader (a streamed push: `direct_fd`) or no stdin
        whole_file = stdin is None or hasattr(stdin, "direct_fd")
        client = self.bulk_streams(bulk, upload=stdin is not None) if bulk and whole_file else None
        if client is not None:
            try:
                return client.stream(command, stdout=stdout, stderr=stderr, stdin=stdin, deadline=deadline,
                                     on_send=on_send, label=self.target.label, what=what, limit=limit)
            except BoardError:
                if client.master_pid is None:  # the master died: later streams use paramiko
                    client.close()
                    self._openssh = None
                raise
        try:
            chan = self.transport.open_session(timeout=self.timeouts.connect)
        except (paramiko.SSHException, OSError, EOFError) as err:  # EOFError: the link died as the session opened
            raise BoardError(f"{self.target.label}: cannot open a session ({err or type(err).__name__}: "
                             "the connection is closed)") from None
        try:
            chan.settimeout(max(0.001, deadline - time.monotonic()))
            chan.exec_command(command)
            if stdin is not None:
                self._feed(chan, stdin, deadline, on_send)
            chan.shutdown_write()
            self._drain(chan, stdout, stderr, deadline)
            # OpenSSH sends EOF before exit-status: wait for it, but not forever (-1: killed by a signal)
            if not chan.status_event.wait(max(0.001, deadline - time.monotonic())):
                raise socket.timeout()
            return chan.exit_status
        except socket.timeout:
            _signal(chan, "TERM")
            raise BoardError(f"{self.target.label}: `{what}` timed out after {limit:g} s") from None
        except BoardError:  # a sink refused the output (over its cap): stop the command too
            _signal(chan, "TERM")
            raise
        except (paramiko.SSHException, OSError, EOFError) as err:
            raise BoardError(f"{self.target.label}: connection lost during `{what}` ({err or type(err).__name__})") from None
        finally:
            chan.close()

    @staticmethod
    def _feed(chan: paramiko.Channel, data: bytes | IO[bytes], deadline: float,
              on_send: Callable[[int], object] | None) -> None:
        """Send stdin, draining stderr as we go (`cat > f` prints nothing on stdout)."""
        if isinstance(data, (bytes, bytearray)):
            chan.sendall(data)
            if on_send:
                on_send(len(data))
            return
        while True:
            chunk = data.read(1 << 18)
            if not chunk:
                return
            if time.monotonic() > deadline:
                raise socket.timeout()
            chan.settimeout(max(0.001, deadline - time.monotonic()))
            chan.sendall(chunk)
            if on_send:
                on_send(len(chunk))

    @staticmethod
    def _drain(chan: paramiko.Channel, stdout: Callable[[bytes], object] | None,
               stderr: Callable[[bytes], object] | None, deadline: float) -> None:
        """Read stdout and stderr as they come until EOF, so neither can block the other."""
        fd = chan.fileno()  # a pipe signalled by data on either stream, or EOF
        while True:
            while chan.recv_stderr_ready():
                data = chan.recv_stderr(1 << 20)
                if stderr:
                    stderr(data)
            if chan.recv_ready():
                data = chan.recv(1 << 20)
                if data:
                    if stdout:
                        stdout(data)
                    continue
            if (chan.eof_received or chan.closed) and not chan.recv_ready() and not chan.recv_stderr_ready():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            select.select([fd], [], [], min(left, 1.0))

    def bulk_streams(self, size: int, *, upload: bool = False) -> OpenSshStreams | None:
        """OpenSSH's client over a ControlMaster for a stream of `size` bytes (rkdet.link.openssh), or
        None (paramiko). Started when `size` is at least OPENSSH_MIN_BYTES and the connection has
        already streamed OPENSSH_AFTER_BYTES in such streams: the master's handshake (~220 ms of CPU on
        host and board) pays off only on a connection that keeps moving big files, not on a deploy's
        one model push. A smaller `upload` uses a master that is up."""
        if size < OPENSSH_MIN_BYTES:
            return self._openssh if upload and self._openssh is not None and self._openssh.ready() else None
        before, self._bulk_bytes = self._bulk_bytes, self._bulk_bytes + size
        if self._openssh is not None and not self._openssh.ready():  # ended by its idle timer: start it again
            self._openssh, self._openssh_tried = None, False
        if self._openssh is None and not self._openssh_tried and before >= OPENSSH_AFTER_BYTES:
            self._openssh_tried = True
            self._openssh = openssh.streams_for(self.target, self.transport.get_remote_server_key(),
                                                self.timeouts.connect + self.timeouts.banner + self.timeouts.auth)
        return self._openssh

    # -- facts about the board session --

    @property
    def home(self) -> str:
        """The login user's $HOME on the board (asked once)."""
        if self._home is None:
            out = self.run(["sh", "-c", 'printf %s "$HOME"'], timeout=self.timeouts.connect).out
            self._home = out or "/"
        return self._home

    def abspath(self, path: str) -> str:
        """`~`, `~/x` and relative paths resolved against $HOME (remote paths are then absolute)."""
        if path == "~":
            return self.home
        if path.startswith("~/"):
            path = self.home.rstrip("/") + path[1:]
        elif not path.startswith("/"):
            path = self.home.rstrip("/") + "/" + path
        return path

    def default_workdir(self) -> str:
        """`~/.cache/rkdet` when $HOME is writable, else `/tmp/rkdet-<user>`; created if missing."""
        script = ('d="$HOME/.cache/rkdet"; if [ -n "$HOME" ] && mkdir -p "$d" 2>/dev/null; then printf %s "$d"; '
                  'else d="/tmp/rkdet-$1"; mkdir -p "$d" && printf %s "$d"; fi')
        return self.run(["sh", "-c", script, "sh", self.target.user], timeout=self.timeouts.connect).out

    def getenv(self, name: str) -> str | None:
        """A variable of the board's login environment (None when unset)."""
        check_env_name(name)
        res = self.run(["sh", "-c", f'[ -n "${{{name}+x}}" ] && printf %s "${name}"'], check=False)
        return res.out if res.rc == 0 else None

    def sftp(self) -> paramiko.SFTPClient | None:
        """The SFTP client, or None when the board has no SFTP subsystem (Dropbear on Buildroot)."""
        if not self._sftp_checked:
            self._sftp_checked = True
            chan = None
            try:  # every SFTP request then waits at most timeouts.sftp for its answer (socket.timeout)
                chan = self.transport.open_session(timeout=self.timeouts.connect)
                chan.settimeout(self.timeouts.sftp)
                chan.invoke_subsystem("sftp")
                self._sftp = paramiko.SFTPClient(chan)
            except (paramiko.SSHException, EOFError, OSError):
                if chan is not None:
                    chan.close()
                self._sftp = None
        return self._sftp

    def files(self) -> FileTransfer:
        """The FileTransfer to use now (rkdet.link.files): the SFTP session, or `cat` over exec channels
        when the board has no SFTP subsystem or its session was dropped."""
        sftp = self.sftp()
        return SftpFiles(self, sftp) if sftp is not None else ExecFiles(self)

    @property
    def command_timeout(self) -> float:
        return self.timeouts.command

    @property
    def sftp_timeout(self) -> float:
        return self.timeouts.sftp

    def drop_sftp(self) -> None:
        """Forget an SFTP session that timed out or broke (its request ids are out of step):
        later transfers use the exec path on this connection."""
        if self._sftp is not None:
            self._sftp.close()
        self._sftp, self._sftp_checked = None, True


__all__ = ["BoardConnection", "Limits", "Timeouts"]
