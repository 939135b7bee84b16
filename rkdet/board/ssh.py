"""The one door from the host into a board: an SSH connection (paramiko) with strict host keys.

Why this shape: every remote command is built from a list of arguments quoted with
`shlex.quote` (`remote_command`), so no path or name is ever interpolated raw into a shell line;
every wait has a timeout, so a wedged board fails with exit 3 instead of hanging the host; and
stdout and stderr are drained together, so a chatty command cannot fill the channel window and
deadlock. Host keys are checked like OpenSSH's ``StrictHostKeyChecking=yes`` (or ``accept-new``
when asked): an unknown key is refused with its SHA256 fingerprint, a changed key always.
"""

from __future__ import annotations

import errno
import re
import select
import shlex
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple

import paramiko

from rkdet.errors import BoardError, InputError

DEFAULT_SSH_CONFIG = Path("~/.ssh/config")
DEFAULT_SYSTEM_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
DEFAULT_RKDET_KNOWN_HOSTS = Path("~/.config/rkdet/known_hosts")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


class CommandResult(NamedTuple):
    """What a remote command left: exit code, stdout and stderr (decoded as UTF-8, lenient)."""

    rc: int
    out: str
    err: str


@dataclass(frozen=True)
class Target:
    """Where to connect, after ``~/.ssh/config`` and explicit flags have been applied."""

    name: str  # as the user wrote it (alias or address), for messages
    hostname: str
    port: int
    user: str
    identities: tuple[Path, ...] = ()
    identities_only: bool = False
    proxy_jump: str | None = None
    known_hosts: tuple[Path, ...] = ()  # read-only files (OpenSSH's UserKnownHostsFile)
    accept_new: bool = False

    @property
    def label(self) -> str:
        """`user@host:port` for messages."""
        return f"{self.user}@{self.hostname}:{self.port}"

    @property
    def host_key_name(self) -> str:
        """The known_hosts name OpenSSH uses: `host` on port 22, `[host]:port` otherwise."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


@dataclass(frozen=True)
class DetachedJob:
    """A board-side process group started by `start_detached`; poll, re-attach or kill it."""

    pid: int
    pidfile: str
    logfile: str
    sudo: bool = False

    @property
    def rcfile(self) -> str:
        return self.pidfile + ".rc"


def remote_command(argv: Sequence[str]) -> str:
    """One shell line from argv, every argument quoted: the only way commands are built."""
    if not argv:
        raise InputError("empty remote command")
    return " ".join(shlex.quote(str(a)) for a in argv)


def _env_prefix(env: Mapping[str, str] | None, keep_env: Iterable[str]) -> str:
    """`env K='v' K2="$K2"` (empty when nothing to set): survives `sudo`'s env_reset."""
    parts: list[str] = []
    for name in keep_env:
        if not _ENV_NAME.match(name):
            raise InputError(f"invalid environment variable name {name!r}")
        parts.append(f'{name}="${name}"')  # expanded by the board's shell, on purpose
    for name, value in (env or {}).items():
        if not _ENV_NAME.match(name):
            raise InputError(f"invalid environment variable name {name!r}")
        parts.append(shlex.quote(f"{name}={value}"))
    return "env " + " ".join(parts) if parts else ""


def build_command(argv: Sequence[str], *, sudo: bool = False, env: Mapping[str, str] | None = None,
                  keep_env: Iterable[str] = ()) -> str:
    """The full shell line for argv with optional `sudo -n` and environment (after sudo)."""
    line = remote_command(argv)
    prefix = _env_prefix(env, keep_env)
    if prefix:
        line = f"{prefix} {line}"
    if sudo:
        line = f"sudo -n {line}" if prefix else f"sudo -n -- {line}"
    return line


# --- target resolution ------------------------------------------------------------------------

