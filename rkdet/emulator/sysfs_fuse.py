"""FUSE daemon serving an emulated board root (``sys/``, ``proc/``, ``usr/...``) with kernel semantics.

Why FUSE: board scripts and the runner read and write the board through ordinary file I/O under
``$RKDET_ROOT``; only a real filesystem can give them the kernel's errno on a bad store (EINVAL
from ``echo bogus > scaling_governor``, EACCES when opening a read-only attribute for writing, even
as root), files that appear and vanish (``devfreq/<dev>/userspace/set_freq``) and a ``cur_freq``
that follows the governor and the thermal model. The semantics live in `kernel.KernelBoard`; this module
only maps FUSE calls onto it. Start it with `rkdet.emulator.mount.emulated_sysfs` (which also
clears stale mounts and waits for the daemon), or by hand, in the foreground:

    python -m rkdet.emulator.sysfs_fuse --soc rk3588 --mount DIR --control DIR --log FILE

Test controls (temperature, trip, caps, device load) are files in the ``--control`` directory,
outside the mount; they are documented in `rkdet.emulator.thermal` and docs/EMULATOR.md.
Every store is logged to ``--log``; a Python error in a handler is logged with its traceback
(libfuse would otherwise hand the caller a bare EINVAL), and the test fixtures fail on it.
Files outside ``sys/`` and ``proc/`` (the runtime library) are read-only (EROFS).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import signal
import stat
import sys
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Optional

from rkdet.emulator.kernel import KernelBoard, kernel_error
from rkdet.emulator.socs import PROFILES, CpuPolicy, DevfreqNode, SocProfile, ThermalCap, ThermalZone
from rkdet.errors import EXIT_BOARD

log = logging.getLogger("rkdet.emulator.sysfs")
_NESTED = {"cpu_policies": CpuPolicy, "devfreq": DevfreqNode, "thermal_zones": ThermalZone, "thermal_caps": ThermalCap}


def profile_to_json(profile: SocProfile) -> str:
    """Serialize a (possibly customised) profile for the daemon's ``--profile`` option."""
    from dataclasses import asdict

    return json.dumps(asdict(profile), sort_keys=True, indent=2)


def profile_from_json(text: str) -> SocProfile:
    """Inverse of `profile_to_json` (lists back to tuples, nested dataclasses rebuilt)."""
    data: dict[str, Any] = json.loads(text)

    def tup(value: Any) -> Any:
        return tuple(tup(v) for v in value) if isinstance(value, list) else value

    for key, cls in _NESTED.items():
        data[key] = tuple(cls(**{k: tup(v) for k, v in item.items()}) for item in data.get(key, ()))
    names = {f.name for f in fields(SocProfile)}
    return SocProfile(**{k: tup(v) if k not in _NESTED and k != "extra" else v for k, v in data.items() if k in names})


