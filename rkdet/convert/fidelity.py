"""Build fidelity: does the quantized build (the toolkit's simulator) decide what ONNX FP32 decides?

Why decisions first: a numeric score misjudges both ways. Whole-output cosine of the stock YOLOv8 output
reads 0.9995 while INT8 has zeroed every class score (boxes dominate the norm); a split-head class slice
whose FP32 maximum is 0.12 (no detection anywhere) reads cosine 0.88 although nothing changes; a 2-element
logit vector reads 0.94 with the same top-1 everywhere. So the primary gate is decision agreement on the
golden inputs (detectors: the same detections by class, overlap and score within tolerance, decoded by
rkdet/decode/ for every family it recognises, judged by the layout's decision task (rkdet/decode/tasks/:
box IoU >= fidelity.match_iou, mask IoU for segmentation; classifiers: the same top-k). Numeric gates measure only where FP32 carries signal
(a slice without signal is reported, not failed) and judge the outputs no decision covers. A saturation
check catches a quantized output pinned at its calibration range while FP32 goes beyond it.
Every gate's result and threshold goes to fidelity.json and to one summary line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from rkdet.config import FidelitySection
from rkdet.decode import CONF_THRESHOLD, DecisionTask, Layout, detect_layout, task_of
from rkdet.decode.tasks.classification import compare_top_k  # noqa: F401  (the gate's top-k rule, named here too)
from rkdet.errors import ConversionError, FidelityGateError
from rkdet.records.fidelity import SCHEMA, FidelityRecord, GateResult

SCORE_HIGH = 0.5  # a confident FP32 class score
SCORE_KEPT = 0.25  # what a faithful build still shows for it


@dataclass(frozen=True)
class Slice:
    """A named part of an output: which output, which kind, which channel rows."""

    output: str
    kind: str  # "scores" | "boxes" | "all"
    rows: slice | None  # along axis 1 (channels), None for the whole output

    @property
    def key(self) -> str:
        return self.output if self.rows is None else f"{self.output}[{self.kind}]"


@dataclass
class FidelityReport:
    """What fidelity.json holds."""

    layout: dict[str, Any]
    gates: list[GateResult] = field(default_factory=list)
    slices: dict[str, dict[str, Any]] = field(default_factory=dict)
    decision: dict[str, Any] = field(default_factory=dict)

    def record(self) -> FidelityRecord:
        """The report as fidelity.json's record (rkdet.records.fidelity: its one reader and writer)."""
        return FidelityRecord(self.layout, tuple(self.gates), self.slices, self.decision, SCHEMA)

    def to_json(self) -> dict[str, Any]:
        return self.record().to_json()


def slices_for(output_names: tuple[str, ...], output_shapes: tuple[tuple[int, ...], ...], prepare: str) -> list[Slice]:
    """The slices worth judging apart for this model's outputs."""
    result: list[Slice] = []
    for name, shape in zip(output_names, output_shapes):
        if prepare == "yolov8-split-head":
            result.append(Slice(name, "scores" if name.startswith("cls") else "boxes", None))
        elif len(shape) == 3 and shape[1] > 4 and shape[2] > shape[1]:  # Ultralytics [1, 4+nc, N]
            result += [Slice(name, "boxes", slice(0, 4)), Slice(name, "scores", slice(4, None))]
        else:
            result.append(Slice(name, "all", None))
    return result


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a64), np.linalg.norm(b64)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a64, b64) / (na * nb))


def _part(array: np.ndarray, rows: slice | None) -> np.ndarray:
    return array if rows is None else array[:, rows]


def _signal_floor(sl: Slice, refs: list[np.ndarray], limits: FidelitySection) -> float:
    """Scores are probabilities: an absolute floor. Other values: a share of the slice's largest |FP32|."""
    if sl.kind == "scores":
        return limits.score_floor
    peak = max((float(np.max(np.abs(r))) for r in refs if r.size), default=0.0)
    return limits.noise_floor * peak if peak > 0 else float("inf")


