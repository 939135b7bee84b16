"""Mount the emulated board filesystem (FUSE, or the plain tree as fallback) and clean up after it.

Why a separate module: the daemon (`sysfs_fuse`) must run in its own process, because a FUSE
daemon that serves its own caller deadlocks, and a test run must never hang on a dead one. Here
the emulator is the daemon's parent: it clears a stale mount first (``/proc/self/mountinfo``,
``fusermount3 -u``, ``-uz`` when busy), starts the daemon in the foreground with its log in the
work dir, waits until the mount answers, and on exit unmounts, waits for the daemon and reaps it.

`namespace_argv` gives the private-mount-namespace mode: a command prefix that bind-mounts the
emulated ``sys`` over ``/sys`` (and the emulated procfs files over theirs) inside a new mount
namespace, then runs the command there. The host never sees those mounts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Union

from rkdet.emulator.thermal import Control
from rkdet.emulator.fake_tree import build_fake_tree
from rkdet.emulator.socs import PROFILES, SocProfile
from rkdet.errors import BoardError, InputError

log = logging.getLogger("rkdet.emulator")
READY_TIMEOUT_S = 10.0
#: procfs files bound over the host's in namespace mode (only those present on both sides)
NAMESPACE_PROC_FILES = ("proc/sys/vm/compaction_proactiveness", "proc/sys/kernel/osrelease", "proc/version")
_CAP_SYS_ADMIN = 21


def fuse_unavailable_reason() -> Optional[str]:
    """None when this process can mount a FUSE filesystem, else why not (one line)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if shutil.which("fusermount3") is None:
        return "fusermount3 not installed (Debian package fuse3)"
    if os.geteuid() != 0:
        return "not running as root"
    try:
        cap_eff = next(int(line.split()[1], 16) for line in Path("/proc/self/status").read_text().splitlines()
                       if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        cap_eff = 0
    if not cap_eff >> _CAP_SYS_ADMIN & 1:
        return "no CAP_SYS_ADMIN"
    try:
        import mfusepy  # noqa: F401  (raises when libfuse3 cannot be loaded)
    except (ImportError, OSError) as err:
        return f"mfusepy/libfuse3 unusable: {err}"
    return None


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mount_entry(path: Path) -> Optional[str]:
    """The filesystem type mounted exactly at `path` (e.g. 'fuse.rkdet'), or None."""
    target = os.path.realpath(path)
    found = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        parts = line.split(" ")
        sep = parts.index("-")
        if _unescape(parts[4]) == target:
            found = parts[sep + 1]  # the last mount on a point is the visible one
    return found


def clear_stale_mount(path: Path) -> None:
    """Unmount whatever is left at `path` (a killed daemon leaves 'Transport endpoint not connected')."""
    for argv in (["fusermount3", "-u", str(path)], ["fusermount3", "-uz", str(path)], ["umount", "-l", str(path)]):
        if mount_entry(path) is None:
            return
        log.warning("clearing stale mount at %s (%s)", path, " ".join(argv[:2]))
        subprocess.run(argv, capture_output=True, timeout=10, check=False)
    if mount_entry(path) is not None:
        raise BoardError(f"{path}: a stale mount is still there; unmount it (fusermount3 -uz {path}) and retry")


@dataclass
class EmulatedSysfs:
    """A mounted emulated board: pass `root` as RKDET_ROOT; `control` drives the thermal model."""

    root: Path
    backend: str  # "fuse" | "plain"
    control_dir: Path
    log_path: Optional[Path] = None
    reason: Optional[str] = None  # why the plain fallback was used
    process: Optional[subprocess.Popen] = None
    profile: Optional[SocProfile] = None

    @property
    def control(self) -> Control:
        """Writer of the test controls (no effect on the plain backend)."""
        return Control(self.control_dir, self.profile)

    def daemon_errors(self) -> list[str]:
        """Lines of the daemon log that show a Python error (a handler bug); empty when clean."""
        if not self.log_path or not self.log_path.exists():
            return []
        text = self.log_path.read_text(errors="replace")
        return [line for line in text.splitlines()
                if line.startswith("Traceback") or " CRITICAL " in line or "Uncaught exception" in line]


def _daemon_argv(profile: SocProfile, mount: Path, control: Path, log_path: Path, workdir: Path) -> list[str]:
    argv = [sys.executable, "-m", "rkdet.emulator.sysfs_fuse"]
    if PROFILES.get(profile.soc) == profile:
        argv += ["--soc", profile.soc]
    else:
        from rkdet.emulator.sysfs_fuse import profile_to_json

        spec = workdir / "profile.json"
        spec.write_text(profile_to_json(profile))
        argv += ["--profile", str(spec)]
    return argv + ["--mount", str(mount), "--control", str(control), "--log", str(log_path)]


def _answers(path: Path) -> bool:
    """Whether `path` is a directory, asked by a child process: a hung daemon must not hang us."""
    try:
        return subprocess.run(["test", "-d", str(path)], timeout=2, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _wait_ready(proc: subprocess.Popen, mount: Path, log_path: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:] if log_path.exists() else []
            raise BoardError(f"emulated sysfs daemon exited ({proc.returncode}) before mounting {mount}; "
                             f"log {log_path}: {' | '.join(tail) or 'empty'}")
        if mount_entry(mount) and _answers(mount / "sys"):
            return
        time.sleep(0.01)
    _stop(proc, mount)
    raise BoardError(f"emulated sysfs at {mount} not ready after {READY_TIMEOUT_S:.0f} s; see {log_path}")


def _stop(proc: subprocess.Popen, mount: Path) -> None:
    """Unmount (lazily if busy), then wait for the daemon; kill it only if it will not go."""
    if mount_entry(mount):
        done = subprocess.run(["fusermount3", "-u", str(mount)], capture_output=True, timeout=10, check=False)
        if done.returncode != 0:
            subprocess.run(["fusermount3", "-uz", str(mount)], capture_output=True, timeout=10, check=False)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    with contextlib.suppress(BoardError):
        clear_stale_mount(mount)


def _as_profile(profile: Union[SocProfile, str]) -> SocProfile:
    if isinstance(profile, SocProfile):
        return profile
    try:
        return PROFILES[profile.lower()]
    except KeyError:
        raise InputError(f"unknown SoC {profile!r}; known: {', '.join(sorted(PROFILES))}") from None


@contextlib.contextmanager
def emulated_sysfs(profile: Union[SocProfile, str], workdir: Path, backend: str = "auto") -> Iterator[EmulatedSysfs]:
    """Serve an emulated board under ``workdir/root`` for the duration of the block.

    backend "fuse" requires FUSE (BoardError, exit 3, when unavailable); "plain" writes the plain
    tree; "auto" uses FUSE when it can and otherwise says so in one line and uses the plain tree.
    The control dir is ``workdir/control``, the daemon log ``workdir/sysfs.log``.
    """
    if backend not in ("auto", "fuse", "plain"):
        raise InputError(f"emulated sysfs backend {backend!r}: use auto, fuse or plain")
    prof = _as_profile(profile)
    workdir = Path(workdir)
    root, control, log_path = workdir / "root", workdir / "control", workdir / "sysfs.log"
    control.mkdir(parents=True, exist_ok=True)
    reason = fuse_unavailable_reason() if backend != "plain" else "plain backend requested"
    if backend == "fuse" and reason:
        raise BoardError(f"FUSE unavailable ({reason}); use backend 'plain'")
    if backend == "plain" or reason:
        if backend == "auto":
            log.warning("emulated sysfs: FUSE unavailable (%s); using the plain tree (no kernel semantics)", reason)
        clear_stale_mount(root)
        yield EmulatedSysfs(build_fake_tree(prof, root), "plain", control, reason=reason, profile=prof)
        return
    clear_stale_mount(root)  # before touching root: stat() of a dead FUSE mount is ENOTCONN
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise BoardError(f"{root}: mount point is not empty; remove it or use a fresh work dir")
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(_daemon_argv(prof, root, control, log_path, workdir),
                                stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=True)
    try:
        _wait_ready(proc, root, log_path)
        yield EmulatedSysfs(root, "fuse", control, log_path=log_path, process=proc, profile=prof)
    finally:
        _stop(proc, root)


_NS_SCRIPT = r"""
set -e
root=$1; shift
mount -n --bind "$root/sys" /sys
for rel in $RKDET_NS_PROC_FILES; do
  if [ -e "$root/$rel" ] && [ -e "/$rel" ]; then
    mount -n --bind "$root/$rel" "/$rel"
  elif [ -e "/$rel" ]; then
    case $rel in
      # a knob the emulated image lacks (no CONFIG_COMPACTION) must not leave the host's writable:
      # an empty read-only tmpfs hides its whole folder (the board has none of that folder's knobs)
      proc/sys/*) d=${rel%/*}; mount -n -t tmpfs -o ro,size=4k,mode=555 rkdet-absent "/$d" ;;
    esac
  fi
done
unset RKDET_NS_PROC_FILES
exec "$@"
"""


def namespace_argv(root: Path) -> list[str]:
    """argv prefix: run the appended command in a private mount namespace that sees `root`'s
    ``sys`` at /sys and its procfs files (compaction_proactiveness, osrelease, version) at their
    real paths; a procfs knob the emulated image lacks is hidden (its folder is an empty read-only
    tmpfs), so no write meant for the board reaches the host. Needs CAP_SYS_ADMIN; the host's mount
    table is untouched. /proc/device-tree cannot
    be provided where the host has none (x86): scripts read /sys/firmware/devicetree/base.

    Usage: ``subprocess.run(namespace_argv(h.root) + ["sh", "-c", "cat /sys/class/devfreq/*/cur_freq"])``
    """
    files = " ".join(NAMESPACE_PROC_FILES)
    return ["unshare", "--mount", "--propagation", "private", "--", "env", f"RKDET_NS_PROC_FILES={files}",
            "sh", "-c", _NS_SCRIPT, "rkdet-ns", str(Path(root).resolve())]
