"""The rkdet YAML config: schema, loading, validation and resolved defaults.

Why a strict schema: a determinism claim is only as good as the record of what was asked for. So every
key is known (unknown keys are rejected with a "did you mean" hint), every rknn-toolkit2 option that can
change the result has an explicit rkdet default (never the toolkit's), paths are resolved relative to the
config file, and `resolved_dict()` is the canonical form the manifest records (and hashes, without
machine paths).
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rkdet import socs
from rkdet.choices import BACKENDS, CORE_MASKS
from rkdet.errors import ConfigError
from rkdet.records.resolved_config import FILE as RESOLVED_CONFIG_FILE
from rkdet.tolerance import Tolerance

if TYPE_CHECKING:
    from rkdet.records.build import BuildRecord

# What --config means when it is not given: relative to the current folder (a source checkout).
DEFAULT_CONFIG = Path("configs/yolov8.yaml")

# Platforms rknn-toolkit2 2.5.0 accepts, and the one it rejects (legacy RKNN-Toolkit 1.x only).
TOOLKIT2_PLATFORMS = ("rk3562", "rk3566", "rk3568", "rk3576", "rk3588", "rv1126b")
TOOLKIT1_PLATFORMS = socs.RKNPU1_SOCS  # ("rv1126", "rv1109"): RKNPU 1 SoCs (rkdet/socs.py)
PLATFORMS = TOOLKIT2_PLATFORMS + TOOLKIT1_PLATFORMS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Strict):
    """Where the ONNX is and how rkdet prepares its graph before the toolkit sees it."""

    onnx: Path
    # yolov8-split-head: cut a stock Ultralytics YOLOv8 at its six head convs; classifier-logits: drop a
    # final Softmax (the toolkit keeps it in float16; top-k is the same on the logits).
    prepare: Literal["none", "yolov8-split-head", "classifier-logits"] = "none"
    input_size: Optional[tuple[int, int]] = None  # (H, W) to re-shape a fully convolutional graph to
    inputs: Optional[dict[str, list[int]]] = None  # static NCHW shapes for ONNX with dynamic dims
    # nhwc: the ONNX input is [N, H, W, 3] (a Keras/TF export); rkdet prepends a Transpose so the prepared
    # model takes [N, 3, H, W] (model.inputs then gives that NCHW shape)
    input_layout: Literal["nchw", "nhwc"] = "nchw"

    @field_validator("input_size")
    @classmethod
    def _positive_multiple_of_32(cls, v: Optional[tuple[int, int]]) -> Optional[tuple[int, int]]:
        if v is not None and any(d <= 0 or d % 32 for d in v):
            raise ValueError("each dimension must be a positive multiple of 32")
        return v

    @model_validator(mode="after")
    def _one_shape(self) -> "ModelSection":
        if self.input_size is not None and self.inputs:
            for name, shape in self.inputs.items():
                if len(shape) == 4 and tuple(shape[2:]) != tuple(self.input_size):
                    raise ValueError(f"model.input_size {list(self.input_size)} and model.inputs.{name} {shape} "
                                     "disagree; keep one of them (model.inputs gives the full shape)")
        return self


class TargetSection(_Strict):
    """Target platforms; each gets its own build folder."""

    platforms: list[str] = Field(default_factory=lambda: ["rk3588"], min_length=1)
    toolkit1_python: Optional[Path] = None  # a Python with RKNN-Toolkit 1.7.x, for rv1126/rv1109

    @field_validator("platforms")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        out = []
        for p in v:
            p = p.lower()
            if p not in PLATFORMS:
                raise ValueError(f"unknown platform {p!r}; allowed: {', '.join(PLATFORMS)}")
            out.append(p)
        if len(set(out)) != len(out):
            raise ValueError("platforms must not repeat")
        return out


class PreprocessSection(_Strict):
    """How an image becomes the uint8 NHWC tensor the board is fed (mean/std run on the NPU).

    `resize`: letterbox (keep aspect, centred, pad with pad_value), pad-right-bottom (keep aspect, the
    image at the top-left, the right and bottom padded with pad_value: PaddleOCR's text-line resize),
    stretch (to the input size), or center-crop (torchvision's standard eval transform: resize so the
    short side is `short_side`, then crop the input's HxW from the centre). mean/std are per channel in
    the model's channel order, i.e. after `channel_order` (for bgr, mean[0] is blue's)."""

    channel_order: Literal["rgb", "bgr"] = "rgb"
    resize: Literal["letterbox", "pad-right-bottom", "stretch", "center-crop"] = "letterbox"
    # center-crop: the short side after resizing (torchvision Resize(S)); None: the input's larger side
    # (the crop then spans the whole short side). Must be >= the input's larger side (no padding).
    short_side: Optional[int] = Field(None, ge=1, le=16384)
    pad_value: int = Field(114, ge=0, le=255)
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (255.0, 255.0, 255.0)
    interpolation: Literal["linear", "nearest", "area"] = "linear"

    @field_validator("std")
    @classmethod
    def _nonzero(cls, v: tuple[float, float, float]) -> tuple[float, float, float]:
        if any(s == 0 for s in v):
            raise ValueError("std values must be non-zero")
        return v

    @model_validator(mode="after")
    def _short_side_with_crop(self) -> "PreprocessSection":
        if self.short_side is not None and self.resize != "center-crop":
            raise ValueError(f"short_side goes with resize: center-crop (resize is {self.resize})")
        return self


class QuantizeSection(_Strict):
    """Static quantization from a fixed, ordered, hashed calibration set."""

    enabled: bool = True
    dtype: Literal["w8a8", "w8a16", "w16a16i", "w16a16i_dfp", "w4a16"] = "w8a8"
    algorithm: Literal["normal", "mmse", "kl_divergence"] = "normal"
    method: Literal["layer", "channel"] = "channel"
    dataset: Path
    max_images: Optional[int] = Field(None, ge=1)
    force_fp16: bool = False
    # Outputs allowed to stay float16 in a quantized build (the toolkit keeps a final Softmax float);
    # recorded in the manifest. Alternative: model.prepare: classifier-logits.
    float_outputs: list[str] = Field(default_factory=list)
    # Hybrid quantization (rknn-toolkit2 hybrid_quantization_step1/2): these RKNN layers (named as
    # `rkdet layers` names them: the tensor each outputs) run in float16, every other layer stays
    # quantized. Recorded in the manifest (`float_layers`); `rkdet convert --search` proposes them.
    float_layers: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _explicit_float(self) -> "QuantizeSection":
        if not self.enabled and not self.force_fp16:
            raise ValueError("enabled is false but force_fp16 is false: an unquantized build runs in float16; "
                             "say so explicitly with force_fp16: true")
        return self

    @field_validator("float_layers")
    @classmethod
    def _layer_names(cls, v: list[str]) -> list[str]:
        if any(not name.strip() for name in v):
            raise ValueError("a layer name is empty; name RKNN layers as `rkdet layers` prints them")
        if len(set(v)) != len(v):
            raise ValueError("layer names must not repeat")
        return v

    @model_validator(mode="after")
    def _hybrid_is_quantized(self) -> "QuantizeSection":
        if self.float_layers and (self.force_fp16 or not self.enabled):
            raise ValueError("float_layers is hybrid quantization of a quantized build; with force_fp16 (or "
                             "enabled: false) every layer is float already: remove one of them")
        return self


class ToolkitSection(_Strict):
    """Every rknn-toolkit2 `config()`/`build()` option that can change the result, pinned by rkdet.

    Defaults are rkdet's (e.g. optimization_level 0, not the toolkit's 3); none is left to the toolkit.
    """

    optimization_level: int = Field(0, ge=0, le=3)
    quantized_hybrid_level: int = Field(0, ge=0)
    quant_img_RGB2BGR: bool = False
    float_dtype: Literal["float16"] = "float16"
    custom_string: Optional[str] = None
    remove_weight: bool = False
    compress_weight: bool = False
    single_core_mode: bool = False
    model_pruning: bool = False
    quantize_weight: bool = False
    remove_reshape: bool = False
    sparse_infer: bool = False
    mini_rknn: bool = False
    enable_flash_attention: bool = False
    auto_hybrid: bool = False
    auto_hybrid_cos_thresh: float = 0.98
    memory_plan_strategy: Literal["BestFit"] = "BestFit"
    compute_order: Literal["WidthFirst", "DepthFirst"] = "WidthFirst"
    rknn_batch_size: Optional[int] = None
    # Build with this rknn-toolkit2 version in its own pinned environment (rkdet/convert/toolkit_env.py),
    # created on first use; None: the toolkit installed beside rkdet. Not in the build config hash: the
    # toolkit's version is fingerprinted as the toolkit's.
    version: Optional[str] = Field(None, pattern=r"^\d+\.\d+\.\d+$")
    # Toolkit log errors accepted by regex (searched in the `E RKNN` line text); recorded in the manifest.
    # Empty by default: any error-class line in toolkit.log fails the build (rkdet/convert/toolkit_log.py).
    accept_errors: list[str] = Field(default_factory=list)

    @field_validator("accept_errors")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regular expression ({exc})") from None
            if not pattern.strip():
                raise ValueError("an empty pattern would accept every error; name the message")
        return v

    @model_validator(mode="after")
    def _no_hybrid(self) -> "ToolkitSection":
        if self.auto_hybrid or self.quantized_hybrid_level:
            raise ValueError("automatic hybrid quantization is a silent float fallback; rkdet builds are fully "
                             "INT8, explicitly FP16 (quantize.force_fp16) or name their float16 layers "
                             "(quantize.float_layers)")
        return self


class GoldenSection(_Strict):
    """Held-out inputs whose exact fed tensors and reference outputs ship with the build."""

    inputs: Path
    max_images: Optional[int] = Field(None, ge=1)


def check_core_masks(text: str) -> str:
    """A core mask ("0_1_2") or a comma list of distinct ones ("0,1,2,0_1_2"), normalised (no spaces)."""
    masks = [m.strip() for m in str(text).split(",")]
    if any(m not in CORE_MASKS for m in masks) or len(set(masks)) != len(masks):
        raise ValueError(f"give one of {', '.join(CORE_MASKS)}, or distinct ones comma-separated (e.g. 0,1,2,0_1_2)")
    return ",".join(masks)


class RunSection(_Strict):
    """How the board runs the model: repeats, warmup, cores."""

    repeats: int = Field(10, ge=1)
    warmup: int = Field(2, ge=0)
    # one mask, or a comma list: each a cell of one pinned session (docs/FORMATS.md). Core 0 by default, not
    # auto: rknn_api.h documents RKNN_NPU_CORE_AUTO as "run on NPU core randomly"; every NPU has core 0
    core_mask: str = "0"
    contexts: int = Field(1, ge=1, le=16)  # > 1: that many runtime contexts in threads, checked against the sequential run
    backend: Literal[BACKENDS] = "rknnlite"  # type: ignore[valid-type]  # one tuple, rkdet.choices
    snapshot_every: int = Field(5, ge=1)
    cpu_affinity: Optional[list[int]] = None

    @field_validator("core_mask")
    @classmethod
    def _mask(cls, v: str) -> str:
        return check_core_masks(str(v))


class BoardSection(_Strict):
    """The board profile pin.sh applies (and restore.sh undoes)."""

    pin: bool = True
    cpu_governor: Literal["performance", "userspace"] = "performance"
    cpu_freq_khz: Optional[int] = None  # with userspace
    npu_freq_hz: Optional[int] = None  # None: the highest available OPP
    gpu_freq_hz: Optional[int] = None
    ddr_freq_hz: Optional[int] = None
    compaction_off: bool = True
    thp_never: bool = False
    cpuidle_deep_off: bool = False
    workdir: Optional[str] = None
    sudo: bool = False


class FidelitySection(_Strict):
    """Gates a build must pass: the quantized build (toolkit simulator) against ONNX FP32 on the golden inputs.

    Defaults come from rknn-toolkit2 2.5.0 INT8 builds of more than one model, never tuned to one: the
    shipped YOLOv8n DocLayNet (11 classes, 640, split head, 8 golden pages), rapidocr-onnxruntime 1.3.24's
    PP-OCR mobile v2.0 direction classifier (2 classes, 48x192, 16 text crops of the shipped pages; made by
    `rkdet init`, not shipped) and the tiny YOLOv8-layout, classifier, conv and score models of
    tests/convert/tiny_models.py. Each sits beyond what the faithful builds measure and short of what the
    broken ones measure (class-score collapse, a saturating score).
    """

    # Primary gate: decisions. Share of detections (YOLOv8) or golden inputs (classifier) that agree.
    # Measured: DocLayNet 147/152 = 0.967 (INT8 moves a few borderline boxes), tiny classifier and
    # split head 1.0 (2/2 and no detection); a collapsed score output 0.0.
    min_decision_agreement: float = Field(0.9, ge=0, le=1)
    match_iou: float = Field(0.5, gt=0, le=1)  # same detection: same class, IoU >= this (DocLayNet pairs: min 0.80)
    # |score delta| allowed: DocLayNet matched pairs reach 0.17 (agreement 0.941 at 0.10, 0.967 at 0.15);
    # OCR classifier probabilities move up to 0.14. Also the FP32 margin under which a classifier's top-k
    # swap is a near tie, not a decision change (OCR: 2 of 16 top-1 swaps, FP32 margins 0.10 and 0.002).
    score_tolerance: float = Field(0.15, ge=0, le=1)
    top_k: int = Field(1, ge=1)  # classifier: the same top-k classes, in order
    # Numeric gates, over the elements where FP32 carries signal; binding for outputs no decision covers.
    # Measured signal cosine: DocLayNet box 0.986..0.992, cls 0.971..0.983; tiny conv/classifier/split
    # head >= 0.9998; the OCR classifier's 2-element output reads 0.974 (probabilities) and -1 (logits,
    # near zero) with the same decisions: not binding where a decision gate covers the output.
    min_cosine: float = Field(0.98, ge=-1, le=1)  # whole outputs
    min_slice_cosine: float = Field(0.95, ge=-1, le=1)  # per slice (boxes / scores)
    noise_floor: float = Field(0.05, ge=0, lt=1)  # signal: |FP32| >= this share of the slice's largest |FP32|
    score_floor: float = Field(0.05, ge=0, lt=1)  # signal in a score slice: FP32 score >= this
    min_score_recall: float = Field(0.5, ge=0, le=1)  # of FP32 scores > 0.5, share kept > 0.25 (DocLayNet >= 0.996)
    # Saturation: quantized output pinned at its range while FP32 goes beyond it by more than this share
    # of the range. Measured: DocLayNet cls0 0.030, tiny models 0.0..0.064; the saturating tiny score 0.405.
    max_saturation: float = Field(0.1, ge=0)
    # `rkdet layers`: the first layer whose accumulated (entire) cosine vs float falls below this is where
    # the loss is located. Measured (rknn-toolkit2 2.5.0, rk3588): the default YOLOv8n build, which passes
    # the gates, has per-layer entire cosines down to 0.938 (a Split half, 8 golden pages; outputs >= 0.967);
    # its kl_divergence variant, which fails the gate, first drops below 0.90 at cls0 (0.898, where
    # the gate fails); tiny test models: a clean conv net >= 0.9999, the fragile one 0.20 at its Sub.
    # 0.90 keeps the passing build clean and names the failing ones (bench/results/layers.md).
    min_layer_cosine: float = Field(0.9, ge=-1, le=1)


class DecisionRule(_Strict):
    """The rule a user's app applies to one output (rkdet/decode/tasks/declared.py reads it).

    `axis` is the class/channel axis (1: NCHW or [1, C]; -1: channels last, e.g. a [1, H, W, 2] map).
    argmax / pixel-argmax: the label per position (a tie to the lower index; top_k for a vector);
    threshold / pixel-threshold: output[channel] > threshold per position; boxes: this output's scores
    [1, N, C] (class axis `axis`) with the box output `boxes` [1, N, 4], a detection per candidate whose
    best score > threshold. `range`: the values the thresholded output can take ([0, 1] for a softmax or
    sigmoid probability); it bounds the near-tie band around the threshold (declared.near_tie_band), and
    left out (raw logits: no bound known) the band is fidelity.score_tolerance either side, unbounded."""

    rule: Literal["argmax", "threshold", "pixel-argmax", "pixel-threshold", "boxes"]
    axis: int = 1
    channel: Optional[int] = Field(None, ge=0)
    threshold: Optional[float] = None
    top_k: int = Field(1, ge=1)
    boxes: Optional[str] = None  # rule boxes: the output with the candidates' boxes [1, N, 4] (x1, y1, x2, y2)
    range: Optional[tuple[float, float]] = None  # the output's value range: [0, 1] for probabilities

    @model_validator(mode="after")
    def _threshold_needs_its_channel(self) -> "DecisionRule":
        if self.rule.endswith("threshold") and (self.channel is None or self.threshold is None):
            raise ValueError(f"rule {self.rule} needs `channel` and `threshold` (the app's: output[channel] > threshold)")
        if self.rule == "boxes" and (self.boxes is None or self.threshold is None):
            raise ValueError("rule boxes needs `boxes` (the box output's name) and `threshold` (the app's score threshold)")
        if self.range is not None:
            low, high = self.range
            if self.threshold is None:
                raise ValueError(f"`range` bounds a threshold's near-tie band; rule {self.rule} has no threshold")
            if not low < self.threshold < high:
                raise ValueError(f"threshold {self.threshold:g} is not inside range [{low:g}, {high:g}]: the app "
                                 "would decide the same way on every value")
        return self


class DecisionSection(_Strict):
    """`decision:` the rules a user's app applies, per output name: the decision gate, `rkdet diff --config`
    and their verdicts judge what the app decides (docs/CONFIG.md)."""

    outputs: dict[str, DecisionRule] = Field(min_length=1)


class RkdetConfig(_Strict):
    """The whole config file."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    model: ModelSection
    target: TargetSection = TargetSection()
    preprocess: PreprocessSection = PreprocessSection()
    quantize: QuantizeSection
    toolkit: ToolkitSection = ToolkitSection()
    golden: GoldenSection
    run: RunSection = RunSection()
    board: BoardSection = BoardSection()
    tolerances: Tolerance = Tolerance()  # the one tolerance value (rkdet.tolerance), validated here at load
    fidelity: FidelitySection = FidelitySection()
    decision: Optional[DecisionSection] = None  # declared decisions (None: recognised from the output layout)

    @model_validator(mode="after")
    def _band_short_of_the_range_end(self) -> "RkdetConfig":
        """Refused at load, before any build: a tolerance whose near-tie band would reach a declared range's
        end (rkdet/decode/tasks/declared.py, near_tie_band, says why the band scales with the range)."""
        for name, rule in (self.decision.outputs.items() if self.decision else ()):
            if rule.range is not None and self.fidelity.score_tolerance >= (rule.range[1] - rule.range[0]) / 2:
                raise ValueError(f"fidelity.score_tolerance {self.fidelity.score_tolerance:g} is at least half of "
                                 f"decision.outputs.{name}.range: the near-tie band would reach the range's end; "
                                 f"set it below {(rule.range[1] - rule.range[0]) / 2:g}")
        return self

    def resolved_dict(self) -> dict[str, Any]:
        """Canonical JSON-able form with every default filled in (what the manifest hashes); an absent
        `decision` is left out, so configs without one resolve as before."""
        doc = json.loads(self.model_dump_json())
        if doc.get("decision") is None:
            doc.pop("decision", None)
        return doc