def measure_slices(sim: dict[str, dict[str, np.ndarray]], ref: dict[str, dict[str, np.ndarray]],
                   slices: list[Slice], limits: FidelitySection) -> dict[str, dict[str, Any]]:
    """Per slice over all golden inputs: cosine and relative error where FP32 carries signal, plus the
    whole-slice cosine (for reference), max abs diff, maxima and score recall."""
    report: dict[str, dict[str, Any]] = {}
    for sl in slices:
        refs = [_part(ref[n][sl.output], sl.rows).astype(np.float32) for n in ref]
        sims = [_part(sim[n][sl.output], sl.rows).astype(np.float32) for n in ref]
        floor = _signal_floor(sl, refs, limits)
        signal_cos, signal_rel, signal_n, whole, high, kept = [], [], 0, [], 0, 0
        for r, s in zip(refs, sims):
            whole.append(_cosine(s, r))
            mask = np.abs(r) >= floor
            if mask.any():
                signal_n += int(mask.sum())
                signal_cos.append(_cosine(s[mask], r[mask]))
                rn = float(np.linalg.norm(r[mask].astype(np.float64)))
                signal_rel.append(float(np.linalg.norm((s[mask] - r[mask]).astype(np.float64))) / rn if rn else 0.0)
            if sl.kind == "scores":
                confident = r > SCORE_HIGH
                high += int(confident.sum())
                kept += int((s[confident] > SCORE_KEPT).sum())
        entry: dict[str, Any] = {
            "kind": sl.kind, "output": sl.output, "signal_floor": floor if np.isfinite(floor) else None,
            "signal_elements": signal_n, "signal_inputs": len(signal_cos),
            "signal_min_cosine": min(signal_cos) if signal_cos else None,
            "signal_max_rel_error": max(signal_rel) if signal_rel else None,
            "whole_min_cosine": min(whole), "max_abs": max(float(np.max(np.abs(s - r))) for r, s in zip(refs, sims)),
            "sim_max": max(float(s.max()) for s in sims), "ref_max": max(float(r.max()) for r in refs)}
        if sl.kind == "scores":
            entry["confident_ref_scores"] = high
            entry["score_recall"] = (kept / high) if high else None
        report[sl.key] = entry
    return report


def _decide(layout: Layout, sim: dict[str, dict[str, np.ndarray]], ref: dict[str, dict[str, np.ndarray]],
            limits: FidelitySection, task: DecisionTask) -> tuple[dict[str, Any], GateResult]:
    """The decision gate: the layout's task judges FP32 against the quantized simulator per golden input."""
    threshold = limits.min_decision_agreement
    count = task.gate(layout, ref, sim, limits)
    units, agree = count.units, count.agree
    decision = {"kind": layout.kind, "task": task.name, "overlap": task.same.overlap,
                "match_iou": task.gate_match_iou(limits),
                "score_tolerance": limits.score_tolerance, "top_k": limits.top_k, "conf_threshold": CONF_THRESHOLD,
                "inputs": count.per_input}
    if units == 0:
        return decision, GateResult("decision", "golden inputs", None, threshold, None, True,
                                    "no detection in FP32 or quantized output on any golden input: not judged; "
                                    "add golden inputs the model detects something in")
    rate = agree / units
    return decision, GateResult("decision", "golden inputs", rate, threshold, rate >= threshold, True, count.what)


def _saturation(sim: dict[str, dict[str, np.ndarray]], ref: dict[str, dict[str, np.ndarray]],
                header_outputs: list[dict[str, Any]], limits: FidelitySection) -> list[GateResult]:
    """A quantized output pinned at an end of its range while FP32 goes beyond it by more than
    max_saturation of the range: calibration did not see values the golden inputs produce."""
    results = []
    for t in header_outputs:
        name = t["name"]
        if str(t.get("dtype", "")).startswith("float") or len(t.get("scale", [])) != 1 or not any(name in o for o in ref.values()):
            continue
        scale, zp = float(t["scale"][0]), int(t["zero_point"][0])
        lo_q, hi_q = (-128, 127) if t["dtype"] == "int8" else ((0, 255) if t["dtype"] == "uint8" else (-32768, 32767))
        qmin, qmax = (lo_q - zp) * scale, (hi_q - zp) * scale
        span = qmax - qmin
        worst, ref_max, ref_min = 0.0, -np.inf, np.inf
        for n in ref:
            r, s = ref[n][name].astype(np.float64), sim[n][name].astype(np.float64)
            ref_max, ref_min = max(ref_max, float(r.max())), min(ref_min, float(r.min()))
            top, bottom = s >= qmax - scale / 2, s <= qmin + scale / 2
            if top.any():
                worst = max(worst, float(np.max(r[top] - qmax)) / span)
            if bottom.any():
                worst = max(worst, float(np.max(qmin - r[bottom])) / span)
        note = (f"calibration range [{qmin:.4g}, {qmax:.4g}], FP32 on golden [{ref_min:.4g}, {ref_max:.4g}]")
        results.append(GateResult("saturation", name, worst, limits.max_saturation, worst <= limits.max_saturation,
                                  True, note))
    return results


