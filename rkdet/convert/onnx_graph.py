"""ONNX checks and graph preparation before the toolkit sees the model.

Why prepare YOLOv8 here: rknn-toolkit2 2.5.0 crashes on the stock Ultralytics head (IndexError in fuse
rule `seperate_conv_rs_split`), and INT8 of the stock single output `[1,4+nc,N]` zeroes every class
score because box coordinates (up to the input size) and 0..1 scores share one int8 scale. Cutting at
the six head convs (box DFL logits and class logits per stride, sigmoid on the class branch) gives each
its own scale, as rknn_model_zoo does; the decode (DFL, NMS) then runs on the CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rkdet.config import ModelSection
from rkdet.errors import InputError

MIN_OPSET = 7
MAX_OPSET = 19  # rknn-toolkit2 2.5.0 supports opset 7..19

_BOX_CONV = re.compile(r"^/model\.(\d+)/cv2\.(\d)/cv2\.\2\.2/Conv$")
_CLS_CONV = re.compile(r"^/model\.(\d+)/cv3\.(\d)/cv3\.\2\.2/Conv$")


@dataclass(frozen=True)
class PreparedModel:
    """The graph as handed to the toolkit, and what rkdet needs to feed and read it."""

    onnx_bytes: bytes
    input_name: str
    input_shape_nchw: tuple[int, int, int, int]
    output_names: tuple[str, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    prepare: str
    opset: int
    stock_yolov8_head: bool  # the unprepared Ultralytics head is still in the graph
    warnings: tuple[str, ...] = ()  # worth telling the user, not worth failing for (e.g. imgsz mismatch)


def _has_stock_head(model) -> bool:
    names = [n.name for n in model.graph.node if n.op_type == "Conv"]
    return sum(bool(_BOX_CONV.match(n) or _CLS_CONV.match(n)) for n in names) == 6 and any(
        n.name.endswith("/dfl/conv/Conv") for n in model.graph.node)


def require_onnx_file(path: Path) -> None:
    if not path.is_file():
        raise InputError(f"{path}: ONNX model not found; set model.onnx to an existing .onnx file")


def _load(path: Path):
    import onnx

    require_onnx_file(path)
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError, ValueError... for corrupt files
        raise InputError(f"{path}: not a readable ONNX model ({exc.__class__.__name__}); re-export it") from None
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise InputError(f"{path}: ONNX checker rejects the model: {first}") from None
    return model


def _opset(model) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _dims(value_info) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in value_info.type.tensor_type.shape.dim]


def _graph_inputs(model):
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _split_head(model, path: Path):
    """Extract the six head convs of a stock Ultralytics YOLOv8 export, sigmoid on the class branches."""
    import onnx
    from onnx import helper

    box, cls = {}, {}
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        if m := _BOX_CONV.match(node.name):
            box[int(m.group(2))] = node.output[0]
        elif m := _CLS_CONV.match(node.name):
            cls[int(m.group(2))] = node.output[0]
    if sorted(box) != [0, 1, 2] or sorted(cls) != [0, 1, 2]:
        raise InputError(f"{path}: model.prepare is yolov8-split-head but the six YOLOv8 head convs "
                         "(/model.N/cv2.i/cv2.i.2/Conv, /model.N/cv3.i/cv3.i.2/Conv) are not in the graph; "
                         "use an Ultralytics export or set model.prepare: none")
    input_name = _graph_inputs(model)[0].name
    # The extractor reads the cut points' types from value_info, which only some exporters write.
    known = {v.name for v in model.graph.value_info}
    for name in [*box.values(), *cls.values()]:
        if name not in known:
            model.graph.value_info.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    cut = onnx.utils.Extractor(model).extract_model([input_name], [box[0], cls[0], box[1], cls[1], box[2], cls[2]])
    graph = cut.graph
    del graph.output[:]
    for i in range(3):
        graph.node.append(helper.make_node("Identity", [box[i]], [f"box{i}"], name=f"rkdet/box{i}"))
        graph.node.append(helper.make_node("Sigmoid", [cls[i]], [f"cls{i}"], name=f"rkdet/cls{i}_sigmoid"))
        graph.output.extend([helper.make_tensor_value_info(f"box{i}", onnx.TensorProto.FLOAT, None),
                             helper.make_tensor_value_info(f"cls{i}", onnx.TensorProto.FLOAT, None)])
    del cut.metadata_props[:]
    cut.metadata_props.extend(model.metadata_props)
    return cut


def _classifier_logits(model, path: Path):
    """Drop a final Softmax: the toolkit keeps it in float16 in a quantized build, and top-k is the same on
    the logits. The output keeps its name (an Identity of the logits)."""
    from onnx import helper

    if len(model.graph.output) != 1:
        raise InputError(f"{path}: model.prepare is classifier-logits but the model has {len(model.graph.output)} "
                         "outputs; it applies to a classifier with one output: set model.prepare: none")
    out = model.graph.output[0]
    chain = final_softmax(model)
    if not chain:
        producer = next((n for n in model.graph.node if out.name in n.output), None)
        op = producer.op_type if producer is not None else "nothing"
        raise InputError(f"{path}: model.prepare is classifier-logits but output {out.name!r} comes from {op}, not a "
                         "Softmax; set model.prepare: none")
    logits = chain[-1].input[0]
    for node in chain:
        model.graph.node.remove(node)
    model.graph.node.append(helper.make_node("Identity", [logits], [out.name], name="rkdet/logits"))
    return model


def nhwc_input(model, path: Path):
    """Prepend a Transpose to an NHWC image input, so the model takes [N, 3, H, W] as rkdet feeds it (the
    toolkit takes NHWC uint8 on the board and transposes itself). The input keeps its name; its old
    consumers read the Transpose's output. A graph step of the prepared ONNX (its hash is fingerprinted)."""
    from onnx import helper

    graph_input = _graph_inputs(model)[0]
    dims = graph_input.type.tensor_type.shape.dim
    if len(dims) != 4 or not (dims[3].HasField("dim_value") and dims[3].dim_value == 3):
        raise InputError(f"{path}: model.input_layout is nhwc but input {graph_input.name!r} is {_dims(graph_input)}, "
                         "not [N, H, W, 3]; set model.input_layout: nchw")
    inner = f"{graph_input.name}/rkdet_nhwc"
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name == graph_input.name:
                node.input[i] = inner
    for out in model.graph.output:  # an input that is also an output (no real model): keep the graph valid
        if out.name == graph_input.name:
            raise InputError(f"{path}: input {graph_input.name!r} is also an output; model.input_layout cannot apply")
    n, h, w, c = (type(d)() for d in dims)
    n.CopyFrom(dims[0]), h.CopyFrom(dims[1]), w.CopyFrom(dims[2]), c.CopyFrom(dims[3])
    for d, src in zip(dims, (n, c, h, w)):
        d.CopyFrom(src)
    model.graph.node.insert(0, helper.make_node("Transpose", [graph_input.name], [inner], perm=[0, 2, 3, 1],
                                                name="rkdet/nhwc_input"))
    del model.graph.value_info[:]
    return model


