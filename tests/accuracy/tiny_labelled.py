"""Tiny models whose right answers are known, their images and labels (made in tests, no downloads).

The classifier says which colour channel is brightest on average (GlobalAveragePool -> Gemm with the
identity), the segmenter which channel is brightest at each pixel (a 1x1 Conv with the identity): on
images of pure red, green and blue regions the FP32 model is right everywhere, so a label set that says the
same gives 100 %, and one whose labels are wrong on a known part gives a known lower value.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "decode"))
from decision_models import _save  # noqa: E402  (one writer of the tests' tiny ONNX models)

SIZE = 32
COLOURS = ((230, 20, 20), (20, 230, 20), (20, 20, 230))  # class 0 red, 1 green, 2 blue (RGB)




def colour_classifier(path: Path) -> Path:
    """logits = the mean of each channel: class = the brightest channel."""
    eye = numpy_helper.from_array(np.eye(3, dtype=np.float32) * 4, "fc")
    bias = numpy_helper.from_array(np.zeros(3, np.float32), "fcb")
    w = numpy_helper.from_array(np.eye(3, dtype=np.float32).reshape(3, 3, 1, 1), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "colour", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], [w, eye, bias])
    return _save(graph, path)


def colour_segmenter(path: Path) -> Path:
    """seg_logits = 4 * x per pixel (1x1 identity conv): label = the brightest channel at that pixel."""
    w = numpy_helper.from_array(np.eye(3, dtype=np.float32).reshape(3, 3, 1, 1) * 4, "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["seg_logits"])], "seg",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
                              [helper.make_tensor_value_info("seg_logits", TensorProto.FLOAT, [1, 3, SIZE, SIZE])], [w])
    return _save(graph, path)


def solid_images(folder: Path, per_class: int, *, seed: int) -> dict[str, int]:
    """`per_class` images of each colour (a little noise); name -> class."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    truth = {}
    for cls, colour in enumerate(COLOURS):
        for i in range(per_class):
            img = np.clip(np.array(colour)[None, None, :] + rng.integers(-15, 16, (SIZE, SIZE, 3)), 0, 255).astype(np.uint8)
            name = f"c{cls}-{seed}-{i}"
            cv2.imwrite(str(folder / f"{name}.png"), img[:, :, ::-1])
            truth[name] = cls
    return truth


def region_images(images: Path, maps: Path, count: int, *, seed: int) -> dict[str, np.ndarray]:
    """Images of three colour regions (random rectangles) and their exact label maps; name -> map."""
    import cv2

    images.mkdir(parents=True, exist_ok=True)
    maps.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(count):
        label = np.zeros((SIZE, SIZE), np.uint8)
        y, x = rng.integers(4, 20, 2)
        label[y:y + 10, :] = 1
        label[:, x:x + 8] = 2
        img = np.array(COLOURS, np.uint8)[label]
        name = f"r-{seed}-{i}"
        cv2.imwrite(str(images / f"{name}.png"), img[:, :, ::-1])
        cv2.imwrite(str(maps / f"{name}.png"), label)
        out[name] = label
    return out
