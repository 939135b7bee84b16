"""Pull a file or folder from a board without trusting it (docs/SECURITY.md, "Board file listings").

Why this shape: the board names the files, declares their types and sizes, and supplies both the
bytes and their sha256, so none of that can decide where the host writes or how much. Every name
must be a plain relative path (no absolute name, `..`, `.`, empty part or control character) and
every entry a regular file (the board says so, and the host creates each file itself with
O_NOFOLLOW|O_EXCL); sizes are checked against the caps of `Limits` and the host's free disk
before a byte is written, and a file that sends more than it declared is cut off. Everything
lands in a fresh temporary folder next to the destination, renamed into place only once every
file matched the board's sha256, so a refusal leaves nothing behind. SFTP answers are bounded by
`Timeouts.sftp` (a stalled server fails; the connection then falls back to the exec path). A
single file's kind and size are one shell round trip; a folder's sizes, once its listing passed,
one SFTP lstat per file when the board serves SFTP (a link or anything but a plain file goes to
the shell's check as before). Files
of 4 MiB and more always come through `cat` on an exec channel (paramiko's SFTP prefetch costs
~3x the host CPU: bench/results/ssh.md), cut off at their declared size like the rest.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from rkdet.link.files import BoardLink, ExecFiles, FileTransfer, TransferSessionGone
from rkdet.link.shell import CommandRunner, remote_command
from rkdet.link.transfer import STREAM_VERIFY_MIN_BYTES, TransferStats, _Progress, remote_hashes, sha256_file
from rkdet.errors import BoardError, InputError
from rkdet.records.io import swap_folder

# what the remote path is: d (folder), f and its size in bytes (regular file, not a symlink), - (anything
# else or missing): one round trip for a single file's kind and size
_KIND = ('if [ -d "$1" ]; then echo d; elif [ -f "$1" ] && [ ! -h "$1" ]; then echo f; wc -c < "$1" || exit 4; '
         'else echo -; fi')
# a folder's entries, NUL-terminated: regular files, then an empty name, then whatever else is not
# a folder (symlinks, FIFOs, devices, sockets: the host refuses them by name)
_LIST = ('cd "$1" || exit 3; find . -type f -print0 || exit 4; printf "\\0"; '
         'find . ! -type f ! -type d -print0 || exit 4')
# names on stdin, one a line (they hold no control characters by then): size in bytes of each
# regular file that is not a symlink, else "-"
_SIZES = ('cd "$1" || exit 3; while IFS= read -r f; do if [ -f "$f" ] && [ ! -h "$f" ]; then '
          'n=$(wc -c < "$f") || exit 4; echo $n; else echo -; fi; done')
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAME_MAX = 255
_OPEN_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class _Entry:
    """One file to pull: where it is on the board, its path under the destination, its size."""

    src: str
    rel: str  # "" for a single-file pull
    size: int


def _refuse(conn: CommandRunner, remote: str, shown: str, why: str) -> BoardError:
    return BoardError(f"{conn.target.label}: refusing to pull {shown} from {remote}: {why} "
                      f"(a broken or hostile board?)")


def name_problem(rel: str) -> str | None:
    """Why a relative name from a board listing is unsafe to join to a host folder, or None."""
    if rel == "":
        return "an empty name"
    if rel.startswith("/"):
        return "an absolute name"
    if _CONTROL.search(rel):
        return "a name with control characters"
    parts = rel.split("/")
    if ".." in parts:
        return "a name with '..'"
    if "" in parts or "." in parts:
        return "not a normalised relative name"
    if any(len(os.fsencode(p)) > _NAME_MAX for p in parts):
        return f"a name part longer than {_NAME_MAX} bytes"
    return None


def _listing(conn: CommandRunner, remote: str) -> list[str]:
    """The checked relative names of the regular files under a remote folder."""
    out, err = bytearray(), bytearray()
    rc = conn.stream(remote_command(["sh", "-c", _LIST, "sh", remote]), stdout=conn.capped(out, "list files"),
                     stderr=conn.capped(err, "list files"), what="list files")
    if rc != 0:
        raise BoardError(f"{conn.target.label}: cannot list {remote}: "
                         f"{err.decode('utf-8', 'replace').strip()[-200:]!r}")
    raw = out.split(b"\0")
    if raw and raw[-1] == b"":
        raw.pop()  # the terminator of the last name
    cut = raw.index(b"") if b"" in raw else len(raw)
    files, others = raw[:cut], raw[cut + 1:]
    limit = conn.limits.files
    if len(files) > limit:
        raise _refuse(conn, remote, "its listing", f"{len(files)} files, over the files cap ({limit})")
    names: list[str] = []
    seen: set[str] = set()
    for item in files:
        name = os.fsdecode(bytes(item))
        rel = name[2:] if name.startswith("./") else name
        why = name_problem(rel) if name.startswith("./") or name.startswith("/") else "not a name under the folder"
        if why is None and rel in seen:
            why = "a name listed twice"
        if why is not None:
            raise _refuse(conn, remote, repr(rel), why)
        seen.add(rel)
        names.append(rel)
    if others:
        name = os.fsdecode(bytes(others[0]))
        rel = name[2:] if name.startswith("./") else name
        raise _refuse(conn, remote, repr(rel), "not a regular file (a symlink, FIFO, device or socket); "
                                                "a result folder holds regular files only")
    return sorted(names)


def _sizes(conn: CommandRunner, folder: str, names: Sequence[str], shown: Callable[[str], str],
           remote: str) -> list[int]:
    """The board's sizes of `names` (relative to `folder`), each checked to be a regular file."""
    out = bytearray()
    rc = conn.stream(remote_command(["sh", "-c", _SIZES, "sh", folder]),
                     stdin="".join(n + "\n" for n in names).encode("utf-8", "surrogateescape"),
                     stdout=conn.capped(out, "file sizes"), what="file sizes")
    lines = out.decode("utf-8", "replace").split("\n")[: len(names)]
    if rc != 0 or len(lines) != len(names):
        raise BoardError(f"{conn.target.label}: cannot read the sizes of the files under {remote} (exit {rc})")
    sizes = []
    for name, line in zip(names, lines):
        if not line.isdigit():
            raise _refuse(conn, remote, shown(name), "not a regular file (a symlink, FIFO, device or socket)")
        sizes.append(int(line))
    return sizes


