"""`rkdet init`: read an ONNX model and write a commented config for it, every guess marked `# CHECK`.

Why: getting a config right for one's own model took many attempts (input shape, dynamic axes, head
preparation, normalisation, calibration folder). The model itself says most of it: its inputs (fixed or
dynamic), outputs, opset and, for Ultralytics exports, `imgsz`, `names`, `stride` and `task` metadata. The
layouts rkdet handles are recognised here (stock YOLOv8 single output, split head, rknn_model_zoo's
9-output head with score_sum, classifiers) with the preparation each needs and why; what only the user
can know (calibration images, target board, normalisation of a non-Ultralytics model) is marked `# CHECK`.
The written config is validated by loading it before it is renamed into place.
"""

from __future__ import annotations

import ast
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rkdet.errors import InputError
from rkdet.records.io import check_may_write, write_atomic

DEFAULT_SIDE = 640  # a dynamic H/W with no imgsz metadata: the usual YOLOv8 export size, marked CHECK


@dataclass
class ModelFacts:
    """What the ONNX says about itself, and what rkdet decides from it (with the reasons)."""

    path: Path
    opset: int
    input_name: str
    input_dims: list[int | str]
    layout: str  # "NCHW" | "NHWC" | "?"
    outputs: list[tuple[str, list[int | str]]]
    metadata: dict[str, str]
    ultralytics: bool
    imgsz: tuple[int, int] | None
    names: dict[int, str]
    kind: str  # yolov8-stock | yolov8-split | yolov8-split-score-sum | classifier | unknown
    kind_detail: str
    prepare: str
    prepare_reason: str
    shape: list[int]  # the static NCHW input shape to build with
    shape_source: str
    shape_check: bool  # the shape is a guess
    needs_inputs: bool  # the ONNX input has dynamic dims: model.inputs must give the full shape
    notes: list[str] = field(default_factory=list)
    producer: str = ""  # the ONNX producer_name (e.g. "PaddlePaddle" for a Paddle2ONNX export, "pytorch")
    names_source: str = "metadata names"  # which metadata key the class names came from
    decision: list[tuple[str, str, str]] = field(default_factory=list)  # proposed rules: (output, rule, why)

    @property
    def paddle(self) -> bool:
        """A PaddlePaddle export (Paddle2ONNX writes producer_name "PaddlePaddle")."""
        return self.producer.lower().startswith("paddle")


def _names(raw: str | None) -> dict[int, str]:
    try:
        value = ast.literal_eval(raw) if raw else {}
    except (ValueError, SyntaxError):
        return {}
    if isinstance(value, dict):
        return {int(k): str(v) for k, v in value.items() if isinstance(k, int)}
    if isinstance(value, (list, tuple)):
        return dict(enumerate(map(str, value)))
    return {}


