"""Host accounts and sudo rules the emulated board logs in with.

Why dedicated users: logging in as root costs ~100 ms of shell init per command here, and a
real board is reached as a normal user anyway. One user per login shell / privilege variant
(the login shell lives in /etc/passwd, so two variants cannot share a user while running side by
side). Accounts are created once (idempotent, under a lock) and kept; sudo rules are per emulator
instance and removed when it stops.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rkdet.errors import BoardError

BUSYBOX = Path("/bin/busybox")
# sshd runs the login shell as argv[0]=basename(shell): a symlink named `sh` makes busybox run ash
BUSYBOX_SHELL = Path("/usr/local/lib/rkdet-emulator/sh")
SUDOERS_DIR = Path("/etc/sudoers.d")
_LOCK = Path("/run/lock/rkdet-emulator.lock")


@contextmanager
def _host_lock() -> Iterator[None]:
    """Serialize account changes between concurrent emulators (useradd races otherwise)."""
    _LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(argv: list[str]) -> None:
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        raise BoardError(f"emulator: `{' '.join(argv)}` failed: {res.stderr.strip() or res.returncode}")


def require_root() -> None:
    """The emulator runs a root sshd and manages accounts; say so plainly otherwise."""
    if os.geteuid() != 0:
        raise BoardError("emulator: must run as root (it starts a real sshd and creates the rkdetboard users)")


def busybox_shell() -> Path:
    """A login shell that is busybox's ash (created once)."""
    if not BUSYBOX.exists():
        raise BoardError(f"emulator: {BUSYBOX} missing; install busybox (see .ci/setup)")
    if not BUSYBOX_SHELL.is_symlink():
        BUSYBOX_SHELL.parent.mkdir(parents=True, exist_ok=True)
        tmp = BUSYBOX_SHELL.with_name(f".sh.{os.getpid()}")
        os.symlink(BUSYBOX, tmp)
        os.replace(tmp, BUSYBOX_SHELL)
    return BUSYBOX_SHELL


def ensure_user(name: str, shell: Path) -> pwd.struct_passwd:
    """Create (or fix) a login user: own home, given shell, password field `*` (UsePAM no refuses `!`)."""
    with _host_lock():
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            _run(["useradd", "--create-home", "--shell", str(shell), "--password", "*",
                  "--comment", "rkdet emulated board login", name])
            entry = pwd.getpwnam(name)
        if entry.pw_shell != str(shell):
            _run(["usermod", "--shell", str(shell), name])
        shadow = Path("/etc/shadow")
        if shadow.exists() and any(line.split(":")[1:2] != ["*"] for line in shadow.read_text().splitlines()
                                   if line.startswith(name + ":")):
            _run(["usermod", "--password", "*", name])
        home = Path(entry.pw_dir)
        if not home.is_dir():  # sshd prints "Could not chdir to home directory" on every command
            home.mkdir(parents=True)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        return pwd.getpwnam(name)


def install_sudo_rule(user: str, tag: str) -> Path:
    """`<user> ALL=(ALL) NOPASSWD: ALL` in a drop-in named for this instance; checked with visudo."""
    if not Path("/usr/bin/sudo").exists():
        raise BoardError("emulator: sudo is not installed; install it (see .ci/setup) for the sudo variant")
    SUDOERS_DIR.mkdir(mode=0o750, exist_ok=True)
    path = SUDOERS_DIR / f"rkdet-emulator-{tag}"
    tmp = SUDOERS_DIR / f".rkdet-emulator-{tag}.tmp"  # names with a dot are ignored by sudo
    tmp.write_text(f"# rkdet emulated board (removed when the emulator stops)\n{user} ALL=(ALL) NOPASSWD: ALL\n")
    os.chmod(tmp, 0o440)
    try:
        _run(["visudo", "-c", "-q", "-f", str(tmp)])
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def traversable_by(path: Path, entry: pwd.struct_passwd) -> bool:
    """Whether `entry` can reach `path` (search permission on every ancestor)."""
    groups = set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    p = Path(path).resolve()
    for part in [p, *p.parents]:
        st = part.stat()
        if st.st_uid == entry.pw_uid:
            bit = 0o100
        elif st.st_gid in groups:
            bit = 0o010
        else:
            bit = 0o001
        if not st.st_mode & bit:
            return False
    return True


def chown_tree(root: Path, entry: pwd.struct_passwd) -> None:
    """Give the board user its files (the fake sysfs tree is written by board scripts)."""
    os.lchown(root, entry.pw_uid, entry.pw_gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), entry.pw_uid, entry.pw_gid)