def measure(sim: dict[str, dict[str, np.ndarray]], ref: dict[str, dict[str, np.ndarray]],
            output_names: tuple[str, ...], output_shapes: tuple[tuple[int, ...], ...], prepare: str,
            limits: FidelitySection, header_outputs: list[dict[str, Any]] | None = None,
            input_hw: tuple[int, int] | None = None, declared: Mapping[str, Any] | None = None) -> FidelityReport:
    """Every gate on the golden inputs: decision, per-slice signal cosine, score collapse/recall, saturation.
    `input_hw` (the model input's H, W) lets the decoder read flattened or non-square grids; `declared`
    (the config's `decision.outputs`) is the app's own rule per output."""
    layout = detect_layout(list(zip(output_names, output_shapes)), input_size=input_hw, declared=declared)
    report = FidelityReport(layout=layout.to_json())
    decided: set[str] = set()
    task = task_of(layout)
    if task is not None:
        report.decision, result = _decide(layout, sim, ref, limits, task)
        report.gates.append(result)
        if result.passed is not None:
            decided = task.decided_outputs(layout, output_names)
    if layout.branches and all(layout.roles.get(n) in ("box", "cls", "score_sum") for n in output_names):
        # any split head (rkdet's cut, rknn_model_zoo's, PicoDet's): roles from the decoder
        slices = [Slice(n, "boxes" if layout.roles.get(n) == "box" else "scores", None) for n in output_names]
    elif layout.kind not in ("none", "yolov8-single"):  # other families: scores are not one slice (a classifier's
        # one output is "all" either way)
        slices = [Slice(n, "all", None) for n in output_names]
    else:
        slices = slices_for(output_names, output_shapes, prepare)
    report.slices = measure_slices(sim, ref, slices, limits)
    for key, entry in report.slices.items():
        binding = entry["output"] not in decided
        limit = limits.min_slice_cosine if entry["kind"] != "all" else limits.min_cosine
        value = entry["signal_min_cosine"]
        note = "" if binding else "reported: the decision gate covers this output"
        if value is None:
            note = f"no FP32 element above the signal floor {entry['signal_floor']}: not judged"
        report.gates.append(GateResult("cosine", key, value, limit, None if value is None else value >= limit,
                                       binding, note))
        if entry["kind"] == "scores":
            collapsed = entry["ref_max"] > SCORE_KEPT and entry["sim_max"] <= 0.0
            report.gates.append(GateResult("score_collapse", key, entry["sim_max"], 0.0, not collapsed, True,
                                           f"FP32 max {entry['ref_max']:.3f}"))
            recall = entry["score_recall"]
            report.gates.append(GateResult("score_recall", key, recall, limits.min_score_recall,
                                           None if recall is None else recall >= limits.min_score_recall, True,
                                           "" if recall is not None else f"no FP32 score above {SCORE_HIGH}: not judged"))
    report.gates += _saturation(sim, ref, header_outputs or [], limits)
    return report


@dataclass(frozen=True)
class Remedy:
    """One thing to try after a failed gate, and the config setting it means (key, value): a build that
    already used that setting is not told to try it again (issue 36 §3)."""

    text: str
    setting: tuple[str, Any] | None = None
    quantized_only: bool = False  # a quantization option: no remedy for a float build

    def applies(self, used: dict[str, Any]) -> bool:
        if self.quantized_only and used.get("quantize.force_fp16"):
            return False
        return self.setting is None or used.get(self.setting[0]) != self.setting[1]


_KL = Remedy("quantize.algorithm: kl_divergence", ("quantize.algorithm", "kl_divergence"), True)
_MMSE = Remedy("quantize.algorithm: mmse (much slower to build)", ("quantize.algorithm", "mmse"), True)
_FLOAT = Remedy("a float build, quantize.force_fp16: true (float16, not INT8)", ("quantize.force_fp16", True))
_SPLIT = Remedy("class scores quantized apart from boxes (model.prepare: yolov8-split-head)",
                ("model.prepare", "yolov8-split-head"))
