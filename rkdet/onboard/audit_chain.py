"""The serving audit log: one JSON line per event, each carrying the previous line's hash (docs/AUDIT.md).

Why a chain: a record deleted, edited or reordered, or a file removed from the middle, breaks the
link from one line to the next, so the host (`rkdet audit verify`) can tell. Why one `os.write` of a
whole line on an O_APPEND descriptor: a kill -9 leaves every written line whole (at worst a torn last
line after a power cut, which the next start declares in its first record). Files rotate at a size
bound, the chain continuing across them; the oldest files beyond `max_files` are removed (retention
is declared, never silent: the next file's `open` record names what went before). A full disk never
fails the inference: the record is dropped, counted, and the next record that can be written says
how many were lost.
"""

import errno
import hashlib
import json
import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

GENESIS = "0" * 64  # `prev` of the very first record of a chain
SCHEMA = "rkdet.audit/1"
FILE_RE = re.compile(r"^audit-([0-9]{8})\.jsonl$")
MAX_LINE = 64 * 1024  # one record; the verifier refuses longer lines
DEFAULT_MAX_FILE_BYTES = 8 << 20
DEFAULT_MAX_FILES = 64


def file_name(index):
    # type: (int) -> str
    return "audit-%08d.jsonl" % index


def line_hash(line):
    # type: (bytes) -> str
    """THE record hash: sha256 of the line's bytes without its newline (host and board)."""
    return hashlib.sha256(line).hexdigest()


def encode_record(record):
    # type: (Dict[str, Any]) -> bytes
    """One canonical line (sorted keys, no spaces, ASCII): the bytes the next record's `prev` hashes."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def audit_files(folder):
    # type: (str) -> List[Tuple[int, str]]
    """The folder's audit files as (index, name), oldest first; other names are ignored."""
    found = []
    for name in os.listdir(folder):
        m = FILE_RE.match(name)
        if m:
            found.append((int(m.group(1)), name))
    return sorted(found)


def _last_line(path):
    # type: (str) -> Tuple[Optional[bytes], int]
    """The last whole line of `path` and the count of torn bytes after it (a power cut mid-write)."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        handle.seek(max(0, size - 2 * MAX_LINE))
        tail = handle.read()
    torn = 0
    if tail and not tail.endswith(b"\n"):
        cut = tail.rfind(b"\n")
        torn = len(tail) - (cut + 1)
        tail = tail[:cut + 1]
    lines = tail.rstrip(b"\n").split(b"\n") if tail.strip() else []
    return (lines[-1] if lines else None), torn


class AuditChain(object):
    """Appends records to `folder`/audit-NNNNNNNN.jsonl, continuing the chain a previous process left."""

    def __init__(self, folder, max_file_bytes=DEFAULT_MAX_FILE_BYTES, max_files=DEFAULT_MAX_FILES,
                 fsync_every=0, clock=time.time):
        # type: (str, int, int, int, Any) -> None
        self.folder = folder
        self.max_file_bytes = max(4 * MAX_LINE, int(max_file_bytes))
        self.max_files = max(2, int(max_files))
        self.fsync_every = int(fsync_every)
        self.clock = clock
        self.prev = GENESIS
        self.seq = 0
        self.lost = 0  # records not written since the last one that was (a full disk)
        self.write_failures = 0
        self.chain_breaks = 0  # torn tails or unreadable last records found at start
        self._fd = -1
        self._index = 0
        self._size = 0
        self._unsynced = 0
        if not os.path.isdir(folder):
            os.makedirs(folder)
        self._resume()

    def _resume(self):
        # type: () -> None
        files = audit_files(self.folder)
        note = {}  # type: Dict[str, Any]
        if files:
            index, name = files[-1]
            line, torn = _last_line(os.path.join(self.folder, name))
            if torn:
                note["torn_tail"] = {"file": name, "bytes": torn}
                self.chain_breaks += 1
            if line is not None:
                try:
                    last = json.loads(line.decode("ascii"))
                    self.prev, self.seq = line_hash(line), int(last["seq"]) + 1
                except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                    note["unreadable_last_record"] = name
                    self.chain_breaks += 1
            self._index = index + 1  # a restart always opens a new file: its first record says why
        self._open(dict(note, reason="start"))

    def _open(self, why):
        # type: (Dict[str, Any]) -> None
        path = os.path.join(self.folder, file_name(self._index))
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(path, flags, 0o644)
        self._size = 0
        self._prune()
        self.append("open", dict(why, file=file_name(self._index), schema=SCHEMA))

    def _prune(self):
        # type: () -> None
        files = audit_files(self.folder)
        for _, name in files[:max(0, len(files) - self.max_files)]:
            try:
                os.unlink(os.path.join(self.folder, name))
            except OSError:
                pass

    def append(self, kind, fields):
        # type: (str, Dict[str, Any]) -> bool
        """Write one record; False (counted, never raised) when the disk refuses it."""
        record = dict(fields)
        record.update(kind=kind, seq=self.seq, prev=self.prev, t=round(self.clock(), 6))
        if self.lost:
            record["lost_before"] = self.lost
        line = encode_record(record)
        if len(line) > MAX_LINE:
            record = {"kind": "note", "seq": self.seq, "prev": self.prev, "t": record["t"],
                      "note": "record too long (%d bytes) for kind %s" % (len(line), kind)}
            line = encode_record(record)
        try:
            written = os.write(self._fd, line + b"\n")
            if written != len(line) + 1:
                raise OSError(errno.ENOSPC, "short write")
        except OSError:
            self.write_failures += 1
            self.lost += 1
            return False
        self.prev, self.seq, self.lost = line_hash(line), self.seq + 1, 0
        self._size += written
        self._unsynced += 1
        if self.fsync_every and self._unsynced >= self.fsync_every:
            self.sync()
        if self._size >= self.max_file_bytes and kind != "open":
            self.rotate()
        return True

    def rotate(self):
        # type: () -> None
        self.sync()
        os.close(self._fd)
        self._index += 1
        try:
            self._open({"reason": "rotate"})
        except OSError:
            self.write_failures += 1
            self._index -= 1
            path = os.path.join(self.folder, file_name(self._index))
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))

    def sync(self):
        # type: () -> None
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError:
                pass
            self._unsynced = 0

    def close(self):
        # type: () -> None
        if self._fd >= 0:
            self.sync()
            os.close(self._fd)
            self._fd = -1
