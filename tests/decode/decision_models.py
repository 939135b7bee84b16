"""Tiny ONNX models whose decisions rkdet recognises no layout of (a declared `decision:` judges them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

S = 8  # input side


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def two_head_model(path: Path) -> Path:
    """Face / not-face probabilities [1, 2] (Softmax) and a box head [1, 4] from the mean colour."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 2, (2, 3, 1, 1)).astype(np.float32), "wc"),
             numpy_helper.from_array(rng.normal(0, 1, (4, 3, 1, 1)).astype(np.float32), "wb")]
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]),
             helper.make_node("Conv", ["g", "wc"], ["c"]), helper.make_node("Flatten", ["c"], ["cf"]),
             helper.make_node("Softmax", ["cf"], ["prob"], axis=1),
             helper.make_node("Conv", ["g", "wb"], ["b"]), helper.make_node("Flatten", ["b"], ["box"])]
    return _save(helper.make_graph(nodes, "two_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, S, S])],
                                   [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 2]),
                                    helper.make_tensor_value_info("box", TensorProto.FLOAT, [1, 4])], inits), path)


def dense_map_model(path: Path) -> Path:
    """A PNet-like dense probability map, channels last: [1, S, S, 2] (1x1 conv, Softmax, Transpose)."""
    w = np.random.default_rng(4).normal(0, 2, (2, 3, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Softmax", ["c"], ["p"], axis=1),
             helper.make_node("Transpose", ["p"], ["map"], perm=[0, 2, 3, 1])]
    return _save(helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, S, S])],
                                   [helper.make_tensor_value_info("map", TensorProto.FLOAT, [1, S, S, 2])],
                                   [numpy_helper.from_array(w, "w")]), path)


def nhwc_classifier(path: Path, *, side: int = 16, classes: int = 3) -> Path:
    """A Keras/TF-style export: input [1, side, side, 3] (NHWC), a Transpose to NCHW, then a 1x1 conv,
    average pool and flatten to [1, classes] logits."""
    w = np.random.default_rng(6).normal(0, 1, (classes, 3, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["input_1"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "w"], ["c"]), helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Flatten", ["g"], ["logits"])]
    return _save(helper.make_graph(nodes, "nhwc", [helper.make_tensor_value_info("input_1", TensorProto.FLOAT,
                                                                                 [1, side, side, 3])],
                                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
                                   [numpy_helper.from_array(w, "w")]), path)