_MORE_IMAGES = Remedy("more representative calibration images")

# Cheapest remedy first: an mmse build can take many times a normal one (hours on a detector).
# Each gate: what to look at first ("" for nothing), then the remedies in the order to try them.
_FIXES: dict[str, tuple[str, tuple[Remedy, ...]]] = {
    "decision": ("check the disagreements in fidelity.json", (_KL, _MORE_IMAGES, _MMSE, _FLOAT)),
    "cosine": ("", (_KL, _MORE_IMAGES, _MMSE, _FLOAT)),
    "score_collapse": ("", (_SPLIT, _FLOAT)),
    "score_recall": ("", (_SPLIT, _FLOAT)),
    "saturation": ("", (Remedy("calibration images like the golden ones (quantize.dataset), so the range covers "
                               "them"),)),
}


def settings_used(cfg: Any) -> dict[str, Any]:
    """The settings of a build that a remedy may name (dotted keys, as the config spells them)."""
    return {"quantize.algorithm": cfg.quantize.algorithm, "quantize.force_fp16": cfg.quantize.force_fp16,
            "quantize.method": cfg.quantize.method, "model.prepare": cfg.model.prepare}


def remedy_advice(gate_kind: str, used: dict[str, Any] | None = None) -> str:
    """What to try after `gate_kind` failed, leaving out what the build already used (`used`: settings_used)."""
    first, remedies = _FIXES[gate_kind]
    left = [r.text for r in remedies if r.applies(used or {})]
    tries = ("try " + (", ".join(left[:-1]) + ", or " + left[-1] if len(left) > 1 else left[0])) if left else ""
    return "; ".join(p for p in (first, tries) if p) or "see fidelity.json and `rkdet layers` for where it is lost"


_KEYS = {"decision": "fidelity.min_decision_agreement", "cosine": "fidelity.min_slice_cosine / min_cosine",
         "score_collapse": "", "score_recall": "fidelity.min_score_recall", "saturation": "fidelity.max_saturation"}


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def summary_line(report: FidelityReport, platform: str) -> str:
    """One line: each gate kind's worst subject, its value and threshold, and its verdict."""
    parts = []
    for gate in ("decision", "score_collapse", "score_recall", "cosine", "saturation"):
        results = [g for g in report.gates if g.gate == gate]
        if not results:
            continue
        valued = [g for g in results if g.value is not None]
        binding = [g for g in valued if g.binding]
        pool = binding or valued or results
        worst = (max if gate == "saturation" else min)(pool, key=lambda x: x.value if x.value is not None else 0.0)
        failed = [g for g in results if g.failed]
        g = _worst(failed) if failed else worst
        verdict = ("FAIL" if failed else "ok" if binding else "reported" if valued else "not judged")
        op = "<=" if gate == "saturation" else ">="
        what = f" ({g.note})" if gate == "decision" and g.note and g.value is not None else ""
        parts.append(f"{gate} {g.subject if gate != 'decision' else ''}{what} {_fmt(g.value)} {op} {_fmt(g.threshold)} "
                     f"{verdict}".replace("  ", " "))
    return f"{platform}: fidelity: " + "; ".join(parts)


def _margin(g: GateResult) -> float:
    """How far a result is inside its threshold (< 0: failed); the search table's `closest` too."""
    if g.value is None or g.threshold is None:
        return 0.0
    return (g.threshold - g.value) if g.gate == "saturation" else (g.value - g.threshold)


def _worst(results: list[GateResult]) -> GateResult:
    """The result furthest outside (or least inside) its threshold; ties: the first in output order."""
    return min(results, key=_margin)


def detail_line(report: FidelityReport, platform: str) -> str:
    """Every gate result, each subject (output) with its value: what a failed convert prints whole, so the
    worst output is named with every other one (the search table names the same worst)."""
    parts = []
    for gate in ("decision", "score_collapse", "score_recall", "cosine", "saturation"):
        results = [g for g in report.gates if g.gate == gate]
        if not results:
            continue
        worst = _worst([g for g in results if g.failed] or [g for g in results if g.value is not None] or results)
        items = []
        for g in results:
            mark = " FAIL" if g.failed else "" if g.binding else " (reported)"
            mark += " worst" if g is worst and len(results) > 1 else ""
            items.append(f"{g.subject if gate != 'decision' else 'golden inputs'} {_fmt(g.value)}{mark}")
        op = "<=" if gate == "saturation" else ">="
        parts.append(f"{gate} ({op} {_fmt(results[0].threshold)}): " + ", ".join(items))
    return f"{platform}: fidelity per output: " + "; ".join(parts)