class BoardFS:
    """mfusepy Operations for a `KernelBoard` (single-threaded: libfuse runs with -s)."""

    use_ns = True  # nanosecond timestamps (mfusepy's non-deprecated mode)

    def __init__(self, board: KernelBoard) -> None:
        self.board = board
        self.uid, self.gid = os.getuid(), os.getgid()
        self.boot_ns = time.time_ns()
        self._next_fh = 1
        self._open: dict[int, tuple[str, Optional[bytes]]] = {}  # fh -> (rel path, last shown)

    @staticmethod
    def _rel(path: str) -> str:
        return path.lstrip("/")

    def _kind(self, rel: str) -> str:
        kind = self.board.kind(rel)
        if kind is None:
            raise kernel_error(errno.ENOENT)
        return kind

    # -- metadata ----------------------------------------------------------------------------
    def getattr(self, path: str, fh: Optional[int] = None) -> dict[str, Any]:
        rel = self._rel(path)
        kind = self._kind(rel)
        st: dict[str, Any] = {"st_uid": self.uid, "st_gid": self.gid, "st_atime": self.boot_ns,
                              "st_mtime": self.boot_ns, "st_ctime": self.boot_ns}
        if kind == "dir":
            st.update(st_mode=stat.S_IFDIR | 0o755, st_nlink=2)
        elif kind == "link":
            st.update(st_mode=stat.S_IFLNK | 0o777, st_nlink=1, st_size=len(self.board.links[rel]))
        else:
            attr = self.board.files[rel]
            size = 4096 if rel.startswith("sys/") else 0 if rel.startswith("proc/") else len(attr.show())
            st.update(st_mode=stat.S_IFREG | attr.mode, st_nlink=1, st_size=size)
        return st

    def readlink(self, path: str) -> str:
        rel = self._rel(path)
        if self._kind(rel) != "link":
            raise kernel_error(errno.EINVAL)
        return self.board.links[rel]

    def readdir(self, path: str, fh: int) -> list[str]:
        rel = self._rel(path)
        if self._kind(rel) != "dir":
            raise kernel_error(errno.ENOTDIR)
        return [".", ".."] + self.board.listdir(rel)

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_namemax": 255}

    # -- permissions -------------------------------------------------------------------------
    # Mode bits are checked here rather than with -o default_permissions: that option makes the
    # kernel ask for attributes of every path component on every lookup (attr_timeout is 0 so
    # that set_freq can vanish), which tripled the cost of a read. Files are root-owned, as on a
    # board: root passes the mode bits, everyone else gets the "other" bits.
    @staticmethod
    def _caller_uid() -> int:
        import mfusepy

        return mfusepy.fuse_get_context()[0]

    def _check_mode(self, mode: int, read: bool, write: bool) -> None:
        if self._caller_uid() == 0:
            return
        if (read and not mode & 0o004) or (write and not mode & 0o002):
            raise kernel_error(errno.EACCES)

    def access(self, path: str, amode: int) -> int:
        rel = self._rel(path)
        kind = self._kind(rel)
        mode = self.board.files[rel].mode if kind == "file" else 0o755
        if amode & os.X_OK and not mode & 0o111:
            raise kernel_error(errno.EACCES)
        self._check_mode(mode, bool(amode & os.R_OK), bool(amode & os.W_OK))
        return 0

    # -- files -------------------------------------------------------------------------------
    def open(self, path: str, flags: int) -> int:
        rel = self._rel(path)
        if self._kind(rel) != "file":
            raise kernel_error(errno.EISDIR)
        attr = self.board.files[rel]
        write = flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
        if write:
            if not rel.startswith(("sys/", "proc/")):
                raise kernel_error(errno.EROFS)
            if attr.store is None:  # kernfs_fop_open: no store -> EACCES, root included
                raise kernel_error(errno.EACCES)
        self._check_mode(attr.mode, read=flags & os.O_ACCMODE != os.O_WRONLY, write=write)
        fh, self._next_fh = self._next_fh, self._next_fh + 1
        self._open[fh] = (rel, None)
        return fh

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        rel, shown = self._open.get(fh, (self._rel(path), None))
        if offset == 0 or shown is None:  # like seq_file: show() at offset 0, later reads page on
            if self.board.kind(rel) != "file":
                raise kernel_error(errno.ENODEV)  # attribute removed while open
            shown = self.board.files[rel].show()
            self._open[fh] = (rel, shown)
        return shown[offset:offset + size]

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        rel = self._open.get(fh, (self._rel(path), None))[0]
        if self.board.kind(rel) != "file":
            raise kernel_error(errno.ENODEV)
        attr = self.board.files[rel]
        if attr.store is None:
            raise kernel_error(errno.EACCES)
        if attr.sysctl and offset > 0:
            log.info("store %s at offset %d ignored (sysctl strict writes)", rel, offset)
            return len(data)
        text = data.decode("utf-8", "replace")
        try:
            attr.store(text)
        except OSError as err:
            log.info("store %s %r -> %s", rel, text.strip(), errno.errorcode.get(err.errno or 0, err.errno))
            raise
        log.info("store %s %r -> ok", rel, text.strip())
        return len(data)

    def truncate(self, path: str, length: int, fh: Optional[int] = None) -> int:
        rel = self._rel(path)
        if self._kind(rel) != "file":
            raise kernel_error(errno.EISDIR)
        if self.board.files[rel].store is None:
            raise kernel_error(errno.EACCES)
        self._check_mode(self.board.files[rel].mode, read=False, write=True)
        return 0  # O_TRUNC on an attribute is accepted and means nothing, as on sysfs

    def release(self, path: str, fh: int) -> int:
        self._open.pop(fh, None)
        return 0

    def utimens(self, path: str, times: Optional[tuple[int, int]] = None) -> int:
        self._kind(self._rel(path))
        return 0

    # -- what sysfs refuses ------------------------------------------------------------------
    def create(self, path: str, mode: int, flags: int = 0) -> int:
        raise kernel_error(errno.EACCES)  # lookup_open: directory has no ->create

    def mknod(self, path: str, mode: int, dev: int) -> int:
        raise kernel_error(errno.EACCES)

    def mkdir(self, path: str, mode: int) -> int:
        raise kernel_error(errno.EPERM)

    def unlink(self, path: str) -> int:
        raise kernel_error(errno.EPERM)

    def rmdir(self, path: str) -> int:
        raise kernel_error(errno.EPERM)

    def rename(self, old: str, new: str) -> int:
        raise kernel_error(errno.EPERM)

    def symlink(self, target: str, source: str) -> int:
        raise kernel_error(errno.EPERM)

    def link(self, target: str, source: str) -> int:
        raise kernel_error(errno.EPERM)

    def chmod(self, path: str, mode: int) -> int:
        raise kernel_error(errno.EPERM)

    def chown(self, path: str, uid: int, gid: int) -> int:
        raise kernel_error(errno.EPERM)


