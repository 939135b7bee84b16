"""Verified, resumable-by-skipping file transfer between host and board over one `BoardLink` (rkdet.link.files).

Why: a deploy pushes models of tens of MB again and again, so a file already on the board with
the right sha256 is not sent twice; a half-sent file must never be mistaken for a whole one, so
each file goes to a temporary name, is hashed on the receiving side, and only then renamed. SFTP
(paramiko's pipelined put; small pulls' prefetching get) is used when the board has it; boards without an SFTP subsystem (Dropbear on Buildroot) get the same guarantees by
streaming through `cat` over an exec channel (both are `FileTransfer`s: rkdet.link.sftp, rkdet.link.files).
Remote helpers are POSIX sh + busybox applets only.

Big pushes (>= STREAM_VERIFY_MIN_BYTES) go through one exec channel into `cat > tmp`, and the same
board script then hashes the file it wrote (`sha256 < tmp`, read back from the page cache); the host
hashes its file again on a second thread (`_HashingReader`), so the two hashes run side by side.
From SPLIT_MIN_BYTES the file arrives in two parts (`_RECEIVE_SPLIT`): the board hashes the first
three quarters from the file while the last quarter arrives, so only that quarter's hash is left
after the send; each part's hash must be the host's. `tee tmp | sha256` hashed
while the bytes arrived, but tee's 8 KiB reads and the second pipe cost the board 40-50 ms of CPU per
64 MiB more than `cat` + a re-read (bench/results/ssh.md), and on the bench's shared CPUs that is wall
time. SFTP cannot hash on the server, so these files go through an exec channel on every board;
small files keep the batched path (one SFTP or `cat` channel each, one re-hash round trip for all:
cheaper than a process per file).

Pulls, which must not trust what the board lists or sends, are in rkdet/link/pull.py.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable

from rkdet.link.files import BoardLink, FileTransfer
from rkdet.link.sftp import request_size
from rkdet.link.shell import CommandRunner, remote_command
from rkdet.errors import BoardError, InputError
from rkdet.onboard.hashing import file_sha256

PROGRESS_MIN_BYTES = 8 << 20  # progress bars only for files at least this big
STREAM_VERIFY_MIN_BYTES = 4 << 20  # pushed through _RECEIVE (hashed by the board in the script that wrote them)
STALLED_BYTES_PER_S = 1 << 20  # a streamed push may take command timeout + size at this rate

# the board's sha256 of stdin as "<hex> ...": openssl (CPU SHA instructions, ~1 GB/s) when it gives the
# known empty hash, else sha256sum (coreutils and busybox use neither: ~150 MB/s here, below loopback
# copy speed). Probed lazily, once per script, so a script that hashes nothing starts no openssl;
# a script may be told the answer (o=1 openssl, o=0 sha256sum) when an earlier one showed it.
# `digests FILE...`: the same tool over many files in one process, "<hex> *name" / "<hex>  name" a line
# (sha256sum prefixes a backslash to the line of a name holding one).
_DIGEST = ('o=; tool() { if [ -z "$o" ]; then o=0; e=$(openssl dgst -sha256 -r < /dev/null 2> /dev/null) && '
           '[ "${e%% *}" = ' + hashlib.sha256(b"").hexdigest() + ' ] && o=1; fi; }; '
           'digest() { tool; if [ "$o" = 1 ]; then openssl dgst -sha256 -r; else sha256sum; fi; }; '
           'digests() { tool; if [ "$o" = 1 ]; then openssl dgst -sha256 -r -- "$@"; else sha256sum -- "$@"; fi; }; ')
# first the folders to create, then "--", then the files: one line per file, in order, "-" (no such
# file), "+" (hashed below) or, for a name holding a newline, its hash; then "="; then one `digests`
# line per "+", in order: one hashing process for all the files (a deploy's result pull: one
# openssl per file was ~450 ms of 17 files under load). `for` expands its list once, so the loop
# shifts the names off "$@" while appending the files to hash.
# (the first argument: the digest tool if known, as _RECEIVE's second)
_HASHES = (_DIGEST.replace("o=;", 'o="$1"; shift;', 1)
           + 'while [ "$1" != -- ]; do [ -d "$1" ] || mkdir -p "$1" || exit 3; shift; done; shift; '
           "nl='\n'; for f do shift; if [ ! -f \"$f\" ]; then echo -; else case $f in *\"$nl\"*) "
           'h=$(digest < "$f") || exit 4; echo "${h%% *}";; *) echo +; set -- "$@" "$f";; esac; fi; done; '
           'echo =; [ $# = 0 ] || digests "$@" || exit 4')
# args (`_commit_args`): the digest tool if known, the number of quadruple arguments, the temp files
# to hash, "--", quadruples tmp final mode sha. Verifies each temp file's hash on the board (the
# board's hash of what it wrote, re-read from its page cache; sha "-": already verified while it
# streamed, see _RECEIVE), then chmod + rename. All temp files are hashed by one `digests` process
# (the loop moves them behind the quadruples, which `shift "$nq"` then drops); a name holding a
# newline is hashed on its own. If the hashing process fails, nothing counts as verified: every
# temp file is removed and named on stderr.
_COMMIT = (_DIGEST.replace("o=;", 'o="$1"; nq="$2"; shift 2;', 1)
           + "nl='\n'; hs=$(for f do shift; [ \"$f\" = -- ] && break; set -- \"$@\" \"$f\"; done; shift \"$nq\"; "
           '[ $# = 0 ] || digests "$@" 2> /dev/null) || hs=; while [ "$1" != -- ]; do shift; done; shift; '
           'bad=0; while [ $# -ge 4 ]; do h=$4; if [ "$4" != - ]; then case $1 in *"$nl"*) h=$(digest < "$1");; '
           '*) case $hs in *"$nl"*) h=${hs%%"$nl"*}; hs=${hs#*"$nl"};; *) h=$hs; hs=;; esac;; esac; '
           'h=${h%% *}; h=${h#\\\\}; fi; '
           'if [ "$h" = "$4" ]; then chmod "$3" "$1" && mv -f "$1" "$2" || bad=1; '
           'else rm -f "$1"; echo "$2" >&2; bad=1; fi; shift 4; done; exit $bad')
# args: a temp file, the digest tool if known (1 openssl, 0 sha256sum, "" probe). stdin goes into the
# file, then the digest of the file as written prints "<sha256> ..." on stdout; either failing
# removes the file, exit 5, after reading the rest of stdin (so the host's send ends and it reads
# the shell's one line, as `cannot create ...: Permission denied`, not a closed channel).
_RECEIVE = (_DIGEST.replace("o=;", 'o="${2-}";', 1)
            + 'cat > "$1" && digest < "$1" && exit 0; cat > /dev/null; rm -f "$1"; exit 5')
# _RECEIVE for a file of SPLIT_MIN_BYTES and more, in two parts; args: as _RECEIVE's, then the first
# part's size in MiB (`_split_at`). The first part arrives through `dd iflag=fullblock` (exact from a
# pipe: GNU and busybox dd), then a background job hashes it from the file while `cat` appends the
# rest; after the send only the last part is hashed (read from its offset: dd's skip seeks the
# shared descriptor). Two lines on stdout, the parts' "<sha256> ..." in order (`wait` orders them).
# A dd without fullblock (probed: nothing read) gets the same two lines after a plain `cat`.
# Failing anywhere: the file is removed, exit 5, after the rest of stdin was read (as _RECEIVE).
_RECEIVE_SPLIT = (_DIGEST.replace("o=;", 'o="${2-}";', 1)
                  + 'tool; m=1048576; if dd if=/dev/null iflag=fullblock count=0 2> /dev/null; then '
                  'dd bs=$m count="$3" iflag=fullblock > "$1" 2> /dev/null && '
                  '{ dd if="$1" bs=$m count="$3" 2> /dev/null | digest & } && cat >> "$1" && '
                  't=$({ dd bs=$m skip="$3" count=0 2> /dev/null && digest; } < "$1") && wait $! && '
                  'echo "$t" && exit 0; '
                  'else cat > "$1" && dd if="$1" bs=$m count="$3" 2> /dev/null | digest && '
                  '{ dd bs=$m skip="$3" count=0 2> /dev/null && digest; } < "$1" && exit 0; fi; '
                  'wait; cat > /dev/null; rm -f "$1"; exit 5')
# a streamed push this big arrives in two parts (_RECEIVE_SPLIT): the board hashes the first while the
# rest arrives. Below it the extra processes cost what the overlap saves (12 MiB: no gain measured)
SPLIT_MIN_BYTES = 32 << 20
_MiB = 1 << 20


def _split_at(size: int) -> int:
    """Where a streamed push's first part ends, in whole MiB (0: one part). About 3/4 of the file: the
    board's hash of that part ends while the last quarter still arrives, so only that quarter's hash
    is left after the send (64 MiB through OpenSSH on loopback: 190 vs 220 ms; halves: 205 ms)."""
    return (size * 3 // 4) // _MiB if size >= SPLIT_MIN_BYTES else 0


def _sha256_parts(path: Path, cut: int) -> list[str]:
    """Hex sha256 of a file's bytes before `cut` and from it, in one read (the host's side of
    _RECEIVE_SPLIT)."""
    parts, done = [hashlib.sha256(), hashlib.sha256()], 0
    with open(path, "rb") as f:
        while chunk := f.read(_MiB):
            head = max(0, min(len(chunk), cut - done))
            if head:
                parts[0].update(chunk[:head])
            if head < len(chunk):
                parts[1].update(chunk[head:])
            done += len(chunk)
    return [p.hexdigest() for p in parts]


# which digest each board's receiving script used (1 openssl, 0 sha256sum), read from its output
# ("<hex> *stdin" is openssl's -r format, "<hex>  -" sha256sum's): later pushes skip the openssl probe
_board_digest: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()


def _known_digest(conn: object) -> str:
    """The board's digest tool as a script argument: "1" openssl, "0" sha256sum, "" not known yet (probe)."""
    try:
        return _board_digest.get(conn, "")
    except TypeError:  # a link that cannot be weakly referenced probes every time
        return ""


