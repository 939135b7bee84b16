"""The output hash and the file hash: THE definitions (docs/FORMATS.md); the host imports them from here.

Why on the board side: the board computes every output hash a result set holds, and the host must
compute the very same one (golden sets, `rkdet diff`), so both import this module.
"""

import hashlib
from typing import Any

from .numpy_or_none import np

def output_hash(array):
    # type: (Any) -> str
    """sha256(dtype.str | shape | C-contiguous bytes), lowercase hex.

    dtype and shape are part of the hash so equal bytes in another layout never compare equal.
    """
    arr = np.asarray(array)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)  # never for 0-d arrays: it would make them 1-d
    digest = hashlib.sha256()
    header = arr.dtype.str + "|" + ",".join(str(int(d)) for d in arr.shape) + "|"
    digest.update(header.encode("ascii"))
    if arr.size:
        digest.update(arr.reshape(-1).view(np.uint8))
    return digest.hexdigest()


def _hashed_bytes(array):
    # type: (Any) -> Any
    """The bytes output_hash covers (C order) as a flat array, in 8-byte words when the size allows
    (fewer elements to compare)."""
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return flat.view(np.uint64) if flat.size % 8 == 0 else flat


def same_bytes(a, b):
    # type: (Any, Any) -> bool
    """True when output_hash(a) == output_hash(b) for sure: same dtype (incl. byte order), shape and
    bytes. A compare, not a hash (~4x cheaper than sha256 here); bytes, not values (-0.0, NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.str != b.dtype.str or a.shape != b.shape:
        return False
    return bool(np.array_equal(_hashed_bytes(a), _hashed_bytes(b)))


def file_sha256(path):
    # type: (str) -> str
    """sha256 of a file's bytes, read in chunks so large models do not sit in memory twice."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