def _load_profile(args: argparse.Namespace, parser: argparse.ArgumentParser) -> SocProfile:
    """The profile asked for; a bad one is a one-line usage error (exit 2), never a traceback."""
    if args.profile:
        try:
            return profile_from_json(Path(args.profile).read_text())
        except (OSError, ValueError, TypeError, KeyError) as err:
            parser.error(f"--profile {args.profile}: not a profile written by profile_to_json ({err})")
    if args.soc.lower() not in PROFILES:
        parser.error(f"unknown --soc {args.soc!r}; known: {', '.join(sorted(PROFILES))}")
    return PROFILES[args.soc.lower()]


def _watch_parent(poll_s: float = 0.5) -> threading.Event:
    """Unmount and exit when the parent dies (a killed test run must not leave mounts behind).

    SIGTERM goes to the main thread, which sits in read() on /dev/fuse: libfuse's handler ends
    the loop and fuse_main unmounts, as for a SIGTERM from outside.
    """
    parent, main_thread = os.getppid(), threading.main_thread().ident
    stopping = threading.Event()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        log.warning("parent process %d is gone; unmounting", parent)
        stopping.set()
        signal.pthread_kill(main_thread, signal.SIGTERM)  # type: ignore[arg-type]

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    return stopping


def main(argv: Optional[list[str]] = None) -> int:
    """Run the daemon in the foreground until unmounted (fusermount3 -u), SIGTERM or its parent exits.

    Exit codes: 0 unmounted, 2 bad arguments, 3 libfuse failed (mount refused, or ended by a signal).
    """
    parser = argparse.ArgumentParser(prog="rkdet-sysfs", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--soc", help="profile name: " + ", ".join(sorted(PROFILES)))
    source.add_argument("--profile", help="profile JSON (profile_to_json) for a customised board")
    parser.add_argument("--mount", required=True, help="mount point, used as RKDET_ROOT")
    parser.add_argument("--control", required=True, help="test-control directory (outside the mount)")
    parser.add_argument("--log", required=True, help="log file (stores, errors, tracebacks)")
    args = parser.parse_args(argv)
    logging.basicConfig(filename=args.log, level=logging.INFO,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    logging.captureWarnings(True)
    sys.excepthook = lambda *exc: log.critical("uncaught exception", exc_info=exc)  # type: ignore[assignment]
    profile = _load_profile(args, parser)
    Path(args.control).mkdir(parents=True, exist_ok=True)
    board = KernelBoard(profile, Path(args.control))

    import mfusepy  # here, so importing this module never needs libfuse

    options: dict[str, Any] = {
        "foreground": True, "nothreads": True, "fsname": f"rkdet-sysfs-{profile.soc}", "subtype": "rkdet",
        "direct_io": True,
        "entry_timeout": 0, "attr_timeout": 0, "negative_timeout": 0,
    }
    if os.geteuid() == 0:
        options["allow_other"] = True  # sessions of a non-root login user on the emulated board
    log.info("serving %s at %s (control %s)", profile.soc, args.mount, args.control)
    stopping = _watch_parent()
    try:
        mfusepy.FUSE(BoardFS(board), args.mount, **options)
    except RuntimeError as err:  # fuse_main's status: non-zero also when a signal ended the loop
        if stopping.is_set():
            log.info("unmounted %s after the parent exited (libfuse status %s)", args.mount, err)
            return 0
        log.error("libfuse exited with status %s (signal or mount failure); mount point %s", err, args.mount)
        return EXIT_BOARD
    log.info("unmounted %s", args.mount)
    return 0


if __name__ == "__main__":
    sys.exit(main())