_ASK_EACH_MAX = 256  # a folder's files asked one SFTP lstat each (~0.2-1 ms) before one shell loop asks them all


def _sftp_sizes(conn: BoardLink, folder: str, names: Sequence[str]) -> list[int] | None:
    """The sizes of a folder's regular files from one SFTP lstat each (no process per file: the shell
    loop starts a `wc -c` for every file, ~150 ms for a deploy's 17 result files under load); None
    (ask the shell, which refuses what is not a regular file) when there is no SFTP, too many names,
    or any entry is not a plain regular file."""
    if not names or len(names) > _ASK_EACH_MAX:
        return None
    files = conn.files()
    sizes = []
    for name in names:
        found = files.entry(str(PurePosixPath(folder) / name))
        if found is None or found[0] != "f":
            return None
        sizes.append(found[1])
    return sizes


def _check_room(conn: CommandRunner, remote: str, entries: Sequence[_Entry], local: Path) -> None:
    """Caps first (per file, in all), then the host's free disk: all before a byte is written."""
    lim = conn.limits
    for e in entries:
        if e.size > lim.file_bytes:
            raise _refuse(conn, remote, repr(e.rel or PurePosixPath(e.src).name),
                          f"{e.size} bytes, over the per-file cap ({lim.file_bytes} bytes)")
    total = sum(e.size for e in entries)
    if total > lim.total_bytes:
        raise _refuse(conn, remote, f"{len(entries)} files", f"{total} bytes in all, over the total cap "
                                                              f"({lim.total_bytes} bytes)")
    free = shutil.disk_usage(local.parent).free
    if free - total < lim.keep_free_bytes:
        raise BoardError(f"{conn.target.label}: not enough free disk for the pull of {remote} ({total} bytes) "
                         f"into {local.parent}: {free} bytes free, {lim.keep_free_bytes} must stay free")


