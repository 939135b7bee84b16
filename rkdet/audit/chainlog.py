"""A pulled audit log read without trusting it: bounded, one line naming the file, nothing outside its folder.

The board wrote it (rkdet.onboard.audit_chain), so the folder may be crafted: only names of the form
audit-NNNNNNNN.jsonl are read, each must be a regular file (never a symlink, FIFO or device), the count
of files, each file's size and each line's length are capped, and every line keeps its exact bytes, the
bytes the next record's `prev` hashes.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.errors import InputError
from rkdet.onboard.audit_chain import FILE_RE, MAX_LINE, line_hash
from rkdet.records.io import loads, open_regular
from rkdet.textsafe import visible

MAX_FILES = 10_000
MAX_FILE_BYTES = 256 << 20
MAX_RECORDS = 5_000_000


@dataclass(frozen=True)
class Line:
    """One record as the board wrote it: where, its exact bytes' hash, and its parsed fields (or None)."""

    file: str
    lineno: int
    hash: str
    record: dict[str, Any] | None  # None: not a JSON object (an edit, or garbage)


@dataclass(frozen=True)
class AuditFile:
    index: int
    name: str
    lines: tuple[Line, ...]
    torn_bytes: int  # bytes after the last newline (a write cut short by a power loss)


def _files(folder: Path) -> list[tuple[int, str]]:
    try:
        names = os.listdir(folder)
    except OSError as err:
        raise InputError(f"{folder}: cannot list the audit folder ({err.strerror}); name a folder rkdet audit pull wrote")
    found = []
    for name in names:
        m = FILE_RE.match(name)
        if m:
            found.append((int(m.group(1)), name))
    if not found:
        raise InputError(f"{folder}: no audit-NNNNNNNN.jsonl files; name a folder rkdet audit pull wrote")
    if len(found) > MAX_FILES:
        raise InputError(f"{folder}: {len(found)} audit files, more than {MAX_FILES}; not a log rkdet writes")
    return sorted(found)


def _read_file(folder: Path, index: int, name: str, budget: list[int]) -> AuditFile:
    path = folder / name
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        raise InputError(f"{path}: not a regular file (a symlink, FIFO or device); refused")
    lines = []
    torn = 0
    with open_regular(path) as handle:
        if os.fstat(handle.fileno()).st_size > MAX_FILE_BYTES:
            raise InputError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB; not a file rkdet audit writes")
        lineno = 0
        while True:
            raw = handle.readline(MAX_LINE + 2)
            if not raw:
                break
            lineno += 1
            if not raw.endswith(b"\n"):
                if len(raw) > MAX_LINE:
                    raise InputError(f"{path}:{lineno}: line longer than {MAX_LINE} bytes; not a record rkdet writes")
                torn = len(raw)
                break
            body = raw[:-1]
            budget[0] -= 1
            if budget[0] < 0:
                raise InputError(f"{folder}: more than {MAX_RECORDS} records; verify it in parts")
            lines.append(Line(name, lineno, line_hash(body), _parse(body, f"{path}:{lineno}")))
    return AuditFile(index, name, tuple(lines), torn)


def _parse(body: bytes, where: str) -> dict[str, Any] | None:
    try:
        record = loads(body, where)
    except InputError:
        return None
    return record if isinstance(record, dict) else None


def read_log(folder: Path) -> list[AuditFile]:
    """Every audit file of `folder`, oldest first (InputError, exit 2, for a folder that is not a log)."""
    if not folder.is_dir() or folder.is_symlink():
        raise InputError(f"{visible(str(folder))}: not a folder; name the folder rkdet audit pull wrote")
    budget = [MAX_RECORDS]
    return [_read_file(folder, index, name, budget) for index, name in _files(folder)]
