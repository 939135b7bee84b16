"""Where a label map changed, as a small image: the reference labels in grey, changed pixels in red.

Why here: the semantic task's diff delta carries this overlay (JSON-ready, bounded) and its HTML cell
shows it, so the report says *where* pixels changed, not only how many. The image is a PNG written with
the stdlib (zlib, struct): decode stays numpy-only, and the HTML presenter only embeds it.

Bounds (the label maps come from result sets, which may be crafted): a map is shrunk by an integer block
factor until its longer side is at most `MAX_SIDE`; a block is red when any of its pixels changed, else
the grey of its top-left reference label (a label's grey is its value modulo `GREYS`, so any int works).
A PNG is then at most MAX_SIDE² RGB pixels before compression. The reader (`data_uri`) accepts only
base64 text of at most `MAX_PNG_BASE64` characters that opens with PNG's signature, so a crafted delta
can put no markup and no other file type into the report.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
import zlib
from typing import Any

import numpy as np

MAX_SIDE = 128  # the overlay's longer side in pixels, at most
GREYS = 8  # distinct greys for reference labels (label % GREYS)
CHANGED_RGB = (220, 20, 20)
MAX_PNG_BASE64 = 4 * math.ceil((MAX_SIDE * (3 * MAX_SIDE + 1) + 1024) / 3)  # an uncompressible PNG, base64
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")


def block_factor(height: int, width: int) -> int:
    """The smallest integer factor that brings the longer side to at most MAX_SIDE."""
    return max(1, math.ceil(max(height, width) / MAX_SIDE))


def _blocks(x: np.ndarray, k: int, fill: Any) -> np.ndarray:
    """(H, W) padded to multiples of k, as (H/k, k, W/k, k)."""
    h, w = x.shape
    ph, pw = -h % k, -w % k
    padded = np.pad(x, ((0, ph), (0, pw)), constant_values=fill) if ph or pw else x
    return padded.reshape(padded.shape[0] // k, k, padded.shape[1] // k, k)


def overlay_rgb(reference: np.ndarray, changed: np.ndarray) -> tuple[np.ndarray, int]:
    """The overlay as (h, w, 3) uint8 and its block factor: reference labels grey, changed blocks red."""
    if reference.ndim != 2 or reference.shape != changed.shape:
        raise ValueError(f"label map {reference.shape} and change mask {changed.shape}: expected one (H, W) shape")
    k = block_factor(*reference.shape)
    labels = _blocks(np.asarray(reference), k, 0)[:, 0, :, 0]  # the top-left label of each block
    hit = _blocks(np.asarray(changed, dtype=bool), k, False).any(axis=(1, 3))
    grey = (96 + (np.mod(labels.astype(np.int64), GREYS) * (144 // (GREYS - 1)))).astype(np.uint8)
    rgb = np.repeat(grey[..., None], 3, axis=2)
    rgb[hit] = CHANGED_RGB
    return rgb, k


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of (h, w, 3) uint8 (filter 0 on every row)."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[row].tobytes() for row in range(h))
    return (_PNG_SIGNATURE + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b""))


def encode(reference: np.ndarray, changed: np.ndarray) -> dict[str, Any]:
    """The delta's overlay entry: the PNG (base64), its size and the block factor it was shrunk by."""
    rgb, k = overlay_rgb(reference, changed)
    return {"png": base64.b64encode(png_bytes(rgb)).decode("ascii"), "width": int(rgb.shape[1]),
            "height": int(rgb.shape[0]), "block": k}


def data_uri(entry: Any) -> str | None:
    """A `data:image/png;base64,` URI of an overlay entry, or None when it is not a bounded PNG."""
    if not isinstance(entry, dict):
        return None
    text = entry.get("png")
    if not isinstance(text, str) or not 0 < len(text) <= MAX_PNG_BASE64 or not _BASE64.match(text):
        return None
    try:
        head = base64.b64decode(text[:16], validate=True)
    except (binascii.Error, ValueError):
        return None
    return f"data:image/png;base64,{text}" if head.startswith(_PNG_SIGNATURE) else None