def _character(raw: str | None) -> dict[int, str]:
    """Paddle-style class names: the `character` metadata key (PaddleOCR/RapidOCR write the label list
    there), one name per line, or a Python/JSON list."""
    if not raw:
        return {}
    if raw.lstrip().startswith(("[", "(", "{")):
        parsed = _names(raw)
        if parsed:
            return parsed
    lines = [ln.strip() for ln in raw.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return dict(enumerate(lines)) if lines and all(lines) else {}


def _floats(raw: str | None) -> tuple[float, float, float] | None:
    """Three numbers from a metadata value ("[0.485, 0.456, 0.406]" or "0.485,0.456,0.406")."""
    if not raw:
        return None
    try:
        value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
        value = [v for v in re.split(r"[,\s]+", raw.strip()) if v]
    try:
        numbers = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        return None
    return numbers if len(numbers) == 3 else None  # type: ignore[return-value]


@dataclass(frozen=True)
class Guess:
    """One preprocess value init writes, and where it comes from (said in its comment)."""

    value: str
    source: str
    check: bool = True


IMAGENET_MEAN = (123.675, 116.28, 103.53)  # 0.485, 0.456, 0.406 x 255
IMAGENET_STD = (58.395, 57.12, 57.375)  # 0.229, 0.224, 0.225 x 255
PADDLE_CROP_RATIO = 256 / 224  # PaddleClas's eval: ResizeImage resize_short 256, CropImage 224


def _fmt3(values: tuple[float, ...]) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def preprocess_guesses(facts: ModelFacts) -> dict[str, Guess]:
    """channel_order, resize (+ short_side), mean, std: from the metadata keys, else the producer's
    conventions (Ultralytics, PaddlePaddle), else rkdet's defaults; each with its source."""
    md, prod = facts.metadata, f"producer_name {facts.producer!r}"
    g: dict[str, Guess] = {}
    if facts.ultralytics:
        resize = "stretch" if md.get("task") == "classify" else "letterbox"
        return {"channel_order": Guess("rgb", "Ultralytics metadata (author/stride): Ultralytics models take RGB", False),
                "resize": Guess(resize, "Ultralytics metadata task: " + ("classify resizes the image" if resize ==
                                "stretch" else "detect letterboxes"), False),
                "mean": Guess("[0, 0, 0]", "Ultralytics: pixels / 255", False),
                "std": Guess("[255, 255, 255]", "Ultralytics: pixels / 255", False)}
    classifier = facts.kind == "classifier"
    if facts.paddle:
        g["channel_order"] = Guess("bgr", f"a guess from {prod}: Paddle deploy pipelines read images with OpenCV "
                                          "(BGR); check the model's own preprocessing")
        if classifier:
            side = round(max(facts.shape[2:]) * PADDLE_CROP_RATIO)
            g["resize"] = Guess("center-crop", f"a guess from {prod} and a classifier layout: PaddleClas's eval "
                                               "resizes the short side (256 for 224) and crops the centre")
            g["short_side"] = Guess(str(side), f"{max(facts.shape[2:])} x 256/224, PaddleClas's ratio")
        else:
            g["resize"] = Guess("stretch", f"a guess from {prod}: PaddleDetection's PicoDet/PP-YOLOE resize "
                                           "to the input size without keeping the aspect (keep_ratio: false)")
        g["mean"] = Guess(_fmt3(IMAGENET_MEAN), f"a guess from {prod}: Paddle's NormalizeImage default, ImageNet "
                                                "mean x 255, applied to the channels as fed (reverse it if the "
                                                "model's own code normalises RGB)")
        g["std"] = Guess(_fmt3(IMAGENET_STD), f"a guess from {prod}: ImageNet std x 255")
    else:
        g["channel_order"] = Guess("rgb", "rkdet's default: nothing in the model says; the channel order it was "
                                          "trained with")
        g["resize"] = Guess("letterbox", "rkdet's default: letterbox (keep aspect, pad), stretch or center-crop")
        g["mean"] = Guess("[0, 0, 0]", "rkdet's default: the model's normalisation, on 0..255 pixels")
        g["std"] = Guess("[255, 255, 255]", f"rkdet's default (ImageNet: mean {_fmt3(IMAGENET_MEAN)}, "
                                            f"std {_fmt3(IMAGENET_STD)})")
    for key in ("mean", "std"):  # explicit metadata keys win over any convention
        values = _floats(md.get(key))
        if values is not None:
            scaled = tuple(v * 255 for v in values) if all(abs(v) <= 1 for v in values) else values
            note = " x 255 (given on 0..1)" if scaled is not values else ""
            g[key] = Guess(_fmt3(scaled), f"the model's metadata key {key!r} {md[key]!r}{note}, in the model's "
                                          "channel order")
    order = (md.get("channel_order") or md.get("color_format") or "").strip().lower()
    if order in ("rgb", "bgr"):
        g["channel_order"] = Guess(order, f"the model's metadata key "
                                          f"{'channel_order' if 'channel_order' in md else 'color_format'} {order!r}")
    if md.get("keep_ratio", "").strip().lower() in ("false", "0") and "resize" in g:
        g["resize"] = Guess("stretch", "the model's metadata key 'keep_ratio' false")
    short = md.get("resize_short", "").strip()
    if short.isdigit() and int(short) >= max(facts.shape[2:]):
        g["resize"] = Guess("center-crop", "the model's metadata key 'resize_short' (resize the short side, crop the "
                                           "centre)")
        g["short_side"] = Guess(short, "the model's metadata key 'resize_short'")
    elif g["resize"].value != "center-crop":
        g.pop("short_side", None)
    return g


def _static_output_shapes(model, input_name: str, shape: list[int]) -> list[tuple[str, list[int | str]]]:
    """Output shapes with the input made static (shape inference only, no graph change kept)."""
    import onnx
    from onnx import shape_inference

    from rkdet.convert.onnx_graph import _dims, _graph_inputs

    trial = onnx.ModelProto()
    trial.CopyFrom(model)
    graph_input = next(i for i in _graph_inputs(trial) if i.name == input_name)
    for d, v in zip(graph_input.type.tensor_type.shape.dim, shape):
        d.Clear()
        d.dim_value = v
    for out in trial.graph.output:
        out.type.tensor_type.ClearField("shape")
    try:
        trial = shape_inference.infer_shapes(trial)
    except Exception:  # a graph that does not take the shape: reported by convert with the key to change
        return [(o.name, _dims(o)) for o in model.graph.output]
    return [(o.name, _dims(o) if o.type.tensor_type.HasField("shape") else ["?"]) for o in trial.graph.output]


def inspect(path: Path) -> ModelFacts:
    """Read the ONNX and decide the config values, each with where it came from."""
    from rkdet.convert.onnx_graph import (
        _dims,
        _graph_inputs,
        _has_stock_head,
        _load,
        _metadata_imgsz,
        _opset,
        final_softmax,
        probability_outputs,
    )
    from rkdet.decode import detect_layout
    from rkdet.decode.tasks import classification

    model = _load(path)
    inputs = _graph_inputs(model)
    if len(inputs) != 1:
        raise InputError(f"{path}: rkdet handles single-input image models; this one has {len(inputs)} inputs "
                         f"({', '.join(i.name for i in inputs)})")
    graph_input = inputs[0]
    dims = _dims(graph_input)
    metadata = {p.key: p.value for p in model.metadata_props}
    ultralytics = metadata.get("author", "").lower().startswith("ultralytics") or "stride" in metadata
    imgsz = _metadata_imgsz(model)
    if len(dims) != 4:
        raise InputError(f"{path}: input {graph_input.name!r} has {len(dims)} dims {dims}; rkdet handles image "
                         "models with one [1, 3, H, W] input")
    layout = "NCHW" if dims[1] == 3 else "NHWC" if dims[3] == 3 else "?"
    dynamic = [i for i, d in enumerate(dims) if not isinstance(d, int) or d <= 0]
    hw_at = (1, 2) if layout == "NHWC" else (2, 3)  # an NHWC input: rkdet prepends a Transpose (model.input_layout)
    hw_static = hw_at[0] not in dynamic and hw_at[1] not in dynamic
    if hw_static:
        h, w = int(dims[hw_at[0]]), int(dims[hw_at[1]])
        source, check = "the model's fixed input dims", False
    elif imgsz:
        (h, w), source, check = imgsz, "the model's metadata imgsz (its input H/W are dynamic)", False
    else:
        h = w = DEFAULT_SIDE
        source, check = "a guess: the input H/W are dynamic and there is no imgsz metadata", True
    shape = [1, 3, h, w]
    notes = []
    if 0 in dynamic:
        notes.append("dynamic batch: built with batch 1")
    out_shapes = [(o.name, _dims(o)) for o in model.graph.output]
    if dynamic or any(not isinstance(d, int) or d <= 0 for _, s in out_shapes for d in s):
        out_shapes = _static_output_shapes(model, graph_input.name, [1, h, w, 3] if layout == "NHWC" else shape)
    names, names_source = _names(metadata.get("names")), "metadata names"
    if not names and metadata.get("character"):
        names, names_source = _character(metadata.get("character")), "metadata character (Paddle-style)"
    facts = ModelFacts(path=path, opset=_opset(model), input_name=graph_input.name, input_dims=dims, layout=layout,
                       outputs=out_shapes, metadata=metadata, ultralytics=ultralytics, imgsz=imgsz,
                       names=names, kind="unknown", kind_detail="", prepare="none",
                       prepare_reason="", shape=shape, shape_source=source, shape_check=check,
                       needs_inputs=bool(dynamic), notes=notes, producer=model.producer_name or "",
                       names_source=names_source)
    if layout == "?":
        raise InputError(f"{path}: input {graph_input.name!r} is {dims}, neither NCHW nor NHWC with 3 channels; rkdet "
                         "feeds [1, 3, H, W] images (model.input_layout: nhwc takes [1, H, W, 3])")
    declared = [(o.name, _dims(o)) for o in model.graph.output]
    if 0 in dynamic and all(len(s) >= 2 and all(isinstance(d, int) and d > 0 for d in s[1:]) for _, s in declared):
        out_shapes = [(n, [1, *s[1:]]) for n, s in declared]  # only the batch is dynamic: it is 1
    static_outs = [(n, tuple(int(d) for d in s)) for n, s in out_shapes
                   if all(isinstance(d, int) and d > 0 for d in s)]
    if _has_stock_head(model):
        facts.kind, facts.prepare = "yolov8-stock", "yolov8-split-head"
        facts.kind_detail = "stock Ultralytics YOLOv8 head (one output [1, 4+nc, N])"
        facts.prepare_reason = ("cut at the six head convs: rknn-toolkit2 2.5.0 crashes on the stock head, its "
                                "[1,4+nc,8400] tail overflows the NPU's 13-bit register fields (REGTASK) and INT8 "
                                "of the single output zeroes every class score (boxes and scores share one scale)")
    elif len(static_outs) == len(out_shapes) and static_outs:
        layout_found = detect_layout(static_outs)
        if layout_found.kind == "yolov8-split":
            score_sum = any(b.score_sum for b in layout_found.branches)
            facts.kind = "yolov8-split-score-sum" if score_sum else "yolov8-split"
            facts.kind_detail = layout_found.detail + (" (rknn_model_zoo layout)" if score_sum else "")
            facts.prepare_reason = "already split per stride: nothing to cut"
        elif layout_found.kind in classification.TASK.kinds:  # a classifier (rkdet/decode/tasks/classification.py)
            facts.kind, facts.kind_detail = "classifier", layout_found.detail
            if final_softmax(model):
                facts.prepare = "classifier-logits"
                facts.prepare_reason = ("drop the final Softmax: rknn-toolkit2 keeps it in float16 in a quantized "
                                        "build, and the top-k is the same on the logits")
            else:
                facts.prepare_reason = "ends in logits: nothing to cut"
        elif layout_found.kind == "yolov8-single":
            facts.kind, facts.kind_detail = "yolov8-single-unnamed", layout_found.detail
            facts.prepare_reason = ("a YOLOv8-like single output without the Ultralytics node names: rkdet cannot "
                                    "cut it; INT8 may zero its class scores (the fidelity gate will say)")
    if facts.kind == "unknown":
        facts.kind_detail = "no layout rkdet decodes: the build is judged on numeric gates only"
        facts.prepare_reason = "nothing rkdet knows to prepare"
        facts.decision = propose_decision(static_outs, probability_outputs(model))
        if facts.decision:
            facts.kind_detail = ("no layout rkdet decodes: a `decision:` section is proposed below (# CHECK it "
                                 "against your app's rule), else the build is judged on numeric gates only")
    return facts


def propose_decision(outputs: list[tuple[str, tuple[int, ...]]],
                     probabilities: frozenset[str] | set[str] = frozenset()) -> list[tuple[str, str, str]]:
    """A guess at the app's rule per output (output, YAML flow mapping, why), for `rkdet init` to propose
    marked `# CHECK`: a score vector [1, C] -> argmax (C = 2: threshold on channel 1), a map [1, C, H, W]
    or [1, H, W, C] -> per-pixel argmax (C = 2 or 1: threshold); box regression (a name saying box, bbox,
    reg, loc or landmark) and other shapes get no rule (their numeric gates judge them). A threshold on
    one of `probabilities` (a Softmax or Sigmoid output) declares `range: [0, 1]`, which bounds its
    near-tie band (rkdet/decode/tasks/declared.py)."""
    proposed = []
    for name, shape in outputs:
        if re.search(r"box|reg|loc|landmark", name, re.IGNORECASE):
            continue
        span, span_why = (", range: [0, 1]", " (a Softmax/Sigmoid output: values in [0, 1])") \
            if name in probabilities else ("", "")
        if len(shape) == 2 and shape[0] == 1 and shape[1] >= 2:
            if shape[1] == 2:
                proposed.append((name, f"{{rule: threshold, channel: 1, threshold: 0.5{span}}}",
                                 f"two scores: yes if channel 1 > 0.5 (your app's threshold?){span_why}"))
            else:
                proposed.append((name, "{rule: argmax, top_k: 1}", f"{shape[1]} scores: the top-1 class"))
        elif len(shape) == 4 and shape[0] == 1:
            axis = -1 if shape[3] < shape[1] and shape[3] <= 4 else 1
            channels = shape[axis]
            what = f"a map {list(shape)}, channels {'last' if axis == -1 else 'first'}"
            if channels <= 2:
                proposed.append((name, f"{{rule: pixel-threshold, axis: {axis}, channel: {channels - 1}, threshold: 0.5"
                                       f"{span}}}", f"{what}: yes per pixel if channel {channels - 1} > 0.5{span_why}"))
            else:
                proposed.append((name, f"{{rule: pixel-argmax, axis: {axis}}}", f"{what}: the label per pixel"))
    return proposed


def _yaml_str(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_./-]+", value) else "'" + value.replace("'", "''") + "'"


def render(facts: ModelFacts, config_path: Path) -> str:
    """The commented YAML config (paths relative to the config file)."""
    onnx_rel = os.path.relpath(facts.path.resolve(), config_path.resolve().parent)
    if onnx_rel.startswith(os.path.join("..", "..")):  # far away: an absolute path reads better
        onnx_rel = str(facts.path.resolve())
    name = re.sub(r"[^A-Za-z0-9._-]", "-", facts.path.stem).strip("-.") or "model"
    name = name if re.match(r"[A-Za-z0-9]", name) else f"m{name}"
    h, w = facts.shape[2], facts.shape[3]
    outs = ", ".join(f"{n} {s}" for n, s in facts.outputs)
    lines = [
        f"# rkdet config written by `rkdet init --onnx {facts.path.name}`: every value below was read from the model",
        "# or chosen for it; lines marked `# CHECK` are guesses or decisions only you can make.",
        "# Then: put images in the calibration and golden folders, run `rkdet convert --config <this file>`,",
        "# read the fidelity line it prints, and deploy (README: \"Your own model\").",
        f"# Model: opset {facts.opset}, input {facts.input_name} {facts.input_dims}, outputs: {outs}",
        f"# Recognised: {facts.kind} - {facts.kind_detail}",
    ]
    if facts.metadata.get("task"):
        lines.append(f"# Metadata: task {facts.metadata['task']}, stride {facts.metadata.get('stride', '?')}, "
                     f"imgsz {facts.metadata.get('imgsz', '?')}")
    if facts.names:
        shown = ", ".join(f"{k} {v}" for k, v in sorted(facts.names.items())[:40])
        more = f", ... ({len(facts.names)} in all)" if len(facts.names) > 40 else ""
        lines.append(f"# Classes ({facts.names_source}; rkdet reports class ids): {shown}{more}")
    elif facts.kind != "unknown":
        lines.append("# Classes: no names in the metadata  # CHECK: keep your class list next to this file")
    lines += [f"name: {name}", "", "model:", f"  onnx: {_yaml_str(onnx_rel)}"]
    lines.append(f"  prepare: {facts.prepare}   # {facts.prepare_reason}")
    if facts.layout == "NHWC":
        lines.append(f"  input_layout: nhwc      # input {facts.input_name} is {facts.input_dims} (NHWC, e.g. a Keras/TF "
                     "export): rkdet prepends a Transpose, a step the prepared ONNX's hash records; below, shapes "
                     "are the NCHW it then takes")
    shape_note = f"from {facts.shape_source}" + (f"; {'; '.join(facts.notes)}" if facts.notes else "")
    check = "  # CHECK: the size you will feed on the board" if facts.shape_check else ""
    if facts.needs_inputs:
        lines.append(f"  inputs:                 # the ONNX input has dynamic dims: the full static shape, {shape_note}")
        lines.append(f"    {_yaml_str(facts.input_name)}: [1, 3, {h}, {w}]{check}")
    else:
        lines.append(f"  # input {facts.input_name} is fixed at [1, 3, {h}, {w}] ({shape_note}); to build at another "
                     "size set model.input_size: [H, W] (fully convolutional graphs only)")
    if facts.imgsz and tuple(facts.shape[2:]) != facts.imgsz:
        lines.append(f"  # note: the metadata imgsz {list(facts.imgsz)} differs from the input dims")
    lines += ["", "target:", "  platforms: [rk3588]           # CHECK: your board's SoC (rk3562 rk3566 rk3568 rk3576 "
              "rk3588 rv1126b; rv1126 needs target.toolkit1_python)", ""]
    lines.append("preprocess:  # mean/std apply per channel in the model's channel order (after channel_order)")
    if facts.producer:
        lines.append(f"  # the ONNX producer_name is {facts.producer!r}")
    for key, guess in preprocess_guesses(facts).items():
        entry = f"  {key}: {guess.value}"
        lines.append(f"{entry}{' ' * max(1, 32 - len(entry))}# {'CHECK: ' if guess.check else ''}{guess.source}")
        if key == "resize":
            lines.append("  pad_value: 114")
    lines += ["", "quantize:", "  enabled: true", "  dtype: w8a8", "  algorithm: normal",
              "  dataset: calibration           # CHECK: fill with 20-200 images like the ones the model will see",
              "  force_fp16: false", "",
              "golden:",
              "  inputs: golden                 # CHECK: a few held-out images (not in calibration) the model "
              "decides something on", "",
              "run:",
              "  # NPU core 0, not auto: rknn_api.h documents RKNN_NPU_CORE_AUTO as \"run on NPU core randomly\", so",
              "  # a first proof runs where it can be repeated (every NPU has core 0). `0,1,2,0_1_2` sweeps masks.",
              "  core_mask: \"0\"", "",
              "# fidelity: the defaults gate on decision agreement with ONNX FP32 (`rkdet config show` lists them)", ""]
    if facts.decision:
        lines += ["decision:  # CHECK: the rule your app applies to each output (rkdet judges what the app decides);",
                  "  outputs:  # rules: argmax, threshold, pixel-argmax, pixel-threshold (README: Configuration)"]
        lines += [f"    {_yaml_str(n)}: {rule}  # CHECK: {why}" for n, rule, why in facts.decision]
        ruled = {n for n, _, _ in facts.decision}
        lines += [f"    # {n} {s}: no rule proposed (numeric gates judge it; add your app's if it decides on it)"
                  for n, s in facts.outputs if n not in ruled]
        lines.append("")
    return "\n".join(lines)


def write_config(onnx_path: Path, out: Path, force: bool = False) -> tuple[Path, ModelFacts]:
    """Inspect, render, validate (load_config) and write atomically; create the two image folders."""
    from rkdet.config import load_config

    if out.exists() and not force:
        raise InputError(f"{out}: already exists; choose another --out or pass --force to replace it")
    check_may_write(out, "config")  # the one rule (rkdet.records.io): never through a symlink/FIFO, a writable folder
    if not onnx_path.is_file():
        raise InputError(f"{onnx_path}: --onnx model not found; pass an existing .onnx file")
    facts = inspect(onnx_path)
    text = render(facts, out)
    # the template must always be a valid config (a bug here is ours, not the user's): validated from a
    # scratch copy in the same folder (paths resolve relative to it), then written by the one atomic writer
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", prefix=f".{out.name}.", suffix=".check.tmp",
                                     dir=out.parent) as scratch:
        scratch.write(text)
        scratch.flush()
        load_config(scratch.name)
    write_atomic(str(out), text)
    for folder in ("calibration", "golden"):
        try:
            (out.parent / folder).mkdir(exist_ok=True)
        except OSError as exc:
            raise InputError(f"{out.parent / folder}: cannot create the image folder ({exc.strerror}); create it "
                             "yourself or choose another --out") from None
    return out, facts
