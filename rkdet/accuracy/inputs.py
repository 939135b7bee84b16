"""What `rkdet accuracy` needs from a build folder, and the labelled images fed as that build is fed.

The images go through rkdet's one input transform (rkdet.convert.images: decode, resize as the build's
`preprocess` section says, uint8 NHWC), so the FP32 model, the INT8 emulation and a board see the same
tensor; what each output decides comes from the task registry (rkdet.decode), from the build's output
names and shapes, as convert's gate and `rkdet diff` decide it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from rkdet.accuracy.labels import Sample
from rkdet.config import PreprocessSection
from rkdet.convert.images import Letterbox, decode_rgb, min_side_for, preprocess
from rkdet.decode import Layout, detect_layout
from rkdet.decode.tasks import DecisionTask, task_of
from rkdet.errors import InputError
from rkdet.records.build import BuildRecord
from rkdet.records.io import read_capped, save_array_atomic
from rkdet.records.manifest import INT8_EMULATION_FILE

MAX_MODEL_BYTES = 2 << 30  # an ONNX file read from a build folder


@dataclass(frozen=True)
class BuildModel:
    """A build's FP32 model, its INT8 emulation (when it has one), how it is fed, and what it decides."""

    folder: Path
    fingerprint: str
    onnx_bytes: bytes
    emulation_bytes: bytes | None
    input_name: str
    input_hw: tuple[int, int]
    output_names: tuple[str, ...]
    preprocess: PreprocessSection
    layout: Layout
    task: DecisionTask
    quantized: str  # "INT8" (w8a8), "float16" (no quantization) or the toolkit's dtype name


def _checked_bytes(path: Path, sha256: str | None, what: str) -> bytes:
    data = read_capped(path, MAX_MODEL_BYTES)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise InputError(f"{path}: {what} does not match the sha256 its manifest records; the build folder was "
                         "changed: re-run rkdet convert")
    return data


def load_model(build: BuildRecord) -> BuildModel:
    """The build's models and settings; an imported build (no ONNX) or a layout with no metric is one line."""
    m = build.manifest
    if m.imported or m.onnx_sha256 is None:
        raise InputError(f"{build.folder}: an imported .rknn has no FP32 model to measure against; convert the ONNX "
                         "with rkdet convert")
    io = build.model_io()
    if len(io.inputs) != 1 or len(io.inputs[0].shape) != 4:
        raise InputError(f"{build.folder / 'model.io.json'}: rkdet accuracy takes a one-image-input model")
    _, h, w, _ = io.inputs[0].shape
    try:
        pp = PreprocessSection.model_validate(dict(build.resolved_config().section("preprocess")))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"{build.folder / 'config.resolved.json'}: preprocess.{'.'.join(map(str, first['loc']))}: "
                         f"{first['msg']}; re-run rkdet convert") from None
    except FileNotFoundError:
        raise InputError(f"{build.folder / 'config.resolved.json'}: missing; re-run rkdet convert") from None
    onnx_bytes = _checked_bytes(build.folder / "model.onnx", m.onnx_sha256, "model.onnx")
    emu_path = build.folder / INT8_EMULATION_FILE
    emulation = (_checked_bytes(emu_path, m.int8_emulation_sha256, INT8_EMULATION_FILE)
                 if m.int8_emulation_sha256 is not None and emu_path.is_file() else None)
    layout = detect_layout(list(zip(io.outputs, m.output_shapes)), input_size=(h, w))
    task = task_of(layout)
    if task is None:
        raise InputError(f"{build.folder}: {layout.detail}; rkdet accuracy measures detection, classification "
                         "and semantic segmentation models")
    quantize = build.resolved_config().section("quantize")
    quantized = ("float16" if not quantize.get("enabled", True)
                 else "INT8" if quantize.get("dtype", "w8a8") == "w8a8" else str(quantize.get("dtype")))
    return BuildModel(build.folder, m.fingerprint, onnx_bytes, emulation, io.inputs[0].name or "images", (h, w),
                      tuple(io.outputs), pp, layout, task, quantized)


@dataclass(frozen=True)
class FedImage:
    """A labelled image as the board is fed: the uint8 NHWC tensor, where the image landed, its size (H, W)."""

    tensor: np.ndarray
    letterbox: Letterbox


def feed(model: BuildModel, samples: tuple[Sample, ...]) -> dict[str, FedImage]:
    """Every labelled image through the one input transform (rkdet.convert.images.preprocess)."""
    fed = {}
    for s in samples:
        tensor, box = preprocess(decode_rgb(s.image, min_side_for(model.input_hw)), model.input_hw, model.preprocess)
        fed[s.name] = FedImage(tensor, box)
    return fed


def fed_label_map(model: BuildModel, label_map: np.ndarray, ignore: int) -> np.ndarray:
    """A label map moved to the model input as its image was (same resize geometry, nearest neighbour, the
    padding `ignore`): the one transform again, on the map stacked as three channels."""
    pp = model.preprocess.model_copy(update={"interpolation": "nearest", "pad_value": ignore, "channel_order": "rgb"})
    tensor, _ = preprocess(np.repeat(label_map[:, :, None], 3, axis=2), model.input_hw, pp)
    return tensor[0, :, :, 0]


def save_fed(fed: dict[str, FedImage], folder: Path) -> None:
    """The fed tensors as `<image name>.npy` (uint8 NHWC), the inputs folder rkdet-run takes (`--inputs`; it
    names each result by the file stem), so a board's run on them is scored with `--results`. The folder
    must be new or empty: rkdet never mixes its files into another set."""
    if folder.exists() and (not folder.is_dir() or folder.is_symlink() or any(folder.iterdir())):
        raise InputError(f"--save-inputs {folder}: exists and is not an empty folder; name a new folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, f in sorted(fed.items()):
            save_array_atomic(str(folder / f"{name}.npy"), f.tensor)
    except OSError as exc:
        raise InputError(f"--save-inputs {folder}: cannot write ({exc.strerror}); name another folder") from None