def _regular(path: Path) -> bool | None:
    """True: a regular file; False: something else (folder, link, device, FIFO); None: absent."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


def _check_destination(local: Path, folder: bool) -> None:
    """The destination is absent, or of the kind the pull replaces (never a link, device or FIFO)."""
    try:
        mode = os.lstat(local).st_mode
    except FileNotFoundError:
        return
    if folder and not stat.S_ISDIR(mode):
        raise InputError(f"{local}: exists and is not a folder (a symlink or a file); refusing to pull a folder "
                         "over it; pass another destination")
    if not folder and not stat.S_ISREG(mode):
        raise InputError(f"{local}: exists and is not a regular file (a folder, symlink, device or FIFO); "
                         "refusing to replace it; pass another destination")


def _create(path: Path) -> BinaryIO:
    """A new file that did not exist, never through a symlink."""
    return os.fdopen(os.open(path, _OPEN_NEW, 0o644), "wb")


def pull(conn: BoardLink, remote: str, local: Path, *, progress: bool = False) -> TransferStats:
    """Copy the remote file or folder `remote` to exactly `local` (see the module docstring).

    Files of an existing local folder whose sha256 matches the board's are kept (hard-linked into
    the new folder, not downloaded again); files the board no longer lists are dropped.
    """
    start = time.monotonic()
    remote = conn.abspath(remote)
    local = Path(local)
    # the shell, not SFTP, answers first: a board's lies in its listing are named before any SFTP stall
    answer = conn.run(["sh", "-c", _KIND, "sh", remote]).out.split()
    kind = answer[0] if answer else "-"
    if kind not in ("d", "f"):
        raise BoardError(f"{conn.target.label}: {remote}: no such file or folder on the board "
                         "(or not a regular file)")
    folder = kind == "d"
    _check_destination(local, folder)
    local.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        names = _listing(conn, remote)
        sizes = _sftp_sizes(conn, remote, names) or _sizes(conn, remote, names, repr, remote)
        entries = [_Entry(str(PurePosixPath(remote) / n), n, s) for n, s in zip(names, sizes)]
    else:
        if len(answer) != 2 or not answer[1].isdigit():
            raise _refuse(conn, remote, repr(PurePosixPath(remote).name), "no size in bytes")
        entries = [_Entry(remote, "", int(answer[1]))]
    _check_room(conn, remote, entries, local)
    if folder:
        work = Path(tempfile.mkdtemp(prefix=f".{local.name}.rkdet-", suffix=".tmp", dir=local.parent))
        os.chmod(work, 0o755)
    else:
        work = local.with_name(f".{local.name}.rkdet-{secrets.token_hex(4)}.tmp")
    try:
        stats = _fetch(conn, remote, entries, local, work, folder, progress)
        if folder:
            swap_folder(work, local)  # the one folder swap: an existing folder is replaced whole
        else:
            os.replace(work, local)
    finally:
        if folder:
            shutil.rmtree(work, ignore_errors=True)
        else:
            work.unlink(missing_ok=True)
    stats.seconds = time.monotonic() - start
    return stats


def _fetch(conn: BoardLink, remote: str, entries: Sequence[_Entry], local: Path, work: Path, folder: bool,
           progress: bool) -> TransferStats:
    """Download (or keep) every entry into `work`, then check each against the board's sha256."""
    channel = conn.files()
    stats = TransferStats(method=channel.method)
    bars = _Progress(progress)
    real_work = os.path.realpath(work) if folder else ""
    got: dict[int, str] = {}
    with ThreadPoolExecutor(1, thread_name_prefix="rkdet-hash") as pool:
        future = pool.submit(remote_hashes, conn, [e.src for e in entries])
        for index, e in enumerate(entries):
            dest = work / e.rel if folder else work
            if folder:
                try:
                    dest.parent.mkdir(parents=True, exist_ok=True)
                except OSError as err:
                    raise _refuse(conn, remote, repr(e.rel), f"cannot be written ({err.strerror})") from None
                if not os.path.realpath(dest).startswith(real_work + os.sep):
                    raise _refuse(conn, remote, repr(e.rel), "resolves outside the destination")
                old = local / e.rel
                if _regular(old) and sha256_file(old) == future.result()[index]:
                    try:
                        os.link(old, dest, follow_symlinks=False)
                    except OSError:
                        shutil.copyfile(old, dest, follow_symlinks=False)
                    stats.files_skipped += 1
                    stats.bytes_skipped += os.lstat(dest).st_size
                    continue
            h = hashlib.sha256()
            try:
                f = _create(dest)
            except OSError as err:
                raise _refuse(conn, remote, repr(e.rel), f"cannot be written ({err.strerror})") from None
            with f:
                def sink(data: bytes, f: BinaryIO = f) -> None:
                    h.update(data)
                    f.write(data)

                # big files come through `cat` on an exec channel even when SFTP is there: paramiko's
                # prefetching get parses every 256 KiB answer in Python (64 MiB, loopback: ~3x the
                # host CPU of the exec stream and 0.4x scp's speed); the board hashes the file meanwhile
                big = e.size >= STREAM_VERIFY_MIN_BYTES
                try:
                    size = _download(conn, ExecFiles(conn) if big else channel, e, sink, bars, remote)
                except TransferSessionGone:  # dropped: this file again over exec, from its first byte
                    f.seek(0)
                    f.truncate()
                    h = hashlib.sha256()
                    size = _download(conn, ExecFiles(conn), e, sink, bars, remote)
            got[index] = h.hexdigest()
            stats.files_sent += 1
            stats.bytes_sent += size
            channel = conn.files()  # exec once a stalled SFTP was dropped
        hashes = future.result()
    for index, digest in got.items():
        if hashes[index] != digest:
            raise BoardError(f"{conn.target.label}: {entries[index].src!r} changed or arrived corrupted during the "
                             "pull (sha256 mismatch); retry")
    return stats


def _too_much(conn: CommandRunner, remote: str, e: _Entry) -> BoardError:
    return _refuse(conn, remote, repr(e.rel or PurePosixPath(e.src).name),
                   f"it sent more than the {e.size} bytes it declared")


def _download(conn: CommandRunner, channel: FileTransfer, e: _Entry, sink: Callable[[bytes], None],
              bars: _Progress, remote: str) -> int:
    """Stream one remote file into `sink`, at most its declared size; returns the bytes received."""
    total = 0

    def counted(data: bytes) -> None:
        nonlocal total
        total += len(data)
        if total > e.size:
            raise _too_much(conn, remote, e)
        sink(data)

    with bars.task(f"pull {PurePosixPath(e.src).name}", e.size) as advance:
        channel.get(e.src, e.size, counted, advance)
    return total


__all__ = ["name_problem", "pull"]