PATH_KEYS = (("model", "onnx"), ("quantize", "dataset"), ("golden", "inputs"), ("target", "toolkit1_python"))


def _known_keys(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def _section_model(loc: tuple[Any, ...]) -> type[BaseModel]:
    """The pydantic model that owns the mapping at `loc` (for "did you mean" hints)."""
    model: type[BaseModel] = RkdetConfig
    for part in loc:
        field = model.model_fields.get(str(part))
        ann = getattr(field, "annotation", None) if field else None
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        else:
            break
    return model


def _format_error(path: Path, err: dict[str, Any]) -> str:
    loc = tuple(err.get("loc", ()))
    key = ".".join(str(p) for p in loc) or "(top level)"
    if err.get("type") == "extra_forbidden":
        owner = _section_model(loc[:-1])
        allowed = _known_keys(owner)
        hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        did_you_mean = f"; did you mean {'.'.join([*map(str, loc[:-1]), hint[0]])!r}?" if hint else ""
        return f"{path}: unknown key {key!r}{did_you_mean} (allowed here: {', '.join(allowed)})"
    if err.get("type") == "missing":
        return f"{path}: missing required key {key!r}"
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    value = err.get("input")
    shown = f" (got {value!r})" if not isinstance(value, (dict, list)) else ""
    return f"{path}: key {key!r}: {msg}{shown}"


def _resolve_paths(raw: dict[str, Any], base: Path) -> None:
    for section, key in PATH_KEYS:
        sect = raw.get(section)
        if isinstance(sect, dict) and isinstance(sect.get(key), str):
            p = Path(sect[key]).expanduser()
            sect[key] = str(p if p.is_absolute() else (base / p).resolve())


def _read_yaml(path: Path) -> dict[str, Any]:
    """The config file as a mapping (the one YAML reader of rkdet configs; safe_load: aliases stay shared
    references, and nothing below ever prints a whole value, so an alias bomb costs no memory)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if path == DEFAULT_CONFIG:  # the commands' default: an installed rkdet run outside its repository
            raise ConfigError(f"no config: ./{DEFAULT_CONFIG} (the default) is not in {Path.cwd()}; pass "
                              "--config FILE (rkdet's source repository has configs/yolov8.yaml to start from)") from None
        raise ConfigError(f"{path}: config file not found; pass --config with an existing YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.__class__.__name__}: {exc})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the config must be a YAML mapping of sections (name, model, quantize, ...)")
    return raw


def load_tolerances(path: str | Path) -> Tolerance:
    """Only the `tolerances` section of a config file (`rkdet diff --config`), read and validated exactly
    as load_config does; an absent section is bitwise."""
    path = Path(path)
    section = _read_yaml(path).get("tolerances")
    try:
        return Tolerance.model_validate({} if section is None else section)
    except ValidationError as exc:
        first = dict(exc.errors()[0])
        first["loc"] = ("tolerances", *first.get("loc", ()))
        raise ConfigError(_format_error(path, first)) from None


def load_decision(path: str | Path) -> Optional[DecisionSection]:
    """Only the `decision` section of a config file (`rkdet diff --config`), validated as load_config
    does; absent: None (decisions from the recognised layout)."""
    path = Path(path)
    section = _read_yaml(path).get("decision")
    if section is None:
        return None
    try:
        return DecisionSection.model_validate(section)
    except ValidationError as exc:
        first = dict(exc.errors()[0])
        first["loc"] = ("decision", *first.get("loc", ()))
        raise ConfigError(_format_error(path, first)) from None


def load_config(path: str | Path, overrides: Optional[dict[str, Any]] = None) -> RkdetConfig:
    """Load, resolve paths relative to the file, and validate; errors name file, key and allowed values."""
    path = Path(path)
    raw = _read_yaml(path)
    for dotted, value in (overrides or {}).items():
        section, key = dotted.split(".", 1)
        raw.setdefault(section, {})[key] = value
    _resolve_paths(raw, path.resolve().parent)
    try:
        return RkdetConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = len(exc.errors()) - 1
        suffix = f" (+{more} more problem{'s' if more > 1 else ''})" if more else ""
        raise ConfigError(_format_error(path, first) + suffix) from None


def explicit_keys(path: str | Path) -> set[str]:
    """Dotted keys the user wrote in the file (to mark the rest as defaults in `config show`)."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    keys: set[str] = set()
    for section, value in raw.items():
        keys.add(str(section))
        if isinstance(value, dict):
            keys.update(f"{section}.{k}" for k in value)
    return keys


# The file inside a build folder that holds the config it was built with (rkdet.convert.published); its
# one reader and writer: rkdet.records.resolved_config.
RESOLVED_CONFIG = RESOLVED_CONFIG_FILE


class DeploySettings(BaseModel):
    """The parts of a config that decide how a board runs a build and how its results are judged
    (a config file's, or a build's own resolved config's), and where they came from."""

    model_config = ConfigDict(frozen=True)

    run: RunSection = RunSection()
    board: BoardSection = BoardSection()
    tolerances: Tolerance = Tolerance()
    source: str


def deploy_settings(cfg: RkdetConfig, source: str | Path) -> DeploySettings:
    """The run/board/tolerances sections of a loaded config file."""
    return DeploySettings(run=cfg.run, board=cfg.board, tolerances=cfg.tolerances, source=str(source))


def build_deploy_settings(build: str | Path | BuildRecord) -> DeploySettings:
    """The run/board/tolerances a build was made with, from its `config.resolved.json` (the one reader,
    rkdet.records.resolved_config; a loaded build's record reads it once): a build deploys without the
    config file it came from (whose paths, there, are names only and are not needed)."""
    from rkdet.records.build import BuildRecord
    from rkdet.records.resolved_config import read_resolved_config

    path = (build.folder if isinstance(build, BuildRecord) else Path(build)) / RESOLVED_CONFIG
    try:  # bounded (rkdet.records.io): a build folder is input
        resolved = (build.resolved_config(ConfigError) if isinstance(build, BuildRecord)
                    else read_resolved_config(path, ConfigError))
    except FileNotFoundError:
        raise ConfigError(f"{path}: missing; pass --config FILE, or re-run rkdet convert to make a complete "
                          "build folder") from None
    except ConfigError as exc:
        if str(exc) == f"{path}: expected a JSON object":
            raise ConfigError(f"{path}: not a JSON object; pass --config FILE, or re-run rkdet convert") from None
        raise ConfigError(f"{exc}; pass --config FILE, or re-run rkdet convert") from None
    doc = resolved.doc
    sections: dict[str, Any] = {}
    for name, model in (("run", RunSection), ("board", BoardSection), ("tolerances", Tolerance)):
        try:
            sections[name] = model.model_validate(doc.get(name) or {})
        except ValidationError as exc:
            first = dict(exc.errors()[0])
            first["loc"] = (name, *first.get("loc", ()))
            raise ConfigError(_format_error(path, first)) from None
    return DeploySettings(**sections, source=str(path))
