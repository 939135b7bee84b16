"""Image sets: fixed sorted order, per-file sha256, and preprocessing exactly as the board is fed.

Why rkdet decodes and preprocesses itself instead of letting the toolkit read image files: the
tensors used for calibration and the golden inputs must be byte-for-byte what the board receives
(uint8 NHWC after letterbox), so they are materialized once, hashed and shipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rkdet.config import PreprocessSection
from rkdet.errors import InputError
from rkdet.onboard.hashing import file_sha256

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
MIN_SIDE = 32
MAX_SIDE = 8192
MAX_ASPECT = 8.0


@dataclass(frozen=True)
class ImageFile:
    """One source image: its path, name (file stem) and sha256 of the file bytes."""

    path: Path
    sha256: str

    @property
    def name(self) -> str:
        return self.path.stem


@dataclass(frozen=True)
class Letterbox:
    """Where the source image landed in the model input (to map boxes back to the page)."""

    scale_x: float
    scale_y: float
    pad_left: int
    pad_top: int
    source_size: tuple[int, int]  # (H, W)


def list_images(folder: Path, key: str, limit: int | None = None) -> list[ImageFile]:
    """Images in `folder`, sorted by file name (bytewise), hashed; errors name the config key."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: {key} folder not found; point {key} at a folder of .png/.jpg images")
    files = sorted((p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()),
                   key=lambda p: p.name.encode())
    if not files:
        raise InputError(f"{folder}: {key} folder has no images ({', '.join(IMAGE_SUFFIXES)}); add some")
    names = [p.stem for p in files]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"{folder}: {key} has images sharing a name stem: {', '.join(dupes)}; rename them")
    if limit is not None:
        files = files[:limit]
    return [ImageFile(p, file_sha256(str(p))) for p in files]


def non_images(folder: Path) -> list[str]:
    """Entries of an image folder that are not read (other suffixes, subfolders), for one warning line."""
    return sorted((p.name + ("/" if p.is_dir() else "") for p in Path(folder).iterdir()
                   if not (p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())), key=str.encode)


def _jpeg_truncated(data: np.ndarray) -> bool:
    """A JPEG whose end-of-image marker is missing after its last scan: libjpeg decodes it anyway, with
    the missing rows flat grey (a file cut at 5000 bytes "decodes" fine), so check the markers."""
    raw = data.tobytes()
    if not raw.startswith(b"\xff\xd8"):
        return False
    return raw.rfind(b"\xff\xd9") < raw.rfind(b"\xff\xda")


def min_side_for(size_hw: tuple[int, int]) -> int:
    """The smallest image side taken for a model input of `size_hw`: MIN_SIDE, or the input's own smaller
    side when the model is smaller (a 24x24 net takes 24x24 crops, as its app feeds it)."""
    return max(1, min(MIN_SIDE, *size_hw))


def decode_rgb(path: Path, min_side: int = MIN_SIDE) -> np.ndarray:
    """Decode an 8-bit 3-channel image as RGB HWC uint8; reject grayscale, odd sizes, unreadable files.
    `min_side`: the smallest side taken (`min_side_for` the model input)."""
    import cv2  # heavy import kept local: `rkdet --help` must stay fast

    data = np.frombuffer(_read_image_file(path), dtype=np.uint8)
    declared = _declared_size(data.tobytes()[:1 << 16]) if data.size else None
    if declared is not None and max(declared) > MAX_SIDE:  # before decoding: 40000x40000 would cost GBs
        raise InputError(f"{path}: image size {declared[0]}x{declared[1]} is outside {MIN_SIDE}..{MAX_SIDE} px per "
                         f"side; crop or resize it")
    try:
        image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    except cv2.error as exc:  # OpenCV's own size limit, a corrupt stream
        raise InputError(f"{path}: cannot decode image ({str(exc).strip().splitlines()[-1][:120]}); replace it with "
                         "a valid PNG or JPEG") from None
    if image is None:
        raise InputError(f"{path}: cannot decode image; replace it with a valid PNG or JPEG")
    if _jpeg_truncated(data):
        raise InputError(f"{path}: JPEG is truncated (no end-of-image marker after its last scan: the missing rows "
                         "would decode flat); replace it with the complete file")
    if image.dtype != np.uint8:
        raise InputError(f"{path}: image is {image.dtype}, expected 8-bit; convert it to 8-bit RGB")
    if image.ndim == 2 or image.shape[2] == 1:
        raise InputError(f"{path}: image is grayscale; the model takes 3-channel RGB: convert it "
                         "(e.g. `convert in.png -type TrueColor out.png`)")
    if image.shape[2] == 4:
        raise InputError(f"{path}: image has an alpha channel; flatten it to 3-channel RGB")
    h, w = image.shape[:2]
    if min(h, w) < min_side or max(h, w) > MAX_SIDE or max(h, w) / min(h, w) > MAX_ASPECT:
        small = min(h, w) < min_side
        raise InputError(f"{path}: image size {w}x{h} is outside {min_side}..{MAX_SIDE} px per side "
                         f"with aspect <= {MAX_ASPECT:g}; "
                         + (f"use an image at least {min_side} px on each side (the smallest the model input takes)"
                            if small else "crop it, or resize it keeping what the model should see"))
    return np.ascontiguousarray(image[:, :, ::-1])  # BGR -> RGB


