"""THE atomic writer of rkdet, host and board (host code imports it through rkdet.records.io).

Why on the board side: rkdet-run must leave nothing half-written on a board that loses power, and
the host needs the same rules (temp name in the same folder, fsync, rename; never a rename over a
device, FIFO or symlink), so there is one implementation, here, in Python 3.6 and the stdlib.
"""

import binascii
import errno
import json
import os
import stat
import sys
from typing import Any, Optional

def _remove_quietly(path):
    # type: (str) -> None
    try:
        os.unlink(path)
    except OSError:
        pass


def _write_through(path, write):
    # type: (str, Any) -> str
    """write(handle) into an existing FIFO or character device: no temp, no rename."""
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "wb") as handle:
        write(handle)
    return path


class _FdSink(object):
    """write(bytes) onto an already open descriptor (its offset shared with the process's own use)."""

    def __init__(self, fd):
        # type: (int) -> None
        self.fd = fd

    def write(self, data):
        # type: (Any) -> int
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.write(self.fd, view[done:])
        return done


def _alias_fd(path):
    # type: (str) -> Optional[int]
    """The descriptor `path` names when it (or a symlink on the way) is /dev/stdout, /dev/fd/N, /proc/self/fd/N."""
    p = os.path.abspath(path)
    names = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
    prefixes = ("/dev/fd/", "/proc/self/fd/", "/proc/%d/fd/" % os.getpid())
    for _ in range(40):
        if p in names:
            return names[p]
        for prefix in prefixes:
            if p.startswith(prefix) and p[len(prefix):].isdigit():
                return int(p[len(prefix):])
        if not os.path.islink(p):
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return None


def write_atomic(path, data, perms=None):
    # type: (str, Any, Optional[int]) -> str
    """THE atomic writer of rkdet, host and board (the host imports it from here).

    `data` is bytes, a str (UTF-8) or a callable(handle) writing bytes. What is at `path` decides how:
    /dev/stdout, /dev/fd/N (and /proc/self/fd/N) write to that open descriptor; a FIFO or a character
    device (/dev/null) is opened and written through; neither is ever renamed over. A symlink is
    followed and its target written (a regular target is replaced atomically, the link stays). A
    directory, socket or block device raises OSError. A regular file or a new name gets a unique temp name in the same folder (O_EXCL), fsync, then a rename, so a
    reader never sees half a file and the temp is removed on any error. `perms` sets the new file's
    mode (default: the replaced file's mode, else 0o666 minus umask). Returns the path written.
    """
    if callable(data):
        write = data
    else:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        write = lambda handle: handle.write(raw)  # noqa: E731
    fd_no = _alias_fd(path)
    if fd_no is not None:  # /dev/stdout: this process's own descriptor, in order with what it printed
        for stream in (sys.stdout, sys.stderr):
            if stream is not None and getattr(stream, "fileno", None):
                try:
                    if stream.fileno() == fd_no:
                        stream.flush()
                except (OSError, ValueError):
                    pass
        write(_FdSink(fd_no))
        return path
    try:
        st = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            return _write_through(path, write)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        raise OSError(errno.EINVAL, "not a regular file, FIFO or character device", path)
    target = os.path.realpath(path)  # a symlink's (possibly not yet existing) target
    folder, name = os.path.split(target)
    for _ in range(100):
        tmp = os.path.join(folder, ".%s.%d-%s.tmp" % (name, os.getpid(), binascii.hexlify(os.urandom(4)).decode()))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name", target)
    try:
        with os.fdopen(fd, "wb") as handle:
            if perms is not None or st is not None:
                os.fchmod(handle.fileno(), perms if perms is not None else stat.S_IMODE(st.st_mode))
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        _remove_quietly(tmp)
        raise
    return target


def _write_atomic(path, mode, write):
    # type: (str, str, Any) -> None
    """write(handle) atomically (see write_atomic); `mode` "w" wraps the handle for text."""
    if mode == "w":
        write_atomic(path, lambda handle: write(_TextSink(handle)))
    else:
        write_atomic(path, write)


class _TextSink(object):
    """Just enough of a text file for write(handle) callers: write(str) as UTF-8."""

    def __init__(self, handle):
        # type: (Any) -> None
        self._handle = handle

    def write(self, text):
        # type: (str) -> int
        return self._handle.write(text.encode("utf-8"))


def write_json_atomic(path, obj):
    # type: (str, Any) -> None
    """Write JSON (sorted keys, indent 2) atomically."""
    _write_atomic(path, "w", lambda handle: handle.write(json.dumps(obj, sort_keys=True, indent=2) + "\n"))


def save_array_atomic(path, array):
    # type: (str, Any) -> None
    """np.save atomically: a reader never sees a half-written .npy (numpy imported here, not at import)."""
    import numpy as np
    _write_atomic(path, "wb", lambda handle: np.save(handle, array, allow_pickle=False))
