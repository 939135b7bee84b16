"""Tiny ONNX models for `rkdet layers` tests: one that INT8 cannot carry through one node, one that it can."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OFFSET = 10000.0  # the huge-scale branch: both convs carry it, so each output's int8 step is ~80


def fragile_model(path: Path, *, seed: int = 0, size: int = 32) -> Path:
    """Conv+Relu, then two convs with a +10000 bias (a huge-scale branch whose own outputs quantize well:
    the offset dominates) and a Sub `cancel` that removes the offset: its small difference is below the
    inputs' int8 step, so the loss appears at exactly that node. Then a 1x1 head conv."""
    rng = np.random.default_rng(seed)
    arrays = {"w1": rng.normal(0, 0.3, (8, 3, 3, 3)), "w2a": rng.normal(0, 0.3, (8, 8, 3, 3)),
              "w2b": rng.normal(0, 0.3, (8, 8, 3, 3)), "big": np.full((8,), OFFSET),
              "w3": rng.normal(0, 0.3, (4, 8, 1, 1))}
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2a", "big"], ["big_a"], name="huge_a", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["r1", "w2b", "big"], ["big_b"], name="huge_b", pads=[1, 1, 1, 1]),
             helper.make_node("Sub", ["big_a", "big_b"], ["d"], name="cancel"),
             helper.make_node("Conv", ["d", "w3"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "fragile", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def chain_model(path: Path, *, depth: int = 6, seed: int = 0, size: int = 16) -> Path:
    """A straight chain of `depth` Conv(8->8, 3x3)+Relu pairs after a Conv(3->8) stem: 2*depth+2 nodes named
    conv<i>/relu<i>, tensors c<i>/r<i>; weights scaled to keep activations in range (quantizes cleanly)."""
    rng = np.random.default_rng(seed)
    inits, nodes, prev, cin = [], [], "x", 3
    for i in range(depth + 1):
        w = rng.normal(0, np.sqrt(2.0 / (cin * 9)), (8, cin, 3, 3)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        prev, cin = f"r{i}", 8
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 8, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