def parse_board(board: str) -> tuple[str | None, str, int | None]:
    """Split `[user@]host[:port]` (IPv6 as `[addr]:port`) into (user, host, port)."""
    user = None
    rest = board.strip()
    if "@" in rest:
        user, rest = rest.rsplit("@", 1)
    port: int | None = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":"):
            port = _port(tail[1:], board)
    elif rest.count(":") == 1:
        host, _, p = rest.partition(":")
        port = _port(p, board)
    else:
        host = rest
    if not host or (user is not None and not user):
        raise InputError(f"--board {board!r}: expected [USER@]HOST[:PORT]")
    return user, host, port


def _port(text: str, board: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise InputError(f"--board {board!r}: port must be a number 1-65535")
    return int(text)


def resolve_target(board: str, *, user: str | None = None, port: int | None = None,
                   identity: str | Path | Sequence[str | Path] | None = None,
                   ssh_config: str | Path | None = DEFAULT_SSH_CONFIG,
                   system_known_hosts: str | Path | None = DEFAULT_SYSTEM_KNOWN_HOSTS,
                   accept_new_host_key: bool = False) -> Target:
    """Apply ssh_config (Host, HostName, User, Port, IdentityFile, ProxyJump, UserKnownHostsFile)
    then explicit values (which win), like `ssh -F config -l user -p port -i identity board`."""
    b_user, host, b_port = parse_board(board)
    conf: dict = {}
    if ssh_config is not None:
        path = Path(ssh_config).expanduser()
        if path.is_file():
            try:
                conf = dict(paramiko.SSHConfig.from_path(str(path)).lookup(host))
            except Exception as err:  # paramiko raises assorted types on bad syntax
                raise InputError(f"{path}: cannot parse SSH config ({err})") from None
    hostname = conf.get("hostname", host)
    final_user = user or b_user or conf.get("user") or _local_user()
    final_port = port or b_port or int(conf.get("port", 22))
    if identity is None:
        ids = [Path(p).expanduser() for p in conf.get("identityfile", [])]
        ids = [p for p in ids if p.is_file()]  # OpenSSH silently skips missing config entries
    else:
        given = [identity] if isinstance(identity, (str, Path)) else list(identity)
        ids = [Path(p).expanduser() for p in given]
        for p in ids:
            if not p.is_file():
                raise InputError(f"identity file {p} not found; pass an existing private key")
    if "userknownhostsfile" in conf:
        raw = conf["userknownhostsfile"]  # paramiko has stripped quotes: a whole existing path wins
        parts = [raw] if Path(raw).expanduser().exists() else raw.split()
        known = tuple(Path(p).expanduser() for p in parts if p != "/dev/null")
    else:
        known = (Path(system_known_hosts).expanduser(),) if system_known_hosts else ()
    accept_new = accept_new_host_key or conf.get("stricthostkeychecking", "").lower() == "accept-new"
    proxy = conf.get("proxyjump")
    if proxy and proxy.lower() == "none":
        proxy = None
    return Target(name=board, hostname=hostname, port=final_port, user=final_user, identities=tuple(ids),
                  identities_only=str(conf.get("identitiesonly", "no")).lower() == "yes" or identity is not None,
                  proxy_jump=proxy, known_hosts=known, accept_new=accept_new)


def _local_user() -> str:
    import getpass

    return getpass.getuser()


# --- host keys --------------------------------------------------------------------------------

def fingerprint(key: paramiko.PKey) -> str:
    """`SHA256:<base64>` exactly as `ssh-keygen -l` prints it."""
    return key.fingerprint


def _key_kind(key: paramiko.PKey) -> str:
    return key.get_name().replace("ssh-", "").upper()


class _UnknownHostKey(Exception):
    def __init__(self, name: str, key: paramiko.PKey) -> None:
        super().__init__(name)
        self.name, self.key = name, key


class _StrictPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown keys, or (accept-new) record them in the rkdet known_hosts file."""

    def __init__(self, accept_new: bool, record_to: Path) -> None:
        self.accept_new, self.record_to = accept_new, record_to

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise _UnknownHostKey(hostname, key)
        record_host_key(self.record_to, hostname, key)


def record_host_key(path: Path, name: str, key: paramiko.PKey) -> None:
    """Append `name keytype base64` to a known_hosts file (rewritten to a temp name, then renamed)."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text() if path.exists() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    from rkdet.runner import write_atomic  # the one atomic writer

    write_atomic(str(path), f"{old}{name} {key.get_name()} {key.get_base64()}\n", perms=0o600)


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


def _fast_transport(sock: socket.socket | paramiko.Channel, **kwargs: object) -> paramiko.Transport:
    """A Transport preferring AES-GCM (one AEAD pass: ~20% faster SFTP than CTR+HMAC on loopback);
    other ciphers stay offered for boards without it (old Dropbear)."""
    transport = paramiko.Transport(sock, **kwargs)  # type: ignore[arg-type]
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

    # -- opening --

    @classmethod
    def open(cls, target: str | Target, *, user: str | None = None, port: int | None = None,
             identity: str | Path | Sequence[str | Path] | None = None,
             known_hosts: str | Path | None = DEFAULT_RKDET_KNOWN_HOSTS,
             system_known_hosts: str | Path | None = DEFAULT_SYSTEM_KNOWN_HOSTS,
             accept_new_host_key: bool = False, timeouts: Timeouts | None = None,
             ssh_config: str | Path | None = DEFAULT_SSH_CONFIG, allow_agent: bool = True,
             limits: Limits | None = None) -> BoardConnection:
        """Connect and authenticate; `known_hosts` is rkdet's own file (read, and written by accept-new),
        `system_known_hosts` is read only (OpenSSH's). Explicit arguments override ssh_config."""
        timeouts = timeouts or Timeouts()
        if isinstance(target, Target):
            tgt = target
        else:
            tgt = resolve_target(target, user=user, port=port, identity=identity, ssh_config=ssh_config,
                                 system_known_hosts=system_known_hosts, accept_new_host_key=accept_new_host_key)
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
        except (paramiko.SSHException, OSError) as err:
            raise BoardError(f"{tgt.label}: jump host {self.target.label} could not connect to it ({err})") from None

    @classmethod
    def _handshake(cls, tgt: Target, sock: socket.socket | paramiko.Channel, rkdet_known: Path,
                   timeouts: Timeouts, allow_agent: bool) -> BoardConnection:
        client = paramiko.SSHClient()
        for path in tgt.known_hosts:
            if path.is_file():
                try:
                    client.load_system_host_keys(str(path))
                except (OSError, paramiko.SSHException) as err:
                    raise InputError(f"{path}: unreadable known_hosts file ({err})") from None
        if rkdet_known.is_file():
            try:
                client.get_host_keys().load(str(rkdet_known))
            except (OSError, paramiko.SSHException) as err:
                raise InputError(f"{rkdet_known}: unreadable known_hosts file ({err})") from None
        client.set_missing_host_key_policy(_StrictPolicy(tgt.accept_new, rkdet_known))
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
        except _UnknownHostKey as err:
            client.close()
            scan = f"ssh-keyscan -p {tgt.port} {tgt.hostname}" if tgt.port != 22 else f"ssh-keyscan {tgt.hostname}"
            raise BoardError(
                f"{tgt.label}: unknown host key {_key_kind(err.key)} {fingerprint(err.key)}; if that is the board's key, "
                f"rerun with --accept-new-host-key (records it in {rkdet_known}) or add `{scan}` output to known_hosts"
            ) from None
        except paramiko.BadHostKeyException as err:
            client.close()
            raise BoardError(
                f"{tgt.label}: HOST KEY CHANGED (now {_key_kind(err.key)} {fingerprint(err.key)}, known "
                f"{fingerprint(err.expected_key)}); refusing. If the board was re-flashed, remove the old entry with "
                f"`ssh-keygen -R '{tgt.host_key_name}' -f FILE` for each of {', '.join(map(str, _all_known(tgt, rkdet_known)))}"
            ) from None
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
                f"`{user} ALL=(ALL) NOPASSWD: ALL`), or log in as root (--user root) without --sudo")

    def stream(self, command: str, *, stdout: Callable[[bytes], object] | None = None,
               stderr: Callable[[bytes], object] | None = None, stdin: bytes | IO[bytes] | None = None,
               timeout: float | None = None, what: str = "command",
               on_send: Callable[[int], object] | None = None) -> int:
        """Run a ready-made (already quoted) shell line, feeding `stdin` and draining both outputs.

        Low-level: callers build `command` with `remote_command`/`build_command`. Returns the exit
        code; raises BoardError on timeout (the channel is closed) or a lost connection.
        """
        limit = self.timeouts.command if timeout is None else timeout
        deadline = time.monotonic() + limit
        try:
            chan = self.transport.open_session(timeout=self.timeouts.connect)
        except (paramiko.SSHException, OSError) as err:
            raise BoardError(f"{self.target.label}: cannot open a session ({err})") from None
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
        if not _ENV_NAME.match(name):
            raise InputError(f"invalid environment variable name {name!r}")
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

    def drop_sftp(self) -> None:
        """Forget an SFTP session that timed out or broke (its request ids are out of step):
        later transfers use the exec path on this connection."""
        if self._sftp is not None:
            self._sftp.close()
        self._sftp, self._sftp_checked = None, True

    # -- detached jobs --

    _START = (
        'pidfile=$1; logfile=$2; shift 2\n'
        'rm -f "$pidfile" "$pidfile.rc"\n'
        "setsid sh -c 'trap \"\" HUP; echo $$ > \"$0.tmp\" && mv -f \"$0.tmp\" \"$0\" || exit 125; "
        "\"$@\"; echo $? > \"$0.rc.tmp\"; mv -f \"$0.rc.tmp\" \"$0.rc\"' \"$pidfile\" \"$@\" "
        '> "$logfile" 2>&1 < /dev/null &\n'
        'i=0; while [ ! -s "$pidfile" ]; do i=$((i+1)); '
        'if [ $i -gt 400 ]; then echo "no pid file after 20 s: $pidfile" >&2; exit 1; fi; '
        'sleep 0.05 2>/dev/null || sleep 1; done\n'
        'cat "$pidfile"\n'
    )
    # running = the pid is alive, not a zombie, and still leads its own session (guards pid reuse)
    _ALIVE = ('p=$(cat "$1" 2>/dev/null) || exit 2; [ -r "/proc/$p/stat" ] || exit 1; '
              'read -r _ _ s _ _ sid _ < "/proc/$p/stat" || exit 1; [ "$s" != Z ] && [ "$sid" = "$p" ]')

    def start_detached(self, argv: Sequence[str], pidfile: str, logfile: str, *, sudo: bool = False,
                       env: Mapping[str, str] | None = None, keep_env: Iterable[str] = ()) -> DetachedJob:
        """Start argv in its own session (setsid, SIGHUP ignored) that outlives this connection.

        The pid (= process group id) goes to `pidfile`, output to `logfile`, the exit code to
        `pidfile.rc` when it ends; `is_running`, `attach`, `kill_job` work from any later connection.
        """
        pidfile, logfile = self.abspath(pidfile), self.abspath(logfile)
        inner = ["env", *[f"{k}={v}" for k, v in (env or {}).items()], *argv] if env else list(argv)
        line = remote_command(["sh", "-c", self._START, "sh", pidfile, logfile, *inner])
        if keep_env or sudo:
            prefix = _env_prefix(None, keep_env)
            line = (f"sudo -n {prefix} {line}" if prefix else f"sudo -n -- {line}") if sudo else f"{prefix} {line}"
        out, err = bytearray(), bytearray()
        rc = self.stream(line, stdout=out.extend, stderr=err.extend, timeout=self.timeouts.connect + 25,
                         what=f"start {argv[0]}")
        text = out.decode().strip()
        if rc != 0 or not text.isdigit():
            msg = err.decode("utf-8", "replace").strip().splitlines()
            raise BoardError(f"{self.target.label}: could not start `{argv[0]}` detached: "
                             f"{msg[-1] if msg else 'exit ' + str(rc)}")
        return DetachedJob(int(text), pidfile, logfile, sudo)

    def attach(self, pidfile: str, logfile: str, *, sudo: bool = False) -> DetachedJob:
        """Re-attach to a job started earlier (maybe by another connection) from its pid file."""
        pidfile, logfile = self.abspath(pidfile), self.abspath(logfile)
        res = self.run(["cat", pidfile], check=False, sudo=sudo)
        if res.rc != 0 or not res.out.strip().isdigit():
            raise BoardError(f"{self.target.label}: no job pid in {pidfile}")
        return DetachedJob(int(res.out.strip()), pidfile, logfile, sudo)

    def is_running(self, job: DetachedJob) -> bool:
        """True while the job's session leader lives (zombies count as finished)."""
        rc = self.run(["sh", "-c", self._ALIVE, "sh", job.pidfile], check=False, sudo=job.sudo).rc
        return rc == 0

    def job_exit_code(self, job: DetachedJob) -> int | None:
        """The job's exit code once it finished normally; None while running or when killed."""
        res = self.run(["cat", job.rcfile], check=False, sudo=job.sudo)
        return int(res.out.strip()) if res.rc == 0 and res.out.strip().lstrip("-").isdigit() else None

    def read_log(self, job: DetachedJob, offset: int = 0) -> bytes:
        """The job's log from byte `offset` on (poll with the previous length to follow it)."""
        out = bytearray()
        self.stream(remote_command(["tail", "-c", f"+{offset + 1}", job.logfile]), stdout=self.capped(out, "tail log"),
                    what="tail log")
        return bytes(out)

    def wait_job(self, job: DetachedJob, timeout: float, poll: float = 0.2) -> int | None:
        """Poll until the job ends; return its exit code (None if killed); BoardError on timeout."""
        deadline = time.monotonic() + timeout
        while self.is_running(job):
            if time.monotonic() > deadline:
                raise BoardError(f"{self.target.label}: job {job.pid} still running after {timeout:g} s")
            time.sleep(poll)
        return self.job_exit_code(job)

    def kill_job(self, job: DetachedJob, grace: float = 5.0) -> None:
        """SIGTERM the job's process group, then SIGKILL it after `grace` seconds."""
        # the shell builtin (dash, bash, ash) takes `-SIG -PGID`; procps' /usr/bin/kill would not
        kill = 'kill -"$1" -"$2" 2>/dev/null'
        self.run(["sh", "-c", kill, "sh", "TERM", str(job.pid)], check=False, sudo=job.sudo)
        deadline = time.monotonic() + grace
        while self.is_running(job):
            if time.monotonic() > deadline:
                self.run(["sh", "-c", kill, "sh", "KILL", str(job.pid)], check=False, sudo=job.sudo)
                break
            time.sleep(0.1)

    # Transfers are functions over a connection, not methods (labgrid's split of what from how):
    # rkdet.board.transfer.push(conn, ...) and rkdet.board.pull.pull(conn, ...).


def _all_known(tgt: Target, rkdet_known: Path) -> list[Path]:
    return [*tgt.known_hosts, rkdet_known]


__all__ = [
    "BoardConnection", "CommandResult", "DetachedJob", "Limits", "Target", "Timeouts", "build_command",
    "fingerprint", "parse_board", "record_host_key", "remote_command", "resolve_target",
]
