"""Read untrusted result-set files within bounds (docs/SECURITY.md, "Result sets").

A result set may come from a broken or hostile board, or from someone else. So every file is opened
only if it is a regular file (never a FIFO or device: opening one can hang or have side effects),
JSON is read line by line with a length cap, and an array's size is checked -- declared shape and
dtype against the file's real size and against MAX_ARRAY_BYTES -- *before* anything is allocated.
Every refusal is an InputError naming the file and the entry.
"""

from __future__ import annotations

import json
import math
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rkdet.errors import InputError

MAX_ARRAY_BYTES = 256 << 20  # one output array (the default build's largest is 1.6 MB)
MAX_RECORD_BYTES = 1 << 30  # all outputs of one inference
MAX_OUTPUTS = 1024  # outputs per inference, members per .npz
MAX_NDIM = 32
MAX_NAME = 255  # characters of an input or output name
MAX_INPUTS = 100_000  # distinct inputs in one result set
MAX_LINE = 1 << 20  # bytes of one JSON Lines record
MAX_JSON = 16 << 20  # bytes of run.json
MAX_NPY_HEADER = 10_000  # numpy's own default limit

# The dtypes rkdet-run can record (dtype.name); anything else in an index or .npy header is refused.
DTYPES = frozenset(("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "float16", "float32", "float64"))


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path) -> BinaryIO:
    """Open `path` for reading only if it is a regular file (symlinks followed, then checked again on
    the open descriptor, which is opened O_NONBLOCK so a FIFO swapped in meanwhile cannot block).

    FileNotFoundError passes through for the caller's own message; anything else is an InputError.
    """
    try:
        before = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    if not stat.S_ISREG(before.st_mode):
        raise InputError(f"{path}: is {_kind(before.st_mode)}, not a regular file; a result set holds only regular files")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    after = os.fstat(fd)
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise InputError(f"{path}: changed while being opened (now {_kind(after.st_mode)}); not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_json_object(path: Path, limit: int = MAX_JSON) -> dict[str, Any]:
    """A JSON object from a regular file of at most `limit` bytes."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{path}: larger than {limit >> 20} MiB; not a run record")
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text; re-pull or re-run the result set") from None
    except (ValueError, RecursionError) as err:
        raise InputError(f"{path}: unreadable JSON ({err}); re-pull or re-run the result set") from None
    if not isinstance(obj, dict):
        raise InputError(f"{path}: expected a JSON object")
    return obj


def iter_jsonl(path: Path, limit: int = MAX_LINE) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a JSON Lines file; a final line without newline is a torn write, skipped.

    No line is read beyond `limit` bytes, so one endless line cannot fill memory.
    """
    with open_regular(path) as handle:
        lineno = 0
        while True:
            line = handle.readline(limit + 1)
            lineno += 1
            if not line:
                return
            if len(line) > limit:
                raise InputError(f"{path}:{lineno}: line longer than {limit >> 10} KiB; not a record rkdet-run writes")
            if not line.endswith(b"\n"):
                return
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{path}:{lineno}: not UTF-8 text; the file is corrupt, re-pull the result set") from None
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except ValueError as err:
                raise InputError(f"{path}:{lineno}: not valid JSON ({getattr(err, 'msg', err)})") from None
            except RecursionError:
                raise InputError(f"{path}:{lineno}: JSON nested too deeply; not a record rkdet-run writes") from None
            if not isinstance(record, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object")
            yield lineno, record


def array_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """Exact byte size in Python integers (numpy's int64 product overflows on hostile shapes)."""
    return math.prod(shape) * dtype.itemsize


_DTYPE_OBJECTS = {name: np.dtype(name) for name in DTYPES}


def check_dtype(name: object, where: str) -> np.dtype:
    dtype = _DTYPE_OBJECTS.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise InputError(f"{where}: dtype {str(name)[:40]!r} is not one rkdet records ({', '.join(sorted(DTYPES))})")
    return dtype


def check_shape(shape: object, where: str) -> tuple[int, ...]:
    if (not isinstance(shape, (list, tuple)) or len(shape) > MAX_NDIM
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise InputError(f"{where}: shape {str(shape)[:60]} is not a list of at most {MAX_NDIM} non-negative integers")
    return tuple(shape)


def _header(handle: BinaryIO, where: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The .npy header (shape, fortran_order, dtype), checked: known dtype, sane shape."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(handle, max_header_size=MAX_NPY_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(handle, max_header_size=MAX_NPY_HEADER)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, SyntaxError, TypeError, OverflowError, EOFError, zipfile.BadZipFile) as err:
        raise InputError(f"{where}: not a .npy array ({str(err)[:120]})") from None
    if dtype.name not in DTYPES or dtype.fields is not None:
        raise InputError(f"{where}: .npy dtype {dtype.str!r} is not one rkdet records")
    return check_shape(shape, where), bool(fortran), dtype


def _read_payload(handle: BinaryIO, shape: tuple[int, ...], fortran: bool, dtype: np.dtype,
                  nbytes: int, where: str) -> np.ndarray:
    flat = np.empty(nbytes // dtype.itemsize if dtype.itemsize else 0, dtype=dtype)
    view = memoryview(flat.view(np.uint8).reshape(-1)) if nbytes else memoryview(b"")
    got = 0
    while got < nbytes:
        n = handle.readinto(view[got:])
        if not n:
            raise InputError(f"{where}: truncated: {got} of {nbytes} data bytes")
        got += n
    if fortran:
        return flat.reshape(shape[::-1]).T
    return flat.reshape(shape)


def _bounded(shape: tuple[int, ...], dtype: np.dtype, where: str) -> int:
    nbytes = array_bytes(shape, dtype)
    if nbytes > MAX_ARRAY_BYTES:
        raise InputError(f"{where}: shape {list(shape)} {dtype.name} is {nbytes:,} bytes, over the "
                         f"{MAX_ARRAY_BYTES >> 20} MiB per-output cap")
    return nbytes


def load_npy(path: Path, expect: tuple[tuple[int, ...], str] | None = None) -> np.ndarray:
    """One .npy, its header checked against `expect` (shape, dtype name), the cap and the file size
    before its data is allocated. FileNotFoundError passes through."""
    where = str(path)
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        shape, fortran, dtype = _header(handle, where)
        if expect is not None and (shape != expect[0] or dtype != np.dtype(expect[1])):
            raise InputError(f"{where}: header says {dtype.name} shape {list(shape)} but the index says "
                             f"{expect[1]} shape {list(expect[0])}; the result set is inconsistent, re-pull it")
        nbytes = _bounded(shape, dtype, where)
        if handle.tell() + nbytes != size:
            raise InputError(f"{where}: header shape {list(shape)} {dtype.name} needs {nbytes:,} data bytes but the "
                             f"file holds {size - handle.tell():,}; the file is corrupt")
        return _read_payload(handle, shape, fortran, dtype, nbytes, where)


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of a .npz, each member's declared size checked (cap, count, its .npy header against
    the member's uncompressed size) before it is decompressed."""
    with open_regular(path) as raw:
        try:
            archive = zipfile.ZipFile(raw)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
            raise InputError(f"{path}: unreadable .npz ({err})") from None
        with archive:
            members = archive.infolist()
            if len(members) > MAX_OUTPUTS:
                raise InputError(f"{path}: {len(members)} members, over the cap of {MAX_OUTPUTS} outputs")
            total = sum(m.file_size for m in members)
            arrays: dict[str, np.ndarray] = {}
            for m in members:
                key = m.filename[:-4] if m.filename.endswith(".npy") else m.filename
                where = f"{path}: member {key[:MAX_NAME]!r}"
                if m.file_size > MAX_ARRAY_BYTES + MAX_NPY_HEADER or total > MAX_RECORD_BYTES:
                    raise InputError(f"{where}: declares {m.file_size:,} bytes uncompressed, over the "
                                     f"{MAX_ARRAY_BYTES >> 20} MiB per-output cap; not decompressed")
                if m.is_dir() or not m.filename.endswith(".npy") or len(key) > MAX_NAME:
                    raise InputError(f"{where}: not an array member (np.savez writes NAME.npy)")
                try:
                    with archive.open(m) as member:
                        shape, fortran, dtype = _header(member, where)
                        nbytes = _bounded(shape, dtype, where)
                        header_len = member.tell()
                        if header_len + nbytes != m.file_size:
                            raise InputError(f"{where}: header shape {list(shape)} {dtype.name} needs {nbytes:,} "
                                             f"bytes but the member holds {m.file_size - header_len:,}")
                        arrays[key] = _read_payload(member, shape, fortran, dtype, nbytes, where)
                        member.read(1)  # reach the end: zipfile checks the CRC there
                except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as err:
                    raise InputError(f"{where}: unreadable ({err})") from None
    return arrays


def load_array_file(path: Path) -> dict[str, np.ndarray]:
    """A single .npy ({"output": array}) or .npz ({key: array}), bounded as above."""
    if path.suffix.lower() == ".npz":
        return load_npz(path)
    try:
        return {"output": load_npy(path)}
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None


__all__ = ["MAX_ARRAY_BYTES", "MAX_INPUTS", "MAX_LINE", "MAX_NAME", "MAX_OUTPUTS", "MAX_RECORD_BYTES",
           "array_bytes", "check_dtype", "check_shape", "iter_jsonl", "load_array_file", "load_npy",
           "open_regular", "read_json_object"]
