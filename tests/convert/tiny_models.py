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


def flat_image_folder(folder: Path, count: int, *, seed: int, low: int, high: int,
                      size: tuple[int, int] = (40, 40)) -> Path:
    """`count` RGB PNGs of uniform noise in [low, high] (dark or bright sets, to move a model's output range)."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        cv2.imwrite(str(folder / f"flat-{seed}-{i:02d}.png"), rng.integers(low, high + 1, (*size, 3), dtype=np.uint8))
    return folder


def score_model(path: Path, *, size: int = 32) -> Path:
    """y = Sigmoid(1.5 * mean over channels of x): 0.5 for a black image, 0.82 for a white one (a "score"
    whose range a dark calibration set cannot cover)."""
    w = np.full((1, 3, 1, 1), 0.5, np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["score"])],
        "score", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, [1, 1, size, size])], [_const("w", w)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


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


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def yolov8_model(path: Path, *, nc: int = 2, size: int = 640, dynamic: bool = False, metadata: bool = True,
                 seed: int = 0, opset: int = 12, cls_bias: float = 0.0) -> Path:
    """A tiny model with the stock Ultralytics YOLOv8 head, node names and tail (8.x export, one output
    [1, 4+nc, N]): a 3-conv backbone with strides 8/16/32, the six head convs cv2.i.2 / cv3.i.2, DFL
    (Reshape, Transpose, Softmax, Transpose, 16->1 Conv), dist2bbox and the final Concat. At 640 the tail is
    8400 anchors wide, wider than the NPU's 13-bit register fields (the REGTASK overflow).
    `dynamic`: batch/height/width axes named and every Reshape fed by a Shape->Gather->Concat chain, as
    Ultralytics writes with `dynamic=True`."""
    rng = np.random.default_rng(seed)
    feats = [(size // s, size // s) for s in (8, 16, 32)]
    n = sum(h * w for h, w in feats)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, shape: tuple[int, ...], scale: float = 0.3) -> str:
        inits.append(_const(name, rng.normal(0, scale, shape).astype(np.float32)))
        return name

    prev, ch = "images", 3
    stem = []
    for i, (k, c) in enumerate(((8, 8), (2, 8), (2, 8))):
        out = f"/model.{i}/conv/Conv_output_0"
        nodes.append(helper.make_node("Conv", [prev, weight(f"model.{i}.w", (c, ch, k, k)), weight(f"model.{i}.b", (c,), 0.1)],
                                      [out], name=f"/model.{i}/conv/Conv", strides=[k, k]))
        nodes.append(helper.make_node("Relu", [out], [f"/model.{i}/act_output_0"], name=f"/model.{i}/act/Relu"))
        prev, ch = f"/model.{i}/act_output_0", c
        stem.append(prev)
    if dynamic:
        nodes.append(helper.make_node("Shape", ["images"], ["/model.22/Shape_output_0"], name="/model.22/Shape"))
        inits.append(_const("/model.22/zero", np.array(0, np.int64)))
        nodes.append(helper.make_node("Gather", ["/model.22/Shape_output_0", "/model.22/zero"], ["/model.22/batch"],
                                      name="/model.22/Gather", axis=0))
        nodes.append(helper.make_node("Unsqueeze", ["/model.22/batch"], ["/model.22/batch1"],
                                      name="/model.22/Unsqueeze", axes=[0]))

    def reshape(src: str, dst: str, dims: list[int], tag: str) -> None:
        if dynamic:
            inits.append(_const(f"/model.22/{tag}_rest", np.array(dims[1:], np.int64)))
            nodes.append(helper.make_node("Concat", ["/model.22/batch1", f"/model.22/{tag}_rest"],
                                          [f"/model.22/{tag}_shape"], name=f"/model.22/{tag}_Concat", axis=0))
        else:
            inits.append(_const(f"/model.22/{tag}_shape", np.array(dims, np.int64)))
        nodes.append(helper.make_node("Reshape", [src, f"/model.22/{tag}_shape"], [dst], name=f"/model.22/{tag}"))

    boxes, clss = [], []
    for i, feat in enumerate(stem):
        for branch, cout, acc in (("cv2", 64, boxes), ("cv3", nc, clss)):
            name = f"/model.22/{branch}.{i}/{branch}.{i}.2/Conv"
            bias = weight(f"model.22.{branch}.{i}.2.bias", (cout,), 0.5)
            if branch == "cv3":
                inits[-1] = _const(bias, numpy_helper.to_array(inits[-1]) + np.float32(cls_bias))
            nodes.append(helper.make_node("Conv", [feat, weight(f"model.22.{branch}.{i}.2.weight", (cout, 8, 1, 1)), bias],
                                          [f"{name}_output_0"], name=name))
            reshape(f"{name}_output_0", f"/model.22/{branch}_{i}_flat", [1, cout, -1], f"Reshape_{branch}_{i}")
            acc.append(f"/model.22/{branch}_{i}_flat")
    nodes.append(helper.make_node("Concat", boxes, ["/model.22/Concat_output_0"], name="/model.22/Concat", axis=-1))
    nodes.append(helper.make_node("Concat", clss, ["/model.22/Concat_1_output_0"], name="/model.22/Concat_1", axis=-1))
    reshape("/model.22/Concat_output_0", "/model.22/dfl/Reshape_output_0", [1, 4, 16, n], "dfl/Reshape")
    nodes += [
        helper.make_node("Sigmoid", ["/model.22/Concat_1_output_0"], ["/model.22/Sigmoid_output_0"], name="/model.22/Sigmoid"),
        helper.make_node("Transpose", ["/model.22/dfl/Reshape_output_0"], ["/model.22/dfl/T0"], name="/model.22/dfl/Transpose",
                         perm=[0, 3, 1, 2]),
        helper.make_node("Softmax", ["/model.22/dfl/T0"], ["/model.22/dfl/S"], name="/model.22/dfl/Softmax", axis=3),
        helper.make_node("Transpose", ["/model.22/dfl/S"], ["/model.22/dfl/T1"], name="/model.22/dfl/Transpose_1",
                         perm=[0, 3, 2, 1]),
        helper.make_node("Conv", ["/model.22/dfl/T1", "model.22.dfl.conv.weight"], ["/model.22/dfl/conv/Conv_output_0"],
                         name="/model.22/dfl/conv/Conv"),
    ]
    inits.append(_const("model.22.dfl.conv.weight", np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1)))
    reshape("/model.22/dfl/conv/Conv_output_0", "/model.22/dist", [1, 4, n], "dfl/Reshape_1")
    anchors, strides = [], []
    for (h, w), s in zip(feats, (8, 16, 32)):
        ys, xs = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        anchors.append(np.stack([xs.ravel(), ys.ravel()]))
        strides.append(np.full(h * w, s))
    inits += [_const("/model.22/anchors", np.concatenate(anchors, 1)[None].astype(np.float32)),
              _const("/model.22/strides", np.concatenate(strides)[None, None].astype(np.float32)),
              _const("/model.22/two", np.array(2.0, np.float32)),
              _const("/model.22/s0", np.array([0], np.int64)), _const("/model.22/s2", np.array([2], np.int64)),
              _const("/model.22/s4", np.array([4], np.int64)), _const("/model.22/ax1", np.array([1], np.int64))]
    nodes += [
        helper.make_node("Slice", ["/model.22/dist", "/model.22/s0", "/model.22/s2", "/model.22/ax1"], ["/model.22/lt"],
                         name="/model.22/Slice"),
        helper.make_node("Slice", ["/model.22/dist", "/model.22/s2", "/model.22/s4", "/model.22/ax1"], ["/model.22/rb"],
                         name="/model.22/Slice_1"),
        helper.make_node("Sub", ["/model.22/anchors", "/model.22/lt"], ["/model.22/x1y1"], name="/model.22/Sub"),
        helper.make_node("Add", ["/model.22/anchors", "/model.22/rb"], ["/model.22/x2y2"], name="/model.22/Add_1"),
        helper.make_node("Add", ["/model.22/x1y1", "/model.22/x2y2"], ["/model.22/c2"], name="/model.22/Add_2"),
        helper.make_node("Sub", ["/model.22/x2y2", "/model.22/x1y1"], ["/model.22/wh"], name="/model.22/Sub_1"),
        helper.make_node("Div", ["/model.22/c2", "/model.22/two"], ["/model.22/cxy"], name="/model.22/Div_1"),
        helper.make_node("Concat", ["/model.22/cxy", "/model.22/wh"], ["/model.22/Concat_2_output_0"],
                         name="/model.22/Concat_2", axis=1),
        helper.make_node("Mul", ["/model.22/Concat_2_output_0", "/model.22/strides"], ["/model.22/Mul_2_output_0"],
                         name="/model.22/Mul_2"),
        helper.make_node("Concat", ["/model.22/Mul_2_output_0", "/model.22/Sigmoid_output_0"], ["output0"],
                         name="/model.22/Concat_3", axis=1),
    ]
    in_dims = ["batch", 3, "height", "width"] if dynamic else [1, 3, size, size]
    out_dims = ["batch", 4 + nc, "anchors"] if dynamic else [1, 4 + nc, n]
    graph = helper.make_graph(nodes, "main_graph", [helper.make_tensor_value_info("images", TensorProto.FLOAT, in_dims)],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, out_dims)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if metadata:
        names = {i: f"class{i}" for i in range(nc)}
        for key, value in (("author", "Ultralytics"), ("stride", "32"), ("task", "detect"), ("batch", "1"),
                           ("imgsz", f"[{size}, {size}]"), ("names", repr(names))):
            model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def wide_tail_model(path: Path, *, size: int = 128, seed: int = 0) -> Path:
    """Conv(3->6) then a tail 6 x size*size wide (Reshape to [1,6,1,N], MaxPool 1x3): at 128 (N = 16384)
    rknn-toolkit2 2.5.0 logs `E RKNN: REGTASK: The bit width of field value exceeds the limit` (131 lines,
    value 0x3fff) and still returns success (measured; an Add or Conv on the same tail logs nothing)."""
    rng = np.random.default_rng(seed)
    n = size * size
    inits = [_const("w1", rng.normal(0, 0.3, (6, 3, 1, 1)).astype(np.float32)),
             _const("shape", np.array([1, 6, 1, n], np.int64))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), helper.make_node("Reshape", ["c1", "shape"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[1, 3], pads=[0, 1, 0, 1], strides=[1, 1])]
    graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 1, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def classifier_model(path: Path, *, nc: int = 2, softmax: bool = True, size: int = 32, seed: int = 0,
                     metadata: bool = False) -> Path:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm (logits) [-> Softmax]: an image classifier.
    rknn-toolkit2 2.5.0 logs `E RKNN: Unkown op target: 0` for its GlobalAveragePool/Flatten tail and keeps a
    final Softmax output in float16 (measured)."""
    rng = np.random.default_rng(seed)
    inits = [_const("w1", rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)),
             _const("fc", rng.normal(0, 0.5, (nc, 8)).astype(np.float32)),
             _const("fcb", rng.normal(0, 0.1, (nc,)).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], strides=[2, 2], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("GlobalAveragePool", ["r1"], ["g"], name="pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits" if softmax else "y"], transB=1, name="fc")]
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["y"], axis=1, name="softmax"))
    graph = helper.make_graph(nodes, "cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, nc])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    if metadata:
        for key, value in (("task", "classify"), ("imgsz", f"[{size}, {size}]"),
                           ("names", repr({i: f"label{i}" for i in range(nc)}))):
            model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def split_head_model(path: Path, *, score_sum: bool = False, nc: int = 2, size: int = 640, cls_bias: float = -4.0) -> Path:
    """A YOLOv8 already split per stride, as rknn_model_zoo exports it: per stride a 64-channel DFL box
    output and a sigmoid class output, plus (`score_sum`) a 1-channel clipped sum of the class scores: 9
    outputs. Numeric output names, as that exporter writes. Built from `yolov8_model`'s head convs."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        stock = onnx.shape_inference.infer_shapes(onnx.load(yolov8_model(Path(tmp) / "stock.onnx", nc=nc, size=size,
                                                                          cls_bias=cls_bias)))
    convs = [f"/model.22/{b}.{i}/{b}.{i}.2/Conv_output_0" for i in range(3) for b in ("cv2", "cv3")]
    cut = onnx.utils.Extractor(stock).extract_model(["images"], convs)
    del cut.graph.output[:]
    number = 318
    for i in range(3):
        box, cls = convs[2 * i], convs[2 * i + 1]
        names = [str(number), str(number + 1)] + ([str(number + 2)] if score_sum else [])
        number += 10
        cut.graph.node.append(helper.make_node("Identity", [box], [names[0]]))
        cut.graph.node.append(helper.make_node("Sigmoid", [cls], [names[1]]))
        if score_sum:
            cut.graph.node.append(helper.make_node("ReduceSum", [names[1]], [f"sum{i}"], axes=[1], keepdims=1))
            cut.graph.node.append(helper.make_node("Clip", [f"sum{i}", "zero_f", "one_f"], [names[2]]))
        cut.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    if score_sum:
        cut.graph.initializer.extend([_const("zero_f", np.array(0.0, np.float32)), _const("one_f", np.array(1.0, np.float32))])
    cut = onnx.shape_inference.infer_shapes(cut)  # fills the outputs' shapes
    onnx.checker.check_model(cut)
    onnx.save(cut, path)
    return path


def shape_chain_model(path: Path, *, value_dependent: bool = False, seed: int = 0) -> Path:
    """A dynamic-axes classifier whose final Reshape takes its target from Shape -> Gather -> Unsqueeze ->
    Concat, as Paddle and torch exports with dynamic axes write it (the OCR direction classifier of
    rapidocr does exactly this). `value_dependent`: the target also adds 0 * max(activation), so it
    depends on values and cannot be fixed from the input shape alone."""
    rng = np.random.default_rng(seed)
    inits = [_const("w", rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)),
             _const("idx0", np.array(0, np.int64)), _const("minus1", np.array([-1], np.int64))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Shape", ["g"], ["s"]),
             helper.make_node("Gather", ["s", "idx0"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b"], ["b1"], axes=[0]),
             helper.make_node("Concat", ["b1", "minus1"], ["target"], axis=0)]
    if value_dependent:
        inits.append(_const("zero", np.array(0.0, np.float32)))
        nodes += [helper.make_node("ReduceMax", ["c"], ["m"], keepdims=0),
                  helper.make_node("Mul", ["m", "zero"], ["m0"]),
                  helper.make_node("Cast", ["m0"], ["m0i"], to=TensorProto.INT64),
                  helper.make_node("Add", ["target", "m0i"], ["target2"])]
    nodes.append(helper.make_node("Reshape", ["g", "target2" if value_dependent else "target"], ["y"], name="final_reshape"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "n"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def cancelling_conv_model(path: Path, *, big: float = 1000.0, size: int = 32, seed: int = 0) -> Path:
    """Conv+Relu (its channel 7 a copy of channel 6), then `cancelling_conv`, whose weights on those two
    identical channels are +big and -big: they cancel exactly in float, but per-channel INT8 weights take
    their step from +-big, so every ordinary weight (~0.3) rounds to 0 and the conv's output is lost
    (measured, rknn-toolkit2 2.5.0, big 1000: cosine 0.25 normal, 0.73 mmse, 0.25 per-layer; 0.99997 with
    that one conv in float16; big 100: 0.93 normal, 0.990 mmse). Then a 1x1 head conv."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3))
    b1 = rng.normal(0, 0.1, (8,))
    w1[7], b1[7] = w1[6], b1[6]
    w2 = rng.normal(0, 0.3, (8, 8, 3, 3))
    w2[:, 6, 1, 1], w2[:, 7, 1, 1] = big, -big
    arrays = {"w1": w1, "b1": b1, "w2": w2, "w3": rng.normal(0, 0.3, (4, 8, 1, 1))}
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="cancelling_conv", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c2", "w3"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "cancelling", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def foreign_rknn(work: Path, toolkit: str | None = None, *, seed: int = 0) -> tuple[Path, Path]:
    """A `.rknn` of the tiny conv model built by the real toolkit (2.5.0, or `toolkit` in its pinned
    environment) and then taken out of its build folder, alone: what someone hands over without its ONNX.
    Returns (the .rknn, the ONNX it was built from: for the emulated runtime double only)."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    work.mkdir(parents=True, exist_ok=True)
    onnx_path = conv_model(work / "tiny.onnx", seed=seed)
    config = write_config(work / "tiny.yaml", onnx_path, image_folder(work / "cal", 4, seed=1),
                          image_folder(work / "gold", 2, seed=2))
    args = [sys.executable, "-m", "rkdet.cli", "convert", "--config", str(config), "--out", str(work / "build"), "--json"]
    if toolkit:
        args += ["--toolkit", toolkit]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=repo, timeout=900, env=dict(os.environ), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = Path(json.loads(proc.stdout)["builds"][0]["folder"])
    rknn = work / f"tiny-{toolkit or 'default'}.rknn"
    shutil.copyfile(folder / "model.rknn", rknn)
    shutil.rmtree(work / "build")
    return rknn, onnx_path


def toolkit_cache() -> str:
    """Where .ci/setup pre-built the pinned toolkit environments ($RKDET_TOOLKIT_CACHE, else .venv/rkdet-toolkits)."""
    import os

    return os.environ.get("RKDET_TOOLKIT_CACHE") or str(Path(__file__).resolve().parents[2] / ".venv" / "rkdet-toolkits")
