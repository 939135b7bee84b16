"""Host keys, checked like OpenSSH's ``StrictHostKeyChecking=yes`` (or ``accept-new`` when asked).

Why its own module: the policy is a security decision separate from how a session runs commands.
An unknown key is refused with its SHA256 fingerprint (or, with accept-new, recorded in rkdet's own
known_hosts file); a changed key is always refused, naming every file to fix. The emulator uses
`record_host_key` to hand its test board's key to the host.

Which files (docs/SECURITY.md): a known_hosts path may come from an inventory (`rkdet_known_hosts`),
so before one is read it must be a regular file (a FIFO would block) of at most `MAX_KNOWN_HOSTS`
bytes whose every line has known_hosts' shape (`[@marker] HOSTS KEYTYPE BASE64 [comment]`), and
before rkdet's own one is written it must also be owned by the invoking user, writable by no one
else and not be named authorized_keys*. A file that fails is refused in one line naming it and
never quoted: paramiko's parse errors (which quote the line) are not passed on.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from pathlib import Path

import paramiko

from rkdet.link.target import Target
from rkdet.errors import BoardError, InputError

DEFAULT_RKDET_KNOWN_HOSTS = Path("~/.config/rkdet/known_hosts")
MAX_KNOWN_HOSTS = 4 << 20
_KEY_TYPE = re.compile(r"^(ssh|ecdsa-sha2|sk-ssh|sk-ecdsa-sha2|rsa-sha2)-[A-Za-z0-9@.+-]+$")


def check_known_hosts(path: Path, writable: bool = False) -> bool:
    """True when `path` exists and is a known_hosts file rkdet may read (and, `writable`, append to);
    False when it does not exist; InputError, naming the file and never its content, otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return False
    except OSError as err:
        raise InputError(f"{path}: cannot read the known_hosts file ({err.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: not a regular file (a FIFO, socket, device or folder); a known_hosts file "
                             "must be one")
        if writable:
            if path.name.startswith("authorized_keys"):
                raise InputError(f"{path}: an authorized_keys file, not a known_hosts file; rkdet does not write it")
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                raise InputError(f"{path}: not the user's own known_hosts file (owned by someone else, or writable by "
                                 "others); rkdet records host keys only in a file of yours (chmod go-w)")
        data = handle.read(MAX_KNOWN_HOSTS + 1)
    if len(data) > MAX_KNOWN_HOSTS:
        raise InputError(f"{path}: larger than {MAX_KNOWN_HOSTS >> 20} MiB; is this really a known_hosts file?")
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not _known_hosts_line(line):
            raise InputError(f"{path}:{lineno}: not a known_hosts line (HOSTS KEYTYPE KEY); rkdet neither reads "
                             f"nor {'writes' if writable else 'uses'} this file (its content is not shown)")
    return True


def _known_hosts_line(raw: bytes) -> bool:
    try:
        line = raw.decode("utf-8").strip()  # a comment after the key may be any UTF-8
    except UnicodeDecodeError:
        return False
    if not line or line.startswith("#"):
        return True
    fields = line.split()
    if fields[0] in ("@cert-authority", "@revoked"):
        fields = fields[1:]
    if len(fields) < 3 or not _KEY_TYPE.match(fields[1]):
        return False
    hosts = fields[0]
    if not hosts.startswith("|1|") and any(c in hosts for c in '"=/'):
        return False  # an authorized_keys options field, or a path: not host patterns
    try:
        base64.b64decode(fields[2], validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def fingerprint(key: paramiko.PKey) -> str:
    """`SHA256:<base64>` exactly as `ssh-keygen -l` prints it."""
    return key.fingerprint


def key_kind(key: paramiko.PKey) -> str:
    return key.get_name().replace("ssh-", "").upper()


class UnknownHostKey(Exception):
    """Raised inside paramiko's connect by `StrictPolicy`; turned into a BoardError by `refusal`."""

    def __init__(self, name: str, key: paramiko.PKey) -> None:
        super().__init__(name)
        self.name, self.key = name, key


class StrictPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown keys, or (accept-new) record them in the rkdet known_hosts file."""

    def __init__(self, accept_new: bool, record_to: Path) -> None:
        self.accept_new, self.record_to = accept_new, record_to

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise UnknownHostKey(hostname, key)
        record_host_key(self.record_to, hostname, key)


def record_host_key(path: Path, name: str, key: paramiko.PKey) -> None:
    """Append `name keytype base64` to a known_hosts file (rewritten to a temp name, then renamed)."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text(encoding="utf-8") if check_known_hosts(path, writable=True) else ""
    if old and not old.endswith("\n"):
        old += "\n"
    from rkdet.records.io import write_atomic  # the one atomic writer

    write_atomic(str(path), f"{old}{name} {key.get_name()} {key.get_base64()}\n", perms=0o600)


def known_files(tgt: Target, rkdet_known: Path) -> list[Path]:
    """Every known_hosts file consulted for `tgt`: the read-only ones, then rkdet's own."""
    return [*tgt.known_hosts, rkdet_known]


def apply_policy(client: paramiko.SSHClient, tgt: Target, rkdet_known: Path) -> None:
    """Load the known keys into `client` and set the strict (or accept-new) policy for unknown ones."""
    for path in tgt.known_hosts:
        if check_known_hosts(path):
            try:
                client.load_system_host_keys(str(path))
            except (OSError, paramiko.SSHException, ValueError):  # paramiko's message quotes the line: not shown
                raise InputError(f"{path}: unreadable known_hosts file (its content is not shown)") from None
    if check_known_hosts(rkdet_known, writable=tgt.accept_new):
        try:
            client.get_host_keys().load(str(rkdet_known))
        except (OSError, paramiko.SSHException, ValueError):
            raise InputError(f"{rkdet_known}: unreadable known_hosts file (its content is not shown)") from None
    client.set_missing_host_key_policy(StrictPolicy(tgt.accept_new, rkdet_known))


def unknown_key_error(tgt: Target, err: UnknownHostKey, rkdet_known: Path) -> BoardError:
    """The one line for a key no known_hosts file has: its fingerprint, and the two ways to trust it."""
    scan = f"ssh-keyscan -p {tgt.port} {tgt.hostname}" if tgt.port != 22 else f"ssh-keyscan {tgt.hostname}"
    return BoardError(
        f"{tgt.label}: unknown host key {key_kind(err.key)} {fingerprint(err.key)}; if that is the board's key, "
        f"rerun with --accept-new-host-key (records it in {rkdet_known}) or add `{scan}` output to known_hosts")


def changed_key_error(tgt: Target, err: paramiko.BadHostKeyException, rkdet_known: Path) -> BoardError:
    """The one line for a key that differs from the recorded one: always refused, every file named."""
    return BoardError(
        f"{tgt.label}: HOST KEY CHANGED (now {key_kind(err.key)} {fingerprint(err.key)}, known "
        f"{fingerprint(err.expected_key)}); refusing. If the board was re-flashed, remove the old entry with "
        f"`ssh-keygen -R '{tgt.host_key_name}' -f FILE` for each of {', '.join(map(str, known_files(tgt, rkdet_known)))}")