# The order failures are reported in: the most specific cause (with the most specific fix) first; within
# one kind of gate, the worst result (furthest outside its threshold) is the one named.
_ORDER = ("score_collapse", "saturation", "decision", "score_recall", "cosine")


def gate(report: FidelityReport, platform: str, used: dict[str, Any] | None = None) -> list[str]:
    """Raise FidelityGateError (exit 4) on the first failed gate kind, naming its worst result and what to
    try that the build (its settings `used`, see settings_used) did not already use; return what was not
    judged, as warnings."""
    failed = [g for g in report.gates if g.failed]
    kinds = sorted({g.gate for g in failed}, key=_ORDER.index)
    for g in (_worst([x for x in failed if x.gate == k]) for k in kinds):
        op = "above" if g.gate == "saturation" else "below"
        key = f" ({_KEYS[g.gate]})" if _KEYS[g.gate] else ""
        what = {"decision": f"decision agreement {_fmt(g.value)} ({g.note})",
                "cosine": f"{g.subject} cosine {_fmt(g.value)} where FP32 carries signal",
                "score_collapse": f"class scores collapsed in {g.subject} ({g.note}, quantized max 0)",
                "score_recall": f"class scores lost in {g.subject}: only {_fmt(g.value)} of confident FP32 scores "
                                "survive quantization",
                "saturation": f"{g.subject} saturates: quantized output pinned at its calibration range while "
                              f"FP32 goes {_fmt(g.value)} of the range beyond it ({g.note})"}[g.gate]
        limit = "" if g.gate == "score_collapse" else f", {op} the limit {_fmt(g.threshold)}{key}"
        raise FidelityGateError(f"{platform}: fidelity gate failed: {what}{limit}; {remedy_advice(g.gate, used)}", gate=g.gate,
                                subject=None if g.gate == "decision" else g.subject,
                                details=(summary_line(report, platform), detail_line(report, platform)))
    unjudged = [g for g in report.gates if g.passed is None and g.binding]
    if not unjudged:
        return []
    return [f"{platform}: fidelity not judged for lack of signal on the golden inputs (reported in fidelity.json): "
            + ", ".join(f"{g.gate} {g.subject}" if g.gate != "decision" else "decision" for g in unjudged)]


_ACTIVATION_DTYPES = {"w8a8": ("int8", "uint8"), "w4a16": ("int16",), "w8a16": ("int16",),
                      "w16a16i": ("int16",), "w16a16i_dfp": ("int16",)}


def quantization_gate(header: dict, dtype: str, quantized: bool, platform: str,
                      float_outputs: tuple[str, ...] | list[str] = ()) -> None:
    """A quantized build must have quantized inputs and outputs: no silent float fallback (outputs named
    in quantize.float_outputs may stay float, on purpose)."""
    tensors = header.get("inputs", []) + [t for t in header.get("outputs", []) if t["name"] not in float_outputs]
    if quantized:
        wanted = _ACTIVATION_DTYPES.get(dtype, ("int8",))
        floating = [f"{t['name']} ({t['dtype']})" for t in tensors if t["dtype"] not in wanted]
        if floating:
            outs = [t["name"] for t in tensors if t["dtype"] not in wanted and t in header.get("outputs", [])]
            # classifier-logits applies to a one-output model only (onnx_graph._classifier_logits refuses others)
            cut = "cut it (model.prepare: classifier-logits) or " if len(header.get("outputs", [])) == 1 else ""
            hint = (f"; a final Softmax stays float16 in rknn-toolkit2: {cut}"
                    f"accept it (quantize.float_outputs: [{', '.join(outs)}])" if outs else "")
            raise ConversionError(f"{platform}: the toolkit left tensors unquantized: {', '.join(floating)}; "
                                  f"expected {'/'.join(wanted)} for quantize.dtype {dtype} (force_fp16 is false){hint}")
    else:
        integer = [t["name"] for t in tensors if not str(t["dtype"]).startswith("float")]
        if integer:
            raise ConversionError(f"{platform}: quantize.force_fp16 is true but tensors are integer: {', '.join(integer)}")
