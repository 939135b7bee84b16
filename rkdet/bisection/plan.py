"""Where a model can be cut, and the bisection over those places (pure: no toolkit, no board).

A cut at position i (the i-th node of the ONNX graph, which is topologically ordered) is a model whose
outputs are the *frontier* after node i: every float tensor made by nodes 0..i that a later node (or the
graph's output) still reads. An error born at node f reaches the frontier of every cut i >= f (it is
either still live or carried by what read it), and no cut i < f, so "the board departs at cut i" is
monotone in i even for a branched graph, and a binary search finds f. The last position's frontier is
the graph's outputs: the build's own model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import onnx

_FLOAT = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


@dataclass(frozen=True)
class CutPoint:
    """One place to cut: after ONNX node `position` (graph order)."""

    position: int
    node: str
    op: str
    tensors: tuple[str, ...]  # what the node makes (float tensors)
    frontier: tuple[str, ...]  # the cut model's outputs, in the order they are made


def cut_points(onnx_bytes: bytes) -> list[CutPoint]:
    """Every node with a float output, in graph order, and its frontier."""
    model = onnx.load_from_string(onnx_bytes)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - types unknown: every tensor is taken as float
        pass
    graph = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.output, *graph.input]}
    is_float = lambda t: types.get(t, onnx.TensorProto.FLOAT) in _FLOAT  # noqa: E731
    nodes = list(graph.node)
    last_use: dict[str, float] = {}
    for index, node in enumerate(nodes):
        for t in node.input:
            if t:
                last_use[t] = index
    for out in graph.output:
        last_use[out.name] = math.inf
    made: list[tuple[int, str]] = []
    points: list[CutPoint] = []
    for index, node in enumerate(nodes):
        outs = tuple(t for t in node.output if t and is_float(t))
        made += [(index, t) for t in outs]
        if not outs or node.op_type == "Constant":
            continue
        frontier = tuple(t for _, t in made if last_use.get(t, -1) > index)
        if frontier:
            points.append(CutPoint(len(points), node.name or f"{node.op_type}#{index}", node.op_type, outs, frontier))
    return points


def max_cut_builds(layers: int) -> int:
    """The bound the issue sets: at most ceil(log2(layers)) + 2 cut builds."""
    return math.ceil(math.log2(max(layers, 1))) + 2


@dataclass(frozen=True)
class Located:
    """The bisection's answer: the first position that departs (None: none does) and the last that agrees."""

    first_departing: int | None
    last_agreeing: int | None  # None: the graph inputs


def bisect(count: int, departs: Callable[[int], bool]) -> Located:
    """First position in 0..count-1 where `departs` is true, asking the last position first (the full model).

    Asks at most 1 + ceil(log2(count)) questions; `departs` is monotone (see the module doc)."""
    if count == 0 or not departs(count - 1):
        return Located(None, count - 1 if count else None)
    lo, hi = -1, count - 1  # agrees at lo (-1: the inputs), departs at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if departs(mid):
            hi = mid
        else:
            lo = mid
    return Located(hi, lo if lo >= 0 else None)