def final_softmax(model) -> list:
    """The nodes from the single output back to a final Softmax through Identity nodes (as Paddle exports
    write them), output first; empty when the output does not come from a Softmax."""
    if len(model.graph.output) != 1:
        return []
    producer = {o: n for n in model.graph.node for o in n.output}
    chain, name = [], model.graph.output[0].name
    while (node := producer.get(name)) is not None and node.op_type == "Identity" and len(chain) < 8:
        chain.append(node)
        name = node.input[0]
    if node is None or node.op_type not in ("Softmax", "LogSoftmax"):
        return []
    return [*chain, node]


_VALUE_KEEPING = ("Identity", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze")  # move values, change none


def probability_outputs(model) -> set[str]:
    """The outputs whose values are probabilities in [0, 1]: made by a Softmax or Sigmoid, through nodes that
    only move values (Transpose, Reshape, Identity, ...); `rkdet init` declares their rules' `range`."""
    producer = {o: n for n in model.graph.node for o in n.output}
    found = set()
    for out in model.graph.output:
        name, hops = out.name, 0
        while (node := producer.get(name)) is not None and node.op_type in _VALUE_KEEPING and hops < 16:
            name, hops = node.input[0], hops + 1
        if node is not None and node.op_type in ("Softmax", "Sigmoid"):
            found.add(out.name)
    return found


def _metadata_imgsz(model) -> tuple[int, int] | None:
    """Ultralytics writes `imgsz` as "[H, W]" (or one number): the size the model was exported at."""
    import ast

    raw = next((p.value for p in model.metadata_props if p.key == "imgsz"), None)
    try:
        value = ast.literal_eval(raw) if raw else None
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    return None


def _shape_chain_reshapes(model) -> list[str]:
    """Reshape nodes whose target shape is computed from a Shape op (Shape -> Gather/Unsqueeze -> Concat):
    ONNX shape inference cannot follow that chain, so everything after it loses its static shape."""
    producer = {o: n for n in model.graph.node for o in n.output}

    def from_shape(name: str, depth: int = 0) -> bool:
        node = producer.get(name)
        if node is None or depth > 6:
            return False
        if node.op_type == "Shape":
            return True
        return any(from_shape(i, depth + 1) for i in node.input if i)

    return [n.name or n.output[0] for n in model.graph.node
            if n.op_type == "Reshape" and len(n.input) > 1 and from_shape(n.input[1])]


# Ops through which a value computed from Shape stays a function of the input *shape* only.
_SHAPE_ARITHMETIC = {"Gather", "Concat", "Cast", "Unsqueeze", "Squeeze", "Slice", "Mul", "Add", "Sub", "Div",
                     "Floor", "Ceil", "ReduceProd", "Identity", "Constant", "Shape", "Range", "Equal", "Where"}


def _fold_shape_chains(model, input_name: str, shape: list[int]) -> list[str]:
    """Replace each Reshape target that is computed from Shape ops (and constants) only by its value at the
    static input shape, computed once by onnxruntime, so shape inference can follow the graph. Exact: such
    a target depends on the input's shape, never on its values. Returns the Reshape nodes folded."""
    from onnx import helper, numpy_helper

    producer = {o: n for n in model.graph.node for o in n.output}
    constants = {i.name for i in model.graph.initializer}
    memo: dict[str, bool] = {}

    def shape_only(name: str, depth: int = 0) -> bool:
        if name in constants or name == "":
            return True
        if name in memo:
            return memo[name]
        node = producer.get(name)
        ok = (node is not None and depth < 32 and node.op_type in _SHAPE_ARITHMETIC
              and (node.op_type == "Shape" or all(shape_only(i, depth + 1) for i in node.input)))
        memo[name] = ok
        return ok

    def via_shape(name: str, depth: int = 0) -> bool:
        node = producer.get(name)
        return node is not None and depth < 32 and (node.op_type == "Shape" or any(via_shape(i, depth + 1) for i in node.input))

    targets = [n for n in model.graph.node if n.op_type == "Reshape" and len(n.input) > 1
               and n.input[1] not in constants and via_shape(n.input[1]) and shape_only(n.input[1])]
    if not targets:
        return []
    import numpy as np
    import onnxruntime as ort

    probe = type(model)()
    probe.CopyFrom(model)
    for name in {t.input[1] for t in targets}:
        probe.graph.output.append(helper.make_tensor_value_info(name, onnx_int64(), None))
    try:
        session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
        wanted = [t.input[1] for t in targets]
        values = dict(zip(wanted, session.run(wanted, {input_name: np.zeros(shape, np.float32)})))
    except Exception:  # reported below as a shape inference cannot follow, with onnxruntime's view
        return []
    for i, node in enumerate(targets):
        folded = f"rkdet/reshape_target/{i}"
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(values[node.input[1]], np.int64), folded))
        node.input[1] = folded
    _drop_dead_nodes(model)
    return [n.name or n.output[0] for n in targets]


