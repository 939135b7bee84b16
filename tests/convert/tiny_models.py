"""Tiny real ONNX models and image folders made in tests (no downloads, seconds to build)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_model(path: Path, *, seed: int = 0, size: int = 32, dynamic: bool = False, opset: int = 12) -> Path:
    """Conv(3->8)+Relu+Conv(8->4)+Sigmoid on 1x3xSxS: fully convolutional, quantizes cleanly."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32), "w2")
    dims = ["batch", 3, "h", "w"] if dynamic else [1, 3, size, size]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2"], ["c2"]),
         helper.make_node("Sigmoid", ["c2"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 4, dims[2], dims[3]])], [w1, b1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def image_folder(folder: Path, count: int, *, seed: int, size: tuple[int, int] = (48, 40)) -> Path:
    """`count` RGB PNGs with blocks of colour (deterministic)."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        img = np.full((*size, 3), 230, np.uint8)
        for _ in range(6):
            y, x = rng.integers(0, size[0] - 8), rng.integers(0, size[1] - 8)
            img[y:y + rng.integers(3, 8), x:x + rng.integers(3, 8)] = rng.integers(0, 255, 3)
        cv2.imwrite(str(folder / f"img-{seed}-{i:02d}.png"), img)
    return folder


def write_config(path: Path, onnx_path: Path, cal: Path, gold: Path, **sections) -> Path:
    """A config for a tiny model; keyword args replace whole sections (dicts)."""
    import yaml

    doc = {
        "name": "tiny",
        "model": {"onnx": str(onnx_path)},
        "target": {"platforms": ["rk3588"]},
        "quantize": {"dataset": str(cal)},
        "golden": {"inputs": str(gold)},
        "fidelity": {"min_cosine": 0.9, "min_slice_cosine": 0.9},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    path.write_text(yaml.safe_dump(doc))
    return path
