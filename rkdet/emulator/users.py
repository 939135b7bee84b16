"""The emulated board's own login user, sudo and /run: private files bound over the host's inside
the board's mount namespace, so the host's /etc and /run are never edited.

Why a namespace: a board is a machine of its own. Its sshd runs under `unshare --mount` with
private copies of /etc/passwd, /etc/group, /etc/shadow, /etc/sudoers (an overlay on /etc) and
/etc/sudoers.d (bound) over the host's, and a tmpfs on /run (sshd's privilege-separation dir, sudo's timestamps, pin.sh's
/run/rkdet: per board). The login user exists only in those copies, with a uid drawn at random from
a high range unused on the host (per instance: one board cannot touch another's files). When the
last process of the namespace exits, the binds vanish with it: nothing to remove, nothing to sweep.

`legacy_*` handle what rkdet versions before this one left on the host (users rkdetboard,
rkdetsudo, rkdetbb, /etc/sudoers.d/rkdet-emulator-<port>, the busybox shell link): removed by the
one-off `rkdet emulator cleanup`, stale sudo rules also at every emulator start.
"""

from __future__ import annotations

import grp
import os
import pwd
import random
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rkdet.errors import BoardError, InputError

BUSYBOX = Path("/bin/busybox")
SUDO = Path("/usr/bin/sudo")
#: uids/gids of emulated board users: far above any distribution's ranges (login.defs UID_MAX 60000,
#: systemd's dynamic users 61184-65519, container ranges 100000+65536*n stay below 1.9e9 in practice)
UID_RANGE = range(1_900_000_000, 1_990_000_000)
#: the GECOS field of every emulated board login (also how legacy host users are recognised)
MARKER = "rkdet emulated board login"
#: what the emulated board's sudo allows (Debian's default sudoers plus one passwordless rule)
_SUDOERS = ("Defaults\tenv_reset\nDefaults\tmail_badpass\n"
            'Defaults\tsecure_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n'
            "Defaults\tuse_pty\nroot\tALL=(ALL:ALL) ALL\n")


@dataclass(frozen=True)
class BoardAccount:
    """The login user of one emulated board (exists only inside its namespace)."""

    name: str
    uid: int
    gid: int
    home: Path
    shell: Path


def require_root() -> None:
    """The emulator runs a root sshd in a mount namespace; say so plainly otherwise."""
    if os.geteuid() != 0:
        raise BoardError("emulator: must run as root (it starts a real sshd in its own mount namespace)")
    if shutil.which("unshare") is None:
        raise BoardError("emulator: unshare (util-linux) not found; install util-linux")