def onnx_int64() -> int:
    import onnx

    return onnx.TensorProto.INT64


def _drop_dead_nodes(model) -> None:
    """Remove nodes whose outputs no graph output needs (the Shape chains left behind by folding)."""
    needed = {o.name for o in model.graph.output}
    keep = []
    for node in reversed(list(model.graph.node)):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(i for i in node.input if i)
    keep.reverse()
    del model.graph.node[:]
    model.graph.node.extend(keep)
    used = {i for n in keep for i in n.input}
    kept_inits = [t for t in model.graph.initializer if t.name in used or t.name in {o.name for o in model.graph.output}]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept_inits)


def _onnxruntime_shapes(model, input_name: str, shape: list[int]) -> dict[str, list[int]] | str:
    """What onnxruntime computes for a zero input of `shape` (or why it cannot)."""
    import numpy as np
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        outs = session.run(None, {input_name: np.zeros(shape, np.float32)})
    except Exception as exc:  # onnxruntime raises its own exception types
        return f"onnxruntime cannot run it either ({str(exc).strip().splitlines()[0][:200]})"
    return {o.name: list(a.shape) for o, a in zip(session.get_outputs(), outs)}


def _dynamic_output_error(path: Path, model, name: str, dims: list, input_name: str, shape: list[int]) -> InputError:
    reshapes = _shape_chain_reshapes(model)
    ort_view = _onnxruntime_shapes(model, input_name, shape)
    seen = (f"onnxruntime computes {', '.join(f'{k} {v}' for k, v in ort_view.items())} for input {shape}"
            if isinstance(ort_view, dict) else ort_view)
    if reshapes:
        return InputError(
            f"{path}: output {name!r} has no static shape after ONNX shape inference ({dims}): Reshape "
            f"{reshapes[0]!r}{f' (+{len(reshapes) - 1} more)' if len(reshapes) > 1 else ''} takes its shape from a "
            f"Shape->Concat chain that also depends on values, which shape inference cannot follow; {seen}; fix: "
            "cut the head before it (model.prepare: yolov8-split-head for a YOLOv8) or re-export without dynamic "
            "axes at that size")
    return InputError(
        f"{path}: output {name!r} has a dynamic shape after shape inference ({dims}): the graph computes it from "
        f"values, not from the input shape; {seen}; fix: cut the head before that part (model.prepare) or give the "
        "full input shape (model.inputs)")


