"""Host keys, checked like OpenSSH's ``StrictHostKeyChecking=yes`` (or ``accept-new`` when asked).

Why its own module: the policy is a security decision separate from how a session runs commands.
An unknown key is refused with its SHA256 fingerprint (or, with accept-new, recorded in rkdet's own
known_hosts file); a changed key is always refused, naming every file to fix. The emulator uses
`record_host_key` to hand its test board's key to the host.
"""

from __future__ import annotations

from pathlib import Path

import paramiko

from rkdet.link.target import Target
from rkdet.errors import BoardError, InputError

DEFAULT_RKDET_KNOWN_HOSTS = Path("~/.config/rkdet/known_hosts")


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
    old = path.read_text() if path.exists() else ""
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