def _unused_on_host(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return False
    except KeyError:
        pass
    try:
        grp.getgrgid(uid)
        return False
    except KeyError:
        return True


def new_account(name: str, shell: Path) -> BoardAccount:
    """A user for one board: a fresh uid (= gid) from UID_RANGE that the host does not know.
    `home` (and a busybox shell) is set by the caller once the board dir exists (dataclasses.replace)."""
    rng = random.SystemRandom()
    for _ in range(100):
        uid = rng.choice(UID_RANGE)
        if _unused_on_host(uid):
            return BoardAccount(name, uid, uid, Path("/nonexistent"), shell)
    raise BoardError("emulator: no free uid in the emulated-board range (1900000000+); is /etc/passwd sane?")


def busybox_shell(board_dir: Path) -> Path:
    """A login shell that is busybox's ash: sshd runs it as argv[0]=basename, so a link named `sh`."""
    if not BUSYBOX.exists():
        raise BoardError(f"emulator: {BUSYBOX} missing; install busybox (see .ci/setup)")
    link = board_dir / "shell" / "sh"
    link.parent.mkdir(mode=0o755, exist_ok=True)
    os.symlink(BUSYBOX, link)
    return link


def _without(lines: list[str], name: str, uid: int) -> list[str]:
    """Host entries minus any that would clash with the board user (same name or id)."""
    kept = []
    for line in lines:
        fields = line.split(":")
        if fields[0] == name or (len(fields) > 2 and fields[2] == str(uid)):
            continue
        kept.append(line)
    return kept


def _write(path: Path, text: str, mode: int, gid: int = 0) -> None:
    path.write_text(text)
    os.chown(path, 0, gid)
    os.chmod(path, mode)


def write_private_etc(etc: Path, account: BoardAccount, sudo: bool, *, nopasswd: bool = True) -> Path:
    """The board's /etc files in `etc` (root-owned, 0700): the host's passwd and group entries
    (system users such as sshd's privsep user) plus the board user; a shadow holding only the board
    user (no host hash is copied); with `sudo`, a sudoers granting it `NOPASSWD: ALL` (inside the
    board only) and an empty sudoers.d, so the host's drop-ins do not apply there. `nopasswd=False`
    (TEST CONTROL) writes the rule without NOPASSWD: a board whose sudo wants a password."""
    if sudo and not SUDO.exists():
        raise BoardError("emulator: sudo is not installed; install it (see .ci/setup) for the sudo variant")
    etc.mkdir(mode=0o700)
    os.chmod(etc, 0o700)
    a = account
    passwd = _without(Path("/etc/passwd").read_text().splitlines(), a.name, a.uid)
    passwd.append(f"{a.name}:x:{a.uid}:{a.gid}:{MARKER}:{a.home}:{a.shell}")
    group = _without(Path("/etc/group").read_text().splitlines(), a.name, a.gid)
    group.append(f"{a.name}:x:{a.gid}:")
    _write(etc / "passwd", "\n".join(passwd) + "\n", 0o644)
    _write(etc / "group", "\n".join(group) + "\n", 0o644)
    shadow_gid = next((g.gr_gid for g in grp.getgrall() if g.gr_name == "shadow"), 0)
    _write(etc / "shadow", f"{a.name}:*:19000:0:99999:7:::\n", 0o640, shadow_gid)  # `*`: key login only
    if sudo:
        _write(etc / "sudoers", f"{_SUDOERS}{a.name}\tALL=(ALL) {'NOPASSWD: ' if nopasswd else ''}ALL\n", 0o440)
        res = subprocess.run(["visudo", "-c", "-q", "-f", str(etc / "sudoers")], capture_output=True, text=True)
        if res.returncode != 0:
            raise BoardError(f"emulator: the board's sudoers is rejected by visudo: {res.stderr.strip()}")
        (etc / "sudoers.d").mkdir(mode=0o750)
    (etc / "ns").mkdir(mode=0o700)  # the namespace mounts its overlay's upper layer here (a tmpfs)
    return etc


_NS_SCRIPT = r"""
set -e
etc=$1; shift
# libmount's bookkeeping (utab) in the board's own etc dir, never the host's /run/mount
LIBMOUNT_UTAB=$etc/utab; export LIBMOUNT_UTAB
mount -t tmpfs -o mode=0700,nosuid,nodev rkdet-board-etc "$etc/ns"
mkdir -m 0755 "$etc/ns/upper"
mkdir -m 0700 "$etc/ns/work"
for f in passwd group shadow sudoers; do
  if [ -e "$etc/$f" ]; then cp -p "$etc/$f" "$etc/ns/upper/$f"; fi
done
mount -t overlay rkdet-board-etc -o "lowerdir=/etc,upperdir=$etc/ns/upper,workdir=$etc/ns/work" /etc
if [ -d "$etc/sudoers.d" ] && [ -d /etc/sudoers.d ]; then mount --bind "$etc/sudoers.d" /etc/sudoers.d; fi
mount -t tmpfs -o mode=0755,nosuid,nodev rkdet-board-run /run
mkdir -m 0755 /run/sshd
mkdir -m 1777 /run/lock
# reach (see Reach): up to "--", pairs "--hide DIR" / "--ro PATH" / "--rw PATH". Kept paths are staged,
# each hidden folder gets an empty 0755 tmpfs on top (here only), the kept paths are bound back at their
# own paths (read-only where asked) and the stages dropped: no host permission changes, no copies.
umask 022
mkdir -m 0700 /run/rkdet-reach
n=0; op=
for a do
  [ "$a" = "--" ] && break
  if [ -z "$op" ]; then op=$a; continue; fi
  case $op in --ro|--rw) n=$((n + 1)); mkdir "/run/rkdet-reach/$n"; mount --rbind "$a" "/run/rkdet-reach/$n" ;; esac
  op=
done
for a do
  [ "$a" = "--" ] && break
  if [ -z "$op" ]; then op=$a; continue; fi
  case $op in --hide) mount -t tmpfs -o mode=0755,nosuid,nodev rkdet-board-reach "$a" ;; esac
  op=
done
n=0
for a do
  [ "$a" = "--" ] && break
  if [ -z "$op" ]; then op=$a; continue; fi
  case $op in
    --ro|--rw)
      n=$((n + 1))
      mkdir -p "$a"
      mount --rbind "/run/rkdet-reach/$n" "$a"
      if [ "$op" = --ro ]; then mount -o remount,bind,ro "$a"; fi
      umount -R "/run/rkdet-reach/$n"
      rmdir "/run/rkdet-reach/$n" ;;
  esac
  op=
done
rmdir /run/rkdet-reach
while [ "$1" != "--" ]; do shift; done
shift
unset LIBMOUNT_UTAB
exec "$@"
"""


@dataclass(frozen=True)
class Reach:
    """What the board's namespace must reach of the host's files: `hide` are host folders the board
    user cannot search (each covered by an empty tmpfs inside the namespace), `keep` the paths under
    them bound back at their own paths, `(path, read_only)`. The host's permissions stay as they are."""

    hide: tuple[Path, ...] = ()
    keep: tuple[tuple[Path, bool], ...] = ()

    def argv(self) -> list[str]:
        args: list[str] = []
        for path in self.hide:
            args += ["--hide", str(path)]
        for path, read_only in self.keep:
            args += ["--ro" if read_only else "--rw", str(path)]
        return [*args, "--"]


def _searchable(st: os.stat_result, account: BoardAccount, bit: int = 0o1) -> bool:
    """Whether `account` has permission `bit` (1 search, 4 read) on a file with this stat."""
    shift = 6 if st.st_uid == account.uid else 3 if st.st_gid == account.gid else 0
    return bool(st.st_mode & (bit << shift))


def reach_plan(needed: list[Path], account: BoardAccount, also_keep: list[Path] = ()) -> Reach:
    """The Reach that lets `account` read every path in `needed` inside the board's namespace, and
    keeps every path of `also_keep` (root's own files, e.g. the work dir sshd reads) where it is
    though a folder above it is hidden. `needed` paths are kept read-only. A needed path that the
    account cannot enter itself (a 0700 venv folder) cannot be reached this way: one line."""
    hide: list[Path] = []
    keep: list[tuple[Path, bool]] = []
    for given in needed:
        path = Path(given).resolve()
        st = path.stat()
        if not path.is_dir() or not _searchable(st, account, 0o5):
            raise InputError(f"emulator: {path} is not readable by the board user {account.name} "
                             f"(a folder, mode {st.st_mode & 0o777:o}); make it readable by others (it stays private "
                             f"behind its parent folders: the board reaches it through its own namespace)")
        blocked = [p for p in path.parents if not _searchable(p.stat(), account)]
        if blocked:
            top = blocked[-1]
            if top not in hide:
                hide.append(top)
            keep.append((path, True))
    for given in also_keep:
        path = Path(given).resolve()
        if any(h == path or h in path.parents for h in hide):
            keep.append((path, False))
    # a path under another kept one is reached through it already
    keep = [(p, ro) for p, ro in keep if not any(q != p and q in p.parents and qro == ro for q, qro in keep)]
    hide = [h for h in hide if not any(g != h and g in h.parents for g in hide)]
    return Reach(tuple(sorted(set(hide), key=lambda p: len(p.parts))),
                 tuple(sorted(dict.fromkeys(keep), key=lambda k: len(k[0].parts))))


def namespace_prefix(etc: Path, reach: Reach = Reach()) -> list[str]:
    """argv prefix: run the appended command (the board's sshd) in a private mount namespace whose
    /etc is an overlay of the host's /etc with `etc`'s passwd, group, shadow and sudoers on top (and
    its sudoers.d bound over the host's), and whose /run is a fresh tmpfs. An overlay on the /etc
    directory, not binds on the files: the kernel detaches a mount whose file is renamed over, and
    useradd/userdel on the host replace /etc/passwd that way. `unshare` execs, so the pid is the
    command's. Needs CAP_SYS_ADMIN and overlayfs; the host's mount table, /etc and /run are untouched."""
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _NS_SCRIPT, "rkdet-board-ns",
            str(etc), *reach.argv()]