def prepare_model(section: ModelSection) -> PreparedModel:
    """Check the ONNX, apply the configured preparation and static shapes, infer and verify shapes."""
    import onnx
    from onnx import shape_inference

    path = Path(section.onnx)
    model = _load(path)
    opset = _opset(model)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise InputError(f"{path}: opset {opset} is outside what rknn-toolkit2 supports ({MIN_OPSET}..{MAX_OPSET}); "
                         "re-export with a supported opset")
    inputs = _graph_inputs(model)
    if len(inputs) != 1:
        raise InputError(f"{path}: rkdet supports single-input image models; this one has {len(inputs)} inputs")
    stock_head = _has_stock_head(model)
    imgsz = _metadata_imgsz(model)
    if section.prepare == "yolov8-split-head":
        model = _split_head(model, path)
        stock_head = False
    elif section.prepare == "classifier-logits":
        model = _classifier_logits(model, path)
    if section.input_layout == "nhwc":
        model = nhwc_input(model, path)
    graph_input = _graph_inputs(model)[0]
    dims = graph_input.type.tensor_type.shape.dim
    if section.inputs:
        shape = section.inputs.get(graph_input.name)
        if shape is None:
            raise InputError(f"{path}: model.inputs has no entry for input {graph_input.name!r}; "
                             f"add {graph_input.name}: [1, 3, H, W]")
        if len(shape) != len(dims):
            raise InputError(f"{path}: model.inputs.{graph_input.name} has {len(shape)} dims, the model has {len(dims)}")
        for d, v in zip(dims, shape):
            d.Clear()
            d.dim_value = int(v)
    if section.input_size is not None:
        if len(dims) != 4:
            raise InputError(f"{path}: model.input_size needs a 4-D NCHW input; {graph_input.name} has {len(dims)} dims: "
                             f"give the full shape with model.inputs: {{{graph_input.name}: [...]}}")
        dims[2].Clear(), dims[3].Clear()
        dims[2].dim_value, dims[3].dim_value = section.input_size
    shape_now = _dims(graph_input)
    if any(not isinstance(d, int) or d <= 0 for d in shape_now):
        hw = "H, W" if section.input_size is None else ", ".join(map(str, section.input_size))
        also = (" (model.input_size sets only H and W; the other dims are dynamic too)"
                if section.input_size is not None else "")
        raise InputError(f"{path}: input {graph_input.name!r} has dynamic shape {shape_now}{also}; "
                         f"set model.inputs: {{{graph_input.name}: [1, 3, {hw}]}} in the config")
    if len(shape_now) != 4 or shape_now[1] != 3 or shape_now[0] != 1:
        nhwc = len(shape_now) == 4 and shape_now[3] == 3 and section.input_layout == "nchw"
        raise InputError(f"{path}: input {graph_input.name!r} has shape {shape_now}; rkdet expects [1, 3, H, W]"
                         + ("; an NHWC input: set model.input_layout: nhwc" if nhwc else ""))
    if section.input_size is not None or section.inputs:
        del model.graph.value_info[:]
        for out in model.graph.output:
            out.type.tensor_type.ClearField("shape")
    folded = _fold_shape_chains(model, graph_input.name, shape_now)
    keys = " / ".join(k for k, v in (("model.input_size", section.input_size), ("model.inputs", section.inputs)) if v)
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else exc.__class__.__name__
        raise InputError(f"{path}: the graph does not take the requested input shape {shape_now}: {first}; "
                         f"{'change or drop ' + keys if keys else 'give the shape with model.inputs'}, or export the "
                         "model at that size") from None
    out_shapes = []
    for out in inferred.graph.output:
        d = _dims(out) if out.type.tensor_type.HasField("shape") else ["?"]
        if any(not isinstance(x, int) or x <= 0 for x in d):
            raise _dynamic_output_error(path, model, out.name, d, graph_input.name, shape_now)
        out_shapes.append(tuple(int(x) for x in d))
    model = inferred
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else exc.__class__.__name__
        raise InputError(f"{path}: the ONNX checker rejects the graph at input shape {shape_now}: {first}") from None
    warnings = []
    if folded:
        warnings.append(f"fixed {len(folded)} Reshape target(s) computed from Shape ops (a dynamic-axes export; first "
                        f"{folded[0]!r}) to their values at input {shape_now}, so the graph has static shapes")
    if section.input_layout == "nhwc":
        warnings.append(f"model.input_layout nhwc: a Transpose prepended to input {graph_input.name!r}, which now "
                        f"takes {shape_now} (NCHW, as rkdet feeds it); the prepared ONNX's hash records the step")
    if imgsz is not None and tuple(shape_now[2:]) != imgsz:
        given = f"model.input_size {list(section.input_size)}" if section.input_size else f"input shape {shape_now}"
        warnings.append(f"{given} differs from the model's metadata imgsz {list(imgsz)} (the size it was exported "
                        "at); accuracy may change: check the decision gate, or use the metadata size")
    return PreparedModel(
        onnx_bytes=model.SerializeToString(deterministic=True),
        input_name=graph_input.name,
        input_shape_nchw=tuple(int(x) for x in shape_now),  # type: ignore[arg-type]
        output_names=tuple(o.name for o in model.graph.output),
        output_shapes=tuple(out_shapes),
        prepare=section.prepare,
        opset=opset,
        stock_yolov8_head=stock_head,
        warnings=tuple(warnings),
    )
