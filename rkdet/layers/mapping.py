"""RKNN layer names -> ONNX node and tensor names.

rknn-toolkit2 names a layer after the tensor it outputs. After fusion the name is the fused group's
last output (a Conv+Add+Relu group is named after the Relu's output; the rows before it with no
numbers are the fused members), and layers it inserts carry a suffix on the tensor they derive from:
`_int8`/`_uint8`/`_int16`/`_fp16` (exDataConvert, or a layer whose output was re-typed), `-rs` and `_rs`
(reshape), `_conv` (an op lowered to a convolution), `_tp` (transpose), `_i<N>`/`_o<N>` (split parts).
A name that is neither an ONNX tensor nor one with such suffixes removed has no ONNX counterpart.
A row without numbers (fused, no dump) is not always the one before the layer it is fused into (the
toolkit lists a head's last Conv before another stride's Sigmoid), so it is attached through the graph:
to the nearest measured layer whose ONNX node reads its tensor (directly or through other such rows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import onnx

_SUFFIX = re.compile(r"(?:_int8|_uint8|_int16|_fp16|_float16|-rs|_rs|_conv|_tp|_i\d+|_o\d+|_\d+)$")


@dataclass(frozen=True)
class OnnxRef:
    """Where an RKNN layer comes from in the ONNX graph."""

    kind: str  # "exact" (an ONNX tensor) | "derived" (suffix added by the toolkit) | "input" | "none"
    tensor: str | None
    node: str | None  # the ONNX node producing `tensor` (None for a graph input)
    op_type: str | None
    node_index: int | None  # position in the ONNX graph's (topological) node list


class OnnxIndex:
    """Tensor name -> producing node, for one ONNX graph."""

    def __init__(self, onnx_bytes: bytes) -> None:
        graph = onnx.load_from_string(onnx_bytes).graph
        self.inputs = {i.name for i in graph.input}
        self.producer: dict[str, tuple[str, str, int]] = {}
        self.consumers: dict[str, list[str]] = {}  # tensor -> names of the nodes reading it
        self.outputs: dict[str, list[str]] = {}  # node name -> its output tensors
        for index, node in enumerate(graph.node):
            name = node.name or f"{node.op_type}#{index}"
            self.outputs[name] = [o for o in node.output if o]
            for out in node.output:
                if out:
                    self.producer[out] = (name, node.op_type, index)
            for inp in node.input:
                if inp:
                    self.consumers.setdefault(inp, []).append(name)

    def downstream(self, tensor: str, depth: int = 4) -> list[str]:
        """Nodes reading `tensor`, then the nodes reading theirs, ... (breadth first, `depth` levels)."""
        found: list[str] = []
        frontier = [tensor]
        for _ in range(depth):
            nodes = [n for t in frontier for n in self.consumers.get(t, []) if n not in found]
            found += list(dict.fromkeys(nodes))
            frontier = [o for n in nodes for o in self.outputs.get(n, [])]
        return found

    def _ref(self, tensor: str, kind: str) -> OnnxRef | None:
        if tensor in self.producer:
            node, op, index = self.producer[tensor]
            return OnnxRef(kind, tensor, node, op, index)
        if tensor in self.inputs:
            return OnnxRef("input", tensor, None, None, None)
        return None

    def lookup(self, layer: str) -> OnnxRef:
        exact = self._ref(layer, "exact")
        if exact:
            return exact
        name = layer
        while True:
            stripped = _SUFFIX.sub("", name)
            if stripped == name or not stripped:
                return OnnxRef("none", None, None, None, None)
            name = stripped
            found = self._ref(name, "derived")
            if found:
                return found if found.kind != "input" else OnnxRef("derived", name, None, None, None)
