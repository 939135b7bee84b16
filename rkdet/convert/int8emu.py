"""The INT8 emulation of a build: the prepared ONNX fake-quantized with the quantization the toolkit chose.

Why: the emulated board's runtime double computes an ONNX with onnxruntime. Computing the FP32 model
gives outputs no INT8 NPU gives (and a bitwise "agreement" with the FP32 reference that a real board
never shows); replaying the simulator's stored outputs answers golden inputs only and ignores a fault
planted mid-graph. This model computes like the NPU for any input: every tensor the build keeps in
int8 is rounded to its int8 grid (QuantizeLinear / DequantizeLinear with the toolkit's scale and zero
point), every tensor it keeps in float16 to float16, and the weights and biases the table lists to
their per-channel grids (weights asymmetric int8 with a zero point per channel, biases int32), in
float32 rounding half to even as the toolkit does; a Conv over a channel Concat is split per part as the
toolkit builds it, and so is a Conv it follows by an identity "select" Conv (`split_parts`); a hybrid
build's conversions between int8 and float16 layers are rounded for the readers (`emit`); a Sigmoid is
computed as 1 / (1 + exp(-x)) with exp correctly rounded (`sigmoid`). Each rule was found layer by layer
against the simulator's own tensors; with them the default model and the small ones tested equal the
simulator bit for bit on their golden inputs. It stays an emulation, not the simulator: other models may
use toolkit rewrites no rule covers yet, and other inputs may meet a rounding tie these rules resolve
otherwise, which a deep network amplifies (docs/EMULATOR.md has the measured distance, and that noise
floor: without the Sigmoid rule the default model was as far from the simulator as two float32
summation orders of the emulation are from each other).

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


INT_RANGES = {"int8": (-128, 127), "int16": (-32768, 32767), "int32": (-(2 ** 31), 2 ** 31 - 1)}


def on_grid(w: np.ndarray, entry: Mapping[str, Any] | None, axis: int | None) -> np.ndarray | None:
    """`w` (a weight, `axis` its output-channel axis, or a bias) rounded to the grid `entry` gives it, as
    float32; None when the entry gives none. Weights are per output channel and asymmetric (rknn-toolkit2
    2.5.0: scale (max - min) / 255 and a zero point per channel), biases int32 with per-channel scales.
    Computed as the toolkit computes it, in float32 and rounding half to even: `w / scale` in float64
    puts a weight at -42.5000016 where float32 gives -42.5, which rounds to -42 (measured on the default
    model: one weight in model.3 was a step off in float64, every Conv equals the simulator's in float32)."""
    if not entry:
        return None
    w32 = np.asarray(w, np.float32)
    if entry.get("dtype") == "float16":
        return w32.astype(np.float16).astype(np.float32)
    bits = INT_RANGES.get(entry.get("dtype"))
    scale = np.asarray(entry.get("scale") or [], np.float32)
    zero = np.asarray(entry.get("zero_point") or [0] * scale.size, np.float32)
    if bits is None or not scale.size or not (scale > 0).all() or zero.size != scale.size:
        return None
    axis = axis if w32.ndim > 1 else 0
    if axis is None or scale.size not in (1, w32.shape[axis] if w32.ndim else 1):
        return None
    shape = [1] * w32.ndim
    if scale.size > 1:
        shape[axis] = -1
    s_, z_ = scale.reshape(shape), zero.reshape(shape)
    q = np.clip(np.round(w32 / s_) + z_, *bits)  # np.round: half to even
    return ((q - z_) * s_).astype(np.float32)


def fake_quantize(onnx_bytes: bytes, table: Mapping[str, Mapping[str, Any]], *, weights: bool = WEIGHTS,
                  sigmoid_as_exp: bool = True) -> Emulation:
    """`onnx_bytes` with every tensor of `table` rounded as the build keeps it (see the module doc);
    `weights`: also round the Conv/Gemm/MatMul weights and biases the table lists to their grids;
    `sigmoid_as_exp`: Sigmoid as the simulator computes it (`sigmoid`; off: a control, onnxruntime's kernel)."""
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
        """Nodes rounding tensor `name` (renamed `name + SUFFIX` at its producer), or [] when kept as is.
        A hybrid build converts a tensor between an int8 and a float16 layer (`<name>__float16`,
        `<name>__int8` in its table): its readers get it rounded as it is kept, then converted so."""
        how = rounding(name, graph_output=graph_output)
        twin = None if graph_output else (
            ("float16", None) if (table.get(f"{name}__float16") or {}).get("dtype") == "float16"
            else ("int8", _int8_params(table.get(f"{name}__int8"))) if _int8_params(table.get(f"{name}__int8"))
            else None)
        steps = [step for step in (how, twin) if step is not None]
        made: list[Any] = []
        source = name + SUFFIX
        for k, (kind, params) in enumerate(steps):
            target = name if k == len(steps) - 1 else f"{name}{SUFFIX}_kept"
            made += half(source, target) if kind == "float16" else qdq(source, target, params)
            source = target
        return made

    def weight(node: Any) -> None:
        """Round the node's initializer weight and bias to the grids the table gives them, in place (`on_grid`)."""
        if not weights or node.op_type not in WEIGHTED:
            return
        for k in (1, 2):
            if len(node.input) <= k or node.input[k] not in inits:
                continue
            init, entry = inits[node.input[k]], table.get(node.input[k])
            rounded = on_grid(numpy_helper.to_array(init), entry, WEIGHTED[node.op_type] if k == 1 else 0)
            if rounded is not None:
                init.CopyFrom(numpy_helper.from_array(rounded, init.name))
                counts["weights"] += 1

    outputs = {o.name for o in graph.output}
    producers = {out: n for n in graph.node for out in n.output}
    replaced: set[str] = set()  # initializers of the Convs split_parts replaced
    taken = set(producers) | set(inits) | {i.name for i in graph.input}

    def split_parts(node: Any) -> list[Any] | None:
        """A Conv whose input the toolkit's table lists as `<part>_conv`, as the toolkit builds it: one Conv
        per part, its output `<part>_conv` rounded to its own grid (int8, unless `qmode: replace`: fused
        into the sum), then their sum, which carries the Conv's output name. Parts: the inputs of a channel
        Concat the Conv reads (each its slice of the weights on the grid of `<part>_conv_i1`, the bias,
        `<part>_conv_i2`, on one of them), else the Conv's own input when the table also has
        `<node name>_select_i1` (an identity Conv the toolkit puts behind it; the Conv's own weights and
        bias). Measured layer by layer against the simulator: the default model's partial Conv over the
        upsampled input (model.12/cv1, model.15/cv1) and a split head's first Conv (`images_conv`) are
        int8 tensors of their own. None: not such a Conv."""
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in inits:
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        src = producers.get(node.input[0])
        concat = src is not None and src.op_type == "Concat" and next(
            (helper.get_attribute_value(a) for a in src.attribute if a.name == "axis"), None) in (1, -3)
        own = next((k for k, v in renamed_inputs.items() if v == node.input[0]), node.input[0])  # a graph input
        parts = list(src.input) if concat else [own]
        if concat and (attrs.get("group", 1) != 1 or len(set(parts)) != len(parts)):
            return None
        if not concat and not (node.name and table.get(f"{node.name}_select_i1")):
            return None  # `<input>_conv` without the select Conv belongs to a Concat this input also feeds
        if any(f"{p}_conv{x}" in taken for p in parts for x in ("", "_i1", "_i2")):
            return None
        has_bias = len(node.input) > 2 and bool(node.input[2])
        if has_bias and node.input[2] not in inits:
            return None
        w_all = numpy_helper.to_array(inits[node.input[1]])
        if concat:
            grids = [(table.get(f"{p}_conv_i1"), table.get(f"{p}_conv_i2")) for p in parts]
            widths = [int(((w or {}).get("shape") or [0, 0])[1]) for w, _ in grids]
            biased = [p for p, (_, b) in zip(parts, grids) if b]
        else:
            grids = [(table.get(node.input[1]), table.get(node.input[2]) if has_bias else None)]
            widths, biased = [int(w_all.shape[1])], parts if has_bias else []
        if not all(table.get(f"{p}_conv") for p in parts) or not all(w for w, _ in grids):
            return None
        if sum(widths) != w_all.shape[1] or min(widths) <= 0 or len(biased) != (1 if has_bias else 0):
            return None
        made: list[Any] = []
        partial: list[str] = []
        start = 0
        for p, width, (w_grid, b_grid) in zip(parts, widths, grids):
            w_part = w_all[:, start:start + width]
            start += width
            rounded = on_grid(w_part, w_grid, 0) if weights else None
            consts.append(numpy_helper.from_array(np.asarray(w_part if rounded is None else rounded, np.float32),
                                                  f"{p}_conv_i1"))
            counts["weights"] += rounded is not None
            inputs = [renamed_inputs.get(p, p), f"{p}_conv_i1"]
            if p in biased:
                b = numpy_helper.to_array(inits[node.input[2]])
                rounded = on_grid(b, b_grid, 0) if weights else None
                consts.append(numpy_helper.from_array(np.asarray(b if rounded is None else rounded, np.float32),
                                                      f"{p}_conv_i2"))
                counts["weights"] += rounded is not None
                inputs.append(f"{p}_conv_i2")
            more = emit(f"{p}_conv", graph_output=False)
            made.append(helper.make_node("Conv", inputs, [f"{p}_conv{SUFFIX}" if more else f"{p}_conv"],
                                         name=f"{node.name or node.output[0]}{SUFFIX}_{len(partial)}", **attrs))
            made += more
            partial.append(f"{p}_conv")
        replaced.update(node.input[1:])
        made.append(helper.make_node("Sum", partial, [node.output[0]],
                                     name=f"{node.name or node.output[0]}{SUFFIX}_sum"))
        return made

    def sigmoid(node: Any) -> list[Any]:
        """Sigmoid as the simulator's results follow it: 1 / (1 + exp(-x)) in float32, exp(-x) correctly
        rounded to float32 (computed in float64). Measured on the default model, fed its own Conv outputs
        (4 pages, 13M elements): its Swish outputs (x * Sigmoid(x), rounded to int8) equal this in every
        element; onnxruntime's Sigmoid kernel (a rational approximation) differs in 11, its float32 Exp
        in 2, each a value on a rounding tie that then spreads through the network."""
        x, out = node.input[0], node.output[0]
        one, neg, neg64, exp64, exp, den = (f"{out}{SUFFIX}_{k}"
                                            for k in ("one", "neg", "neg64", "exp64", "exp", "den"))
        consts.append(helper.make_tensor(one, TensorProto.FLOAT, [], [1.0]))
        more = emit(out, graph_output=out in outputs)
        return [helper.make_node("Neg", [x], [neg]),
                helper.make_node("Cast", [neg], [neg64], to=TensorProto.DOUBLE),
                helper.make_node("Exp", [neg64], [exp64]),
                helper.make_node("Cast", [exp64], [exp], to=TensorProto.FLOAT),
                helper.make_node("Add", [exp, one], [den]),
                helper.make_node("Reciprocal", [den], [out + SUFFIX if more else out]), *more]

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
        if node.op_type == "Sigmoid" and sigmoid_as_exp:
            nodes += sigmoid(node)
            continue
        split = split_parts(node)
        if split is not None:  # the Sum carries the Conv's output name: rounded below like the Conv's would be
            nodes += split[:-1]
            node = split[-1]
        else:
            weight(node)
        extra: list[Any] = []
        for k, name in enumerate(node.output):
            more = emit(name, graph_output=name in outputs)
            if more:
                node.output[k] = name + SUFFIX
                extra += more
        nodes += [node, *extra]
    read = {name for n in nodes for name in n.input}
    unused = [i for i in graph.initializer if i.name not in read and i.name in replaced]  # a split Conv's own weights
    for init in unused:
        graph.initializer.remove(init)
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