@dataclass
class TransferStats:
    """What a push or pull did: files and bytes actually sent vs skipped as already identical."""

    files_sent: int = 0
    files_skipped: int = 0
    bytes_sent: int = 0
    bytes_skipped: int = 0
    seconds: float = 0.0
    method: str = ""  # "sftp" or "exec": the channel of downloads and of small pushes (big pushes:
    # always exec, see STREAM_VERIFY_MIN_BYTES)
    # what the transfer survived, one line each (an SFTP session that ended under a download, the file
    # fetched again over exec): said as a warning, so the cause can still be looked for
    notes: list[str] = field(default_factory=list)

    def add(self, other: TransferStats) -> None:
        self.files_sent += other.files_sent
        self.files_skipped += other.files_skipped
        self.bytes_sent += other.bytes_sent
        self.bytes_skipped += other.bytes_skipped
        self.seconds += other.seconds
        self.method = self.method or other.method
        self.notes += other.notes


def sha256_file(path: Path) -> str:
    """Hex sha256 of a local file, streamed (the runner's one definition)."""
    return file_sha256(str(path))


def _local_files(local: Path) -> list[tuple[Path, str]]:
    """(file, posix path relative to `local`) for a file or every regular file under a directory."""
    if local.is_file():
        return [(local, "")]
    if not local.is_dir():
        raise InputError(f"{local}: no such file or directory to push")
    found = []
    for dirpath, dirnames, filenames in os.walk(local, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_file():
                found.append((p, p.relative_to(local).as_posix()))
    return found


def _join(base: str, rel: str) -> str:
    return base if not rel else str(PurePosixPath(base) / rel)


def _tmp_name(path: str) -> str:
    p = PurePosixPath(path)
    return str(p.parent / f".{p.name}.rkdet-{secrets.token_hex(4)}.tmp")


def remote_hashes(conn: CommandRunner, paths: Sequence[str], mkdirs: Sequence[str] = ()) -> list[str | None]:
    """sha256 of each remote path (None when missing), one round trip; creates `mkdirs` first."""
    if not paths and not mkdirs:
        return []
    res = conn.run(["sh", "-c", _HASHES, "sh", _known_digest(conn), *mkdirs, "--", *paths], check=False)
    lines = res.out.split("\n")
    marks, rest = lines[: len(paths)], lines[len(paths) + 1:]
    batched = iter(line.split(" ", 1)[0].lstrip("\\") for line in rest[: marks.count("+")])
    hashes = [None if mark == "-" else next(batched, "") if mark == "+" else mark for mark in marks]
    if res.rc != 0 or len(marks) != len(paths) or lines[len(paths):len(paths) + 1] != ["="] or "" in hashes:
        what = "create" if res.rc == 3 else "hash"
        raise BoardError(f"{conn.target.label}: cannot {what} remote files "
                         f"({(res.err.strip().splitlines() or ['exit ' + str(res.rc)])[-1]})")
    return hashes


class _Progress:
    """A rich progress bar for big files only; a no-op otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar = None

    @contextmanager
    def task(self, name: str, size: int) -> Iterator[Callable[[int], None]]:
        if not self.enabled or size < PROGRESS_MIN_BYTES:
            yield lambda n: None
            return
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      TimeRemainingColumn(), transient=True) as bar:
            task = bar.add_task(name, total=size)
            yield lambda n: bar.update(task, advance=n)


class _HashingReader:
    """What a push reads a file through, and the host's sha256 of it.

    Small files: the sha256 of the very bytes read for upload (one pass). A streamed file
    (`rehash`, the file's path): its bytes pass through unhashed, and once the send reached the end
    of the file a second thread hashes the file read again (page cache), while the board hashes the
    file it wrote. Why: hashing inline made the host's sha256 (~40 ms per 64 MiB) part of the send,
    whose Python packet work is the slowest stage; after it, the two hashes run side by side on two
    CPUs. A file rewritten during the push then fails the comparison (nothing lands), where inline
    hashing would have placed a torn copy. Through OpenSSH's client (`direct_fd`) the client reads
    the file itself and the re-hash runs beside it from the start."""

    def __init__(self, f: BinaryIO, rehash: Path | None = None, cut: int = 0) -> None:
        self._f = f
        self._rehash = rehash
        self._cut = cut  # re-hashed in two parts, split at this byte (_RECEIVE_SPLIT); 0: whole
        self._sha = hashlib.sha256()
        self._thread: threading.Thread | None = None
        self._digests: list[str] = []  # the re-read file's (one per part)
        self._error: InputError | None = None

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        if self._rehash is None:
            self._sha.update(data)
        elif not data:
            self._start_rehash()
        return data

    def direct_fd(self) -> int | None:
        """The file's descriptor, for a sender that reads the file itself (OpenSSH's client: no copy
        through Python), or None when the host must hash the bytes as read (small files). The host's
        re-hash starts now, beside that sender."""
        if self._rehash is None:
            return None
        self._start_rehash()
        return self._f.fileno()

    def _start_rehash(self) -> None:
        if self._thread is None and self._rehash is not None:
            self._thread = threading.Thread(target=self._hash_file, args=(self._rehash,), name="rkdet-sha256",
                                            daemon=True)
            self._thread.start()

    def _hash_file(self, path: Path) -> None:
        try:
            # hashlib releases the GIL for its 1 MiB chunks
            self._digests = _sha256_parts(path, self._cut) if self._cut else [sha256_file(path)]
        except OSError as err:
            self._error = InputError(f"{path}: cannot be read again to hash it after sending it "
                                     f"({err.strerror or err}); nothing was placed on the board, retry the push")

    def hexdigest(self) -> str:
        """The host's sha256 of a file read whole (small files: the bytes read; local work only)."""
        return self.part_digests()[0] if self._rehash is not None and not self._cut else self._sha.hexdigest()

    def part_digests(self) -> list[str]:
        """The host's sha256 of each part a streamed file was received in (once its second thread
        finished; local work only)."""
        if self._rehash is None:
            return [self._sha.hexdigest()]
        self._start_rehash()
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._digests


def push(conn: BoardLink, local: Path, remote: str, *, progress: bool = False) -> TransferStats:
    """Copy `local` (file or directory) to exactly the remote path `remote`; skip identical files.

    Files absent on the board are hashed while they are read for upload (no extra pass); a file
    present on the board is hashed first, and sent only if its hash differs. Big files are hashed
    by the board as they arrive (`_stream_verified`), small ones in one batch before the renames.
    """
    remote = conn.abspath(remote)
    files = _local_files(Path(local))
    return _push(conn, [(path, _join(remote, rel)) for path, rel in files], {remote} if Path(local).is_dir() else set(),
                 progress)


def push_files(conn: BoardLink, pairs: Sequence[tuple[Path, str]], *, progress: bool = False) -> TransferStats:
    """`push` of several single files, each to its own remote path, as one transfer: one skip check,
    one commit round trip for all (a deploy's board scripts were a push each: three round trips apiece)."""
    for path, _ in pairs:
        if not Path(path).is_file():
            raise InputError(f"{path}: no such file to push")
    return _push(conn, [(Path(path), conn.abspath(target)) for path, target in pairs], set(), progress)


def _push(conn: BoardLink, pairs: Sequence[tuple[Path, str]], folders: set[str], progress: bool) -> TransferStats:
    """The verified push of local files to remote paths (absolute); `folders` are made even when empty."""
    start = time.monotonic()
    channel = conn.files()
    stats = TransferStats(method=channel.method)
    targets = [target for _, target in pairs]
    dirs = sorted({str(PurePosixPath(t).parent) for t in targets} | folders)
    have = [None] * len(targets) if _all_absent(channel, targets, dirs) else remote_hashes(conn, targets, mkdirs=dirs)
    bars = _Progress(progress)
    pending: list[str] = []  # quadruples for _COMMIT: tmp final mode sha ("-": verified while streamed)
    for (path, target), got in zip(pairs, have):
        size = path.stat().st_size
        if got is not None and sha256_file(path) == got:
            stats.files_skipped += 1
            stats.bytes_skipped += size
            continue
        tmp = _tmp_name(target)
        streamed = size >= STREAM_VERIFY_MIN_BYTES
        with bars.task(f"push {path.name}", size) as advance, open(path, "rb") as raw:
            f = _HashingReader(raw, path if streamed else None, _split_at(size) * _MiB)
            if streamed:
                _stream_verified(conn, f, size, tmp, advance, path, target, pending[0::4])
            else:
                channel.put(f, tmp, advance, shown=f"{path} to {target}", name=path.name)
        mode = format(stat.S_IMODE(path.stat().st_mode) | 0o600, "o")
        pending += [tmp, target, mode, "-" if streamed else f.hexdigest()]
        stats.files_sent += 1
        stats.bytes_sent += size
    # all verified while they streamed: chmod + rename through the SFTP server when it is there (no
    # process on the board); anything else, or no SFTP: the commit script (re-hash, chmod, mv)
    moves = [(pending[i], pending[i + 1], int(pending[i + 2], 8)) for i in range(0, len(pending), 4)]
    if pending and not (all(sha == "-" for sha in pending[3::4]) and _place(conn, moves)):
        res = conn.run(["sh", "-c", _COMMIT, "sh", *_commit_args(conn, pending)], check=False)
        if res.rc != 0:
            bad = res.err.strip().splitlines()
            raise BoardError(f"{conn.target.label}: {bad[0] if bad else targets[0]} arrived corrupted or could not be "
                             f"renamed into place (sha256 mismatch on the board); retry the push")
    stats.seconds = time.monotonic() - start
    return stats


def _commit_args(conn: object, pending: Sequence[str]) -> list[str]:
    """_COMMIT's arguments for `pending` quadruples (tmp final mode sha)."""
    hashed = [tmp for tmp, sha in zip(pending[0::4], pending[3::4]) if sha != "-" and "\n" not in tmp]
    return [_known_digest(conn), str(len(pending)), *hashed, "--", *pending]


_ASK_EACH_MAX = 8  # paths asked one by one (FileTransfer.entry) before one shell round trip asks them all


def _all_absent(channel: FileTransfer, targets: Sequence[str], dirs: Sequence[str]) -> bool:
    """True when every folder exists and no target does, asked without a shell (SFTP lstat): then
    there is nothing to hash or create on the board. False as soon as anything else is found."""
    if len(targets) + len(dirs) > _ASK_EACH_MAX:
        return False
    return (all(channel.entry(d) == ("d", 0) for d in dirs)
            and all(channel.entry(t) == ("-", 0) for t in targets))


def _place(conn: BoardLink, moves: Sequence[tuple[str, str, int]]) -> bool:
    """`FileTransfer.place` of verified temp files; on failure the temp files not yet renamed are removed."""
    try:
        return conn.files().place(moves)
    except BoardError:
        with suppress(BoardError):
            conn.run(["rm", "-f", *(tmp for tmp, _, _ in moves)], check=False)
        raise


def _stream_verified(conn: BoardLink, reader: _HashingReader, size: int, tmp: str,
                     advance: Callable[[int], None], path: Path, target: str, earlier_tmps: Sequence[str]) -> None:
    """Send one file into `tmp` through _RECEIVE; the board's hash of the bytes it received must be
    the host's hash of the bytes it read. On any failure the temp files of this push are removed."""
    out, err = bytearray(), bytearray()
    try:
        known, cut = _known_digest(conn), _split_at(size)
        script = ["sh", "-c", _RECEIVE_SPLIT, "sh", tmp, known, str(cut)] if cut else ["sh", "-c", _RECEIVE, "sh", tmp, known]
        rc = conn.stream(remote_command(script), stdin=reader,
                         stdout=conn.capped(out, f"upload {path.name}", 4096),
                         stderr=conn.capped(err, f"upload {path.name}"), on_send=advance, what=f"upload {path.name}",
                         timeout=conn.command_timeout + size / STALLED_BYTES_PER_S, bulk=size)
        words = out.split()  # "<sha256> <mark>" per part; the mark says the tool ("*stdin" openssl, "-" sha256sum)
        board_shas = [w.decode("ascii", "replace") for w in words[0::2]]
        marks = {bytes(w) for w in words[1::2]}
        if rc == 0 and len(words) == 2 * (2 if cut else 1) and len(marks) == 1 and marks <= {b"*stdin", b"-"}:
            with suppress(TypeError):
                _board_digest[conn] = "1" if marks == {b"*stdin"} else "0"
        if rc != 0:
            said = err.decode("utf-8", "replace").strip().splitlines() or [f"exit {rc}"]
            raise BoardError(f"{conn.target.label}: upload of {path} to {target} failed: {said[0]}")
        if board_shas != reader.part_digests():
            raise BoardError(f"{conn.target.label}: {target} arrived corrupted (the board's sha256 of the file "
                             f"it wrote differs from the host's sha256 of {path}); retry the push")
    except (BoardError, InputError):
        with suppress(BoardError):  # the connection may be gone: the first error is the one to report
            conn.run(["rm", "-f", tmp, *earlier_tmps], check=False)
        raise


__all__ = ["PROGRESS_MIN_BYTES", "TransferStats", "push", "push_files", "remote_hashes", "request_size", "sha256_file"]
