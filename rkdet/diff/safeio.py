"""Read untrusted result-set files within bounds (docs/SECURITY.md, "Result sets").

A result set may come from a broken or hostile board, or from someone else. So every file is opened
only if it is a regular file (never a FIFO or device: opening one can hang or have side effects),
JSON is read through the one bounded reader (`rkdet.records.io`), and an array's size is checked -- declared shape and
dtype against the file's real size and against MAX_ARRAY_BYTES -- *before* anything is allocated.
Every refusal is an InputError naming the file and the entry.
"""

from __future__ import annotations

import math
import os
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from rkdet.errors import InputError
from rkdet.records.io import open_regular

MAX_ARRAY_BYTES = 256 << 20  # one output array (the default build's largest is 1.6 MB)
MAX_RECORD_BYTES = 1 << 30  # all outputs of one inference
MAX_OUTPUTS = 1024  # outputs per inference, members per .npz
MAX_NDIM = 32
MAX_NAME = 255  # characters of an input or output name
MAX_INPUTS = 100_000  # distinct inputs in one result set
MAX_NPY_HEADER = 10_000  # numpy's own default limit

# The dtypes rkdet-run can record (dtype.name); anything else in an index or .npy header is refused.
DTYPES = frozenset(("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "float16", "float32", "float64"))


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


__all__ = ["MAX_ARRAY_BYTES", "MAX_INPUTS", "MAX_NAME", "MAX_OUTPUTS", "MAX_RECORD_BYTES",
           "array_bytes", "check_dtype", "check_shape", "load_array_file", "load_npy"]
