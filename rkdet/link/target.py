"""Where to connect: `[user@]host[:port]` and ~/.ssh/config resolved into one `Target` record.

Why its own module: the fleet inventory, the CLI and the SSH connection all name boards; they share
this one parser and resolver (OpenSSH's rules: explicit flags win over ssh_config) without opening
anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from rkdet.errors import InputError

DEFAULT_SSH_CONFIG = Path("~/.ssh/config")
DEFAULT_SYSTEM_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


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
                   accept_new_host_key: bool = False, proxy_jump: str | None = None) -> Target:
    """Apply ssh_config (Host, HostName, User, Port, IdentityFile, ProxyJump, UserKnownHostsFile)
    then explicit values (which win), like `ssh -F config -l user -p port -i identity -J jump board`."""
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
            check_identity(p)
    if "userknownhostsfile" in conf:
        raw = conf["userknownhostsfile"]  # paramiko has stripped quotes: a whole existing path wins
        parts = [raw] if Path(raw).expanduser().exists() else raw.split()
        known = tuple(Path(p).expanduser() for p in parts if p != "/dev/null")
    else:
        known = (Path(system_known_hosts).expanduser(),) if system_known_hosts else ()
    accept_new = accept_new_host_key or conf.get("stricthostkeychecking", "").lower() == "accept-new"
    proxy = proxy_jump or conf.get("proxyjump")
    if proxy and proxy.lower() == "none":
        proxy = None
    return Target(name=board, hostname=hostname, port=final_port, user=final_user, identities=tuple(ids),
                  identities_only=str(conf.get("identitiesonly", "no")).lower() == "yes" or identity is not None,
                  proxy_jump=proxy, known_hosts=known, accept_new=accept_new)


def check_identity(path: Path) -> None:
    """A private key rkdet is told to use (--identity, ansible_ssh_private_key_file): an existing
    regular file that begins like a private key and, as OpenSSH requires, that only its owner can
    read. Refused in one line naming the file, never quoting it (an inventory may name any path)."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"identity file {path} not found; pass an existing private key") from None
    except OSError as err:
        raise InputError(f"identity file {path}: cannot read it ({err.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"identity file {path}: not a regular file (a FIFO, socket, device or folder)")
        if st.st_mode & 0o077:
            raise InputError(f"identity file {path}: readable or writable by others (mode {st.st_mode & 0o777:o}); "
                             "a private key must be yours alone, as OpenSSH requires: chmod 600 it")
        head = handle.read(64)
    if not (head.startswith(b"-----BEGIN ") and b"PRIVATE KEY-----" in head):
        raise InputError(f"identity file {path}: not a private key (no -----BEGIN ... PRIVATE KEY----- line); "
                         "its content is not shown")


def _local_user() -> str:
    import getpass

    return getpass.getuser()
