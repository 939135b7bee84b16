"""The INT8 emulation of a build: the prepared ONNX fake-quantized with the quantization the toolkit chose.

Why: the emulated board's runtime double computes an ONNX with onnxruntime. Computing the FP32 model
gives outputs no INT8 NPU gives (and a bitwise "agreement" with the FP32 reference that a real board
never shows); replaying the simulator's stored outputs answers golden inputs only and ignores a fault
planted mid-graph. This model computes like the NPU for any input: every tensor the build keeps in
int8 is rounded to its int8 grid (QuantizeLinear / DequantizeLinear with the toolkit's scale and zero
point), every tensor it keeps in float16 to float16, and the weights and biases the table lists to
their per-channel grids (weights asymmetric int8 with a zero point per channel, biases int32).
It is close to the simulator, not bitwise (docs/EMULATOR.md has the measured distance).

The table is the toolkit's own (toolkit2_worker.py writes `quantization.json`); the tensor names are
the ONNX's, so a fault at a named tensor (the runtime double's RKDET_EMU_FAULT_TENSOR) applies to the
fake-quantized value, and a cut of this model (bisection) is the INT8 emulation of the cut.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rkdet.records.manifest import INT8_EMULATION_FILE as FILE  # the one name (deploy reads it from there)

TABLE = "quantization.json"  # the toolkit's choice as the worker wrote it, kept in the build folder
SUFFIX = "__rkdet_q"  # names this module adds end so, never clashing with the model's own
WEIGHTS = True  # round weights and biases the table lists (off: a control, to see what weight rounding adds)
WEIGHTED = {"Conv": 0, "ConvTranspose": 1, "Gemm": None, "MatMul": None}  # op -> the weight's output-channel axis


@dataclass(frozen=True)
class Emulation:
    """The fake-quantized model and what it rounds (the manifest's `int8_emulation` record)."""

    onnx_bytes: bytes
    int8_tensors: int
    float16_tensors: int
    int8_weights: int

    def record(self, sha256: str, toolkit: str) -> dict[str, Any]:
        return {"file": FILE, "sha256": sha256, "int8_tensors": self.int8_tensors,
                "float16_tensors": self.float16_tensors, "int8_weights": self.int8_weights,
                "source": f"{toolkit}: the quantizer's table after build (quantization.json)",
                "exact": False}


def _int8_params(entry: Mapping[str, Any] | None) -> tuple[float, int] | None:
    """(scale, zero point) of a per-tensor int8 entry, else None. An entry the toolkit marks `qmode:
    replace` is a tensor it fuses away (a Conv output into its activation): never held in int8."""
    if not entry or entry.get("dtype") != "int8" or entry.get("qmode") == "replace":
        return None
    scale, zero = list(entry.get("scale") or []), list(entry.get("zero_point") or [0])
    if len(scale) != 1 or not float(scale[0]) > 0:
        return None
    return float(scale[0]), int(zero[0]) if zero else 0


def fake_quantize(onnx_bytes: bytes, table: Mapping[str, Mapping[str, Any]], *, weights: bool = WEIGHTS) -> Emulation:
    """`onnx_bytes` with every tensor of `table` rounded as the build keeps it (see the module doc);
    `weights`: also round the Conv/Gemm/MatMul weights and biases the table lists to their grids."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load_from_string(onnx_bytes)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    consts: list[Any] = []
    nodes: list[Any] = []
    counts = {"int8": 0, "float16": 0, "weights": 0}

    def qdq(source: str, target: str, params: tuple[float, int]) -> list[Any]:
        scale, zero = params
        s, z = f"{target}{SUFFIX}_scale", f"{target}{SUFFIX}_zero"
        consts.append(helper.make_tensor(s, TensorProto.FLOAT, [], [scale]))
        consts.append(helper.make_tensor(z, TensorProto.INT8, [], [zero]))
        counts["int8"] += 1
        return [helper.make_node("QuantizeLinear", [source, s, z], [f"{target}{SUFFIX}_int8"]),
                helper.make_node("DequantizeLinear", [f"{target}{SUFFIX}_int8", s, z], [target])]

    def half(source: str, target: str) -> list[Any]:
        counts["float16"] += 1
        return [helper.make_node("Cast", [source], [f"{target}{SUFFIX}_fp16"], to=TensorProto.FLOAT16),
                helper.make_node("Cast", [f"{target}{SUFFIX}_fp16"], [target], to=TensorProto.FLOAT)]

    def rounding(name: str, *, graph_output: bool) -> tuple[str, Any] | None:
        entry = table.get(name)
        if entry and entry.get("dtype") == "float16":
            return "float16", None
        params = _int8_params(entry)
        if params is None and graph_output:  # the build's int8 copy behind a float output
            params = _int8_params(table.get(f"{name}_int8"))
        return ("int8", params) if params else None

    def emit(name: str, *, graph_output: bool) -> list[Any]:
        """Nodes rounding tensor `name` (renamed `name + SUFFIX` at its producer), or [] when kept as is."""
        how = rounding(name, graph_output=graph_output)
        if how is None:
            return []
        kind, params = how
        return half(name + SUFFIX, name) if kind == "float16" else qdq(name + SUFFIX, name, params)

    def weight(node: Any) -> None:
        """Round the node's initializer weight and bias to the grids the table gives them, in place: weights
        per output channel, asymmetric (rknn-toolkit2 2.5.0: scale (max - min) / 255 and a zero point per
        channel), biases int32 with their per-channel scales."""
        if not weights or node.op_type not in WEIGHTED:
            return
        for k in (1, 2):
            if len(node.input) <= k or node.input[k] not in inits:
                continue
            init, entry = inits[node.input[k]], table.get(node.input[k])
            if not entry:
                continue
            w = numpy_helper.to_array(init).astype(np.float64)
            if entry.get("dtype") == "float16":
                init.CopyFrom(numpy_helper.from_array(w.astype(np.float16).astype(np.float32), init.name))
                counts["weights"] += 1
                continue
            bits = {"int8": (-128, 127), "int16": (-32768, 32767), "int32": (-(2 ** 31), 2 ** 31 - 1)}.get(entry.get("dtype"))
            scale = np.asarray(entry.get("scale") or [], np.float64)
            zero = np.asarray(entry.get("zero_point") or [0] * scale.size, np.float64)
            if bits is None or not scale.size or not (scale > 0).all() or zero.size != scale.size:
                continue
            axis = WEIGHTED[node.op_type] if k == 1 and w.ndim > 1 else 0
            if axis is None or scale.size not in (1, w.shape[axis] if w.ndim else 1):
                continue
            shape = [1] * w.ndim
            if scale.size > 1:
                shape[axis] = -1
            s_, z_ = scale.reshape(shape), zero.reshape(shape)
            q = np.clip(np.round(w / s_) + z_, *bits)
            init.CopyFrom(numpy_helper.from_array(((q - z_) * s_).astype(np.float32), init.name))
            counts["weights"] += 1

    outputs = {o.name for o in graph.output}
    for i in graph.input:  # the fed input as the NPU takes it: `<input>_int8`
        params = _int8_params(table.get(f"{i.name}_int8")) or _int8_params(table.get(i.name))
        if params is not None and i.name not in inits:
            nodes += qdq(i.name, i.name + SUFFIX + "_in", params)
    renamed_inputs = {i.name: i.name + SUFFIX + "_in" for i in graph.input
                      if any(n.output and n.output[0] == i.name + SUFFIX + "_in" for n in nodes)}
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in renamed_inputs:
                node.input[k] = renamed_inputs[name]
        weight(node)
        extra: list[Any] = []
        for k, name in enumerate(node.output):
            more = emit(name, graph_output=name in outputs)
            if more:
                node.output[k] = name + SUFFIX
                extra += more
        nodes += [node, *extra]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(consts)
    onnx.checker.check_model(model)
    return Emulation(model.SerializeToString(), counts["int8"], counts["float16"], counts["weights"])


def write(folder: Path, onnx_bytes: bytes, toolkit: str) -> dict[str, Any] | None:
    """Write `folder/model.int8emu.onnx` from `folder/quantization.json`; its manifest record, or None
    when the build has no table (a float16 build, another toolkit): the emulated board then computes FP32
    (as it does when the model cannot be made: the record then says why, `file` null)."""
    table_path = folder / TABLE
    if not table_path.is_file():
        return None
    try:
        emulation = fake_quantize(onnx_bytes, json.loads(table_path.read_text()))
    except Exception as exc:  # noqa: BLE001  the emulation is for emulated boards: never a reason to fail a build
        return {"file": None, "error": f"{exc.__class__.__name__}: {str(exc)[:300]}", "exact": False}
    (folder / FILE).write_bytes(emulation.onnx_bytes)
    return emulation.record(hashlib.sha256(emulation.onnx_bytes).hexdigest(), toolkit)