def traversable_by(path: Path, account: BoardAccount) -> bool:
    """Whether `account` can reach `path` (search permission on every ancestor)."""
    p = Path(path).resolve()
    return all(_searchable(part.stat(), account) for part in [p, *p.parents])


def chown_tree(root: Path, account: BoardAccount) -> None:
    """Give the board user its files (the fake sysfs tree is written by board scripts)."""
    os.lchown(root, account.uid, account.gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), account.uid, account.gid)


# -- what older rkdet versions left on the host --

LEGACY_USERS = ("rkdetboard", "rkdetsudo", "rkdetbb")
LEGACY_SHELL_DIR = Path("/usr/local/lib/rkdet-emulator")
LEGACY_LOCK = Path("/run/lock/rkdet-emulator.lock")
LEGACY_RULE_MARKER = "# rkdet emulated board (removed when the emulator stops)"
_LEGACY_RULE_NAME = re.compile(r"rkdet-emulator-(\d{1,5})")


def listening_ports() -> set[int]:
    """TCP ports something listens on (IPv4 and IPv6), from /proc/net/tcp{,6}."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def stale_legacy_sudo_rules(sudoers_dir: Path = Path("/etc/sudoers.d")) -> list[Path]:
    """Rules an older emulator installed and never removed (it was killed): the file is named
    rkdet-emulator-<port>, starts with that emulator's marker line, and nothing listens on <port>
    (a live older emulator installs its rule only while its sshd listens, so its rule is kept)."""
    if not sudoers_dir.is_dir():
        return []
    ports = listening_ports()
    stale = []
    for path in sorted(sudoers_dir.iterdir()):
        match = _LEGACY_RULE_NAME.fullmatch(path.name)
        if not match or path.is_symlink() or not path.is_file() or int(match.group(1)) in ports:
            continue
        try:
            first = path.read_text(errors="replace").split("\n", 1)[0]
        except OSError:
            continue
        if first == LEGACY_RULE_MARKER:
            stale.append(path)
    return stale


def sweep_legacy_sudo_rules(sudoers_dir: Path = Path("/etc/sudoers.d")) -> list[Path]:
    """Remove stale legacy rules (each is `NOPASSWD: ALL` on the host); returns what was removed."""
    removed = []
    for path in stale_legacy_sudo_rules(sudoers_dir):
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def _uids_in_use() -> set[int]:
    uids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uids.add(os.stat(f"/proc/{entry}").st_uid)
            except OSError:
                pass
    return uids


@dataclass(frozen=True)
class LegacyItem:
    """One thing an older rkdet left on the host, and whether it can go now."""

    what: str
    removable: bool
    reason: str = ""


def legacy_leftovers(names: tuple[str, ...] = LEGACY_USERS) -> list[LegacyItem]:
    """The host users (GECOS = MARKER only), shell link, lock file and stale sudo rules that older
    emulators created; a user with a running process is listed as not removable."""
    items = []
    in_use = _uids_in_use()
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_gecos != MARKER:
            items.append(LegacyItem(f"user {name}", False, "not created by rkdet (GECOS differs); left alone"))
        elif entry.pw_uid in in_use:
            items.append(LegacyItem(f"user {name}", False, "has running processes (an older emulator is in use)"))
        else:
            items.append(LegacyItem(f"user {name}", True))
    link = LEGACY_SHELL_DIR / "sh"
    if link.is_symlink() and os.readlink(link) == str(BUSYBOX) and {p.name for p in LEGACY_SHELL_DIR.iterdir()} == {"sh"}:
        busy = any(i.what == "user rkdetbb" and not i.removable for i in items)
        items.append(LegacyItem(f"link {link}", not busy, "rkdetbb still in use" if busy else ""))
    items.extend(LegacyItem(f"sudo rule {p}", True) for p in stale_legacy_sudo_rules())
    if LEGACY_LOCK.is_file() and not LEGACY_LOCK.is_symlink():
        busy = any(i.what.startswith("user ") and not i.removable for i in items)
        items.append(LegacyItem(f"lock {LEGACY_LOCK}", not busy, "an older emulator is in use" if busy else ""))
    return items


def remove_legacy(item: LegacyItem) -> None:
    """Remove one removable legacy item (userdel --remove takes the home and the user's group)."""
    kind, _, target = item.what.partition(" ")
    if kind == "user":
        res = subprocess.run(["userdel", "--remove", target], capture_output=True, text=True, timeout=60)
        if res.returncode not in (0, 12):  # 12: home could not be removed (already gone)
            raise BoardError(f"emulator cleanup: userdel {target} failed: {res.stderr.strip()}")
    elif kind == "link":
        Path(target).unlink(missing_ok=True)
        with_dir = Path(target).parent
        if with_dir.is_dir() and not any(with_dir.iterdir()):
            with_dir.rmdir()
    elif kind == "sudo":
        Path(target.removeprefix("rule ")).unlink(missing_ok=True)
    elif kind == "lock":
        Path(target).unlink(missing_ok=True)