MAX_IMAGE_BYTES = MAX_SIDE * MAX_SIDE * 4 + (1 << 20)  # more than any image within MAX_SIDE needs, even raw BMP


def _read_image_file(path: Path) -> bytes:
    """The file's bytes if it is a regular file (never a FIFO waited on) of at most MAX_IMAGE_BYTES."""
    from rkdet.records.io import read_capped

    return read_capped(Path(path), MAX_IMAGE_BYTES)


def _declared_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) a PNG, JPEG or BMP header declares, read before decoding; None when not found."""
    if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) >= 24 and head[12:16] == b"IHDR":
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if head.startswith(b"BM") and len(head) >= 26:
        return abs(int.from_bytes(head[18:22], "little", signed=True)), abs(int.from_bytes(head[22:26], "little", signed=True))
    if head.startswith(b"\xff\xd8"):
        i = 2
        while i + 9 <= len(head) and head[i] == 0xFF:
            marker, length = head[i + 1], int.from_bytes(head[i + 2:i + 4], "big")
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                return int.from_bytes(head[i + 7:i + 9], "big"), int.from_bytes(head[i + 5:i + 7], "big")
            i += 2 + length
    return None


def short_side_crop(h: int, w: int, size_hw: tuple[int, int], short_side: int | None) -> tuple[int, int, int, int]:
    """torchvision's Resize(S) + CenterCrop(H, W) geometry: the resized (nh, nw) (short side S, long side
    int(S * long / short)) and the crop's (top, left) (rounded half of the excess). S defaults to the
    input's larger side; a smaller S would need padding, which the eval transform never means: refused."""
    th, tw = size_hw
    s = short_side if short_side is not None else max(th, tw)
    if s < max(th, tw):
        raise InputError(f"preprocess.short_side {s} is smaller than the model input {tw}x{th}: the centre crop "
                         f"would need padding; set it to at least {max(th, tw)} (torchvision: Resize(S) >= crop)")
    nh, nw = (s, int(s * w / h)) if h <= w else (int(s * h / w), s)
    return nh, nw, int(round((nh - th) / 2.0)), int(round((nw - tw) / 2.0))


def fit_top_left(h: int, w: int, size_hw: tuple[int, int]) -> tuple[int, int]:
    """pad-right-bottom's resized (nh, nw): the image fits the input keeping its aspect, the limiting side
    filled, the other side rounded up (capped at the input) as PaddleOCR's text-line resize computes it,
    `ceil(H * (w / h))` for a line that fits the height (its cls/rec `resize_norm_img`, float expression and
    all, so the same pixel count lands on the board); a line wider than the input's aspect, which that
    resize squeezes to the input width, keeps its aspect here and is padded at the bottom."""
    th, tw = size_hw
    if th / h <= tw / w:  # the height limits
        return th, min(tw, math.ceil(th * (w / float(h))))
    return min(th, math.ceil(tw * (h / float(w)))), tw


def preprocess(image_rgb: np.ndarray, size_hw: tuple[int, int], pp: PreprocessSection) -> tuple[np.ndarray, Letterbox]:
    """Resize (letterbox, pad-right-bottom, stretch, or short side + centre crop) to the model input and order channels:
    uint8 NHWC [1,H,W,3]. mean/std are not applied here: they run on the NPU (and in the FP32 reference,
    rkdet.onboard.reference.fp32_input) on this tensor, so per channel in the model's channel order."""
    import cv2

    interp = {"linear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST, "area": cv2.INTER_AREA}[pp.interpolation]
    th, tw = size_hw
    h, w = image_rgb.shape[:2]
    if pp.resize == "center-crop":
        nh, nw, top, left = short_side_crop(h, w, size_hw, pp.short_side)
        resized = cv2.resize(image_rgb, (nw, nh), interpolation=interp)
        out = resized[top:top + th, left:left + tw]
        box = Letterbox(nw / w, nh / h, -left, -top, (h, w))  # negative offsets: the crop starts inside
    elif pp.resize == "stretch":
        out = cv2.resize(image_rgb, (tw, th), interpolation=interp)
        box = Letterbox(tw / w, th / h, 0, 0, (h, w))
    elif pp.resize == "pad-right-bottom":
        nh, nw = fit_top_left(h, w, size_hw)
        out = np.full((th, tw, 3), pp.pad_value, dtype=np.uint8)
        out[:nh, :nw] = cv2.resize(image_rgb, (nw, nh), interpolation=interp)
        box = Letterbox(nw / w, nh / h, 0, 0, (h, w))
    else:
        scale = min(th / h, tw / w)
        nh, nw = int(round(h * scale)), int(round(w * scale))
        resized = cv2.resize(image_rgb, (nw, nh), interpolation=interp)
        top, left = (th - nh) // 2, (tw - nw) // 2
        out = np.full((th, tw, 3), pp.pad_value, dtype=np.uint8)
        out[top:top + nh, left:left + nw] = resized
        box = Letterbox(nw / w, nh / h, left, top, (h, w))
    if pp.channel_order == "bgr":
        out = out[:, :, ::-1]
    return np.ascontiguousarray(out[None]), box


@dataclass(frozen=True)
class Materialized:
    """An image set decoded and preprocessed exactly as the board is fed."""

    files: list[ImageFile]
    tensors: dict[str, np.ndarray]  # name -> uint8 NHWC [1,H,W,3]
    letterboxes: dict[str, Letterbox]
