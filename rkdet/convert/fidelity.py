"""Build fidelity: does the quantized build (the toolkit's simulator) decide what ONNX FP32 decides?

Why decisions first: a numeric score misjudges both ways. Whole-output cosine of the stock YOLOv8 output
reads 0.9995 while INT8 has zeroed every class score (boxes dominate the norm); a split-head class slice
whose FP32 maximum is 0.12 (no detection anywhere) reads cosine 0.88 although nothing changes; a 2-element
logit vector reads 0.94 with the same top-1 everywhere. So the primary gate is decision agreement on the
golden inputs (detectors: the same detections by class, overlap and score within tolerance, decoded by
rkdet/decode/ for every family it recognises, the overlap as rkdet.decode.SAME_DECISION defines it per task:
box IoU >= fidelity.match_iou, mask IoU for segmentation; classifiers: the same top-k). Numeric gates measure only where FP32 carries signal
(a slice without signal is reported, not failed) and judge the outputs no decision covers. A saturation
check catches a quantized output pinned at its calibration range while FP32 goes beyond it.
Every gate's result and threshold goes to fidelity.json and to one summary line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rkdet.config import FidelitySection
from rkdet.decode import (
    CONF_THRESHOLD,
    SAME_DECISION,
    Detections,
    Layout,
    class_scores,
    decode_detections,
    detect_layout,
    overlap_matrix,
)
from rkdet.errors import ConversionError, FidelityGateError
from rkdet.records.fidelity import SCHEMA, FidelityRecord, GateResult

SCORE_HIGH = 0.5  # a confident FP32 class score
SCORE_KEPT = 0.25  # what a faithful build still shows for it
_MAX_LISTED = 5  # disagreements listed per input in fidelity.json


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


def _match_threshold(ref: Detections, cand: Detections, limits: FidelitySection) -> float:
    """Box IoU: fidelity.match_iou (the config's, default SAME_DECISION's); masks: SAME_DECISION's mask IoU."""
    mask_iou = SAME_DECISION["segmentation"].min_iou
    return limits.match_iou if ref.masks is None or cand.masks is None or mask_iou is None else mask_iou


def _match(ref: Detections, cand: Detections, match_iou: float) -> list[tuple[int, int, float]]:
    """Greedy same-class matching, best overlap first (decisions are per class)."""
    if not len(ref) or not len(cand):
        return []
    iou = overlap_matrix(ref, cand)[0]
    iou[ref.classes[:, None] != cand.classes[None, :]] = -1.0
    pairs, used_r, used_c = [], set(), set()
    for flat in np.argsort(-iou, axis=None, kind="stable"):
        r, c = divmod(int(flat), iou.shape[1])
        if iou[r, c] < match_iou:
            break
        if r not in used_r and c not in used_c:
            used_r.add(r)
            used_c.add(c)
            pairs.append((r, c, float(iou[r, c])))
    return pairs


def compare_detection_decisions(ref: Detections, cand: Detections, limits: FidelitySection,
                                conf: float = CONF_THRESHOLD) -> dict[str, Any]:
    """Agreement between FP32 and quantized detections of one input.

    Both sides are decoded down to `conf - score_tolerance`, so a detection that quantization moves just
    across the confidence threshold (within tolerance) still finds its partner. A detection counts when
    either side reports it (score >= conf); it agrees when matched by class with IoU >= match_iou and
    its score within score_tolerance."""
    tol = limits.score_tolerance
    pairs = _match(ref, cand, _match_threshold(ref, cand, limits))
    agree, disagreements, units = 0, [], 0
    for r, c, iou in pairs:
        if ref.scores[r] < conf and cand.scores[c] < conf:
            continue
        units += 1
        delta = float(cand.scores[c] - ref.scores[r])
        if abs(delta) <= tol:
            agree += 1
        else:
            disagreements.append({"what": "score", "class": int(ref.classes[r]), "fp32_score": float(ref.scores[r]),
                                  "quantized_score": float(cand.scores[c]), "iou": iou})
    matched_r, matched_c = {r for r, _, _ in pairs}, {c for _, c, _ in pairs}
    for r in range(len(ref)):
        if r not in matched_r and ref.scores[r] >= conf:
            units += 1
            disagreements.append({"what": "missing", "class": int(ref.classes[r]), "fp32_score": float(ref.scores[r]),
                                  "box": [float(v) for v in ref.boxes[r]]})
    for c in range(len(cand)):
        if c not in matched_c and cand.scores[c] >= conf:
            units += 1
            disagreements.append({"what": "extra", "class": int(cand.classes[c]),
                                  "quantized_score": float(cand.scores[c]), "box": [float(v) for v in cand.boxes[c]]})
    return {"detections": units, "agree": agree, "disagreements": disagreements[:_MAX_LISTED],
            "disagreement_count": len(disagreements)}


def _probabilities(scores: np.ndarray) -> np.ndarray:
    """Scores as probabilities: kept when they already are (a Softmax output), else softmax of the logits."""
    x = scores.astype(np.float64)
    if x.min() >= 0 and x.max() <= 1 and abs(x.sum() - 1) < 1e-2:
        return x
    e = np.exp(x - x.max())
    return e / e.sum()


def compare_top_k(ref: np.ndarray, cand: np.ndarray, limits: FidelitySection) -> dict[str, Any]:
    """Same top-k classes in order, where a swap between classes whose FP32 probabilities are within
    score_tolerance of each other (a near tie) is not a decision change."""
    k = min(limits.top_k, ref.size)
    rt = np.argsort(-ref, kind="stable")[:k].tolist()
    ct = np.argsort(-cand, kind="stable")[:k].tolist()
    p = _probabilities(ref)
    margins = [float(p[a] - p[b]) for a, b in zip(rt, ct) if a != b]
    agree = all(m <= limits.score_tolerance for m in margins)
    return {"fp32_top": rt, "quantized_top": ct, "agree": int(agree), "detections": 1,
            "fp32_margin": max(margins) if margins else None}


def _decide(layout: Layout, sim: dict[str, dict[str, np.ndarray]], ref: dict[str, dict[str, np.ndarray]],
            limits: FidelitySection) -> tuple[dict[str, Any], GateResult]:
    threshold = limits.min_decision_agreement
    per_input: dict[str, Any] = {}
    if layout.task in ("detection", "segmentation"):
        low = max(CONF_THRESHOLD - limits.score_tolerance, 1e-6)
        for name in sorted(ref):
            per_input[name] = compare_detection_decisions(decode_detections(layout, ref[name], conf=low),
                                                          decode_detections(layout, sim[name], conf=low), limits)
        units = sum(v["detections"] for v in per_input.values())
        agree = sum(v["agree"] for v in per_input.values())
        what = f"{agree}/{units} detections agree"
    else:  # classification
        for name in sorted(ref):
            r, c = class_scores(layout, ref[name]), class_scores(layout, sim[name])
            per_input[name] = compare_top_k(r, c, limits)
        units = len(per_input)
        agree = sum(v["agree"] for v in per_input.values())
        what = f"{agree}/{units} golden inputs keep the same top-{limits.top_k}"
    rule = SAME_DECISION[layout.task]
    decision = {"kind": layout.kind, "task": layout.task, "overlap": rule.overlap,
                "match_iou": limits.match_iou if layout.task != "segmentation" else rule.min_iou,
                "score_tolerance": limits.score_tolerance, "top_k": limits.top_k, "conf_threshold": CONF_THRESHOLD,
                "inputs": per_input}
    if units == 0:
        return decision, GateResult("decision", "golden inputs", None, threshold, None, True,
                                    "no detection in FP32 or quantized output on any golden input: not judged; "
                                    "add golden inputs the model detects something in")
    rate = agree / units
    return decision, GateResult("decision", "golden inputs", rate, threshold, rate >= threshold, True, what)


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
            input_hw: tuple[int, int] | None = None) -> FidelityReport:
    """Every gate on the golden inputs: decision, per-slice signal cosine, score collapse/recall, saturation.
    `input_hw` (the model input's H, W) lets the decoder read flattened or non-square grids."""
    layout = detect_layout(list(zip(output_names, output_shapes)), input_size=input_hw)
    report = FidelityReport(layout=layout.to_json())
    decided: set[str] = set()
    if layout.kind != "none":
        report.decision, result = _decide(layout, sim, ref, limits)
        report.gates.append(result)
        if result.passed is not None:
            decided = set(output_names) if layout.task in ("detection", "segmentation") else set(layout.roles)
    if layout.branches and all(layout.roles.get(n) in ("box", "cls", "score_sum") for n in output_names):
        # any split head (rkdet's cut, rknn_model_zoo's, PicoDet's): roles from the decoder
        slices = [Slice(n, "boxes" if layout.roles.get(n) == "box" else "scores", None) for n in output_names]
    elif layout.kind not in ("none", "classification", "yolov8-single"):  # other families: scores are not one slice
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


_FIXES = {
    # Cheapest remedy first: an mmse build can take many times a normal one (hours on a detector).
    "decision": "check the disagreements in fidelity.json; try quantize.algorithm: kl_divergence, more "
                "representative calibration images, quantize.algorithm: mmse (much slower to build), or a float "
                "build, quantize.force_fp16: true (float16, not INT8)",
    "cosine": "try quantize.algorithm: kl_divergence, more calibration images, quantize.algorithm: mmse (much slower "
              "to build), or a float build, quantize.force_fp16: true (float16, not INT8)",
    "score_collapse": "quantize class scores apart from boxes (model.prepare: yolov8-split-head) or build FP16 "
                      "(quantize.force_fp16: true)",
    "score_recall": "quantize class scores apart from boxes (model.prepare: yolov8-split-head) or build FP16",
    "saturation": "add calibration images like the golden ones (quantize.dataset) so the range covers them",
}
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


def gate(report: FidelityReport, platform: str) -> list[str]:
    """Raise FidelityGateError (exit 4) on the first failed gate kind, naming its worst result; return
    what was not judged, as warnings."""
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
        raise FidelityGateError(f"{platform}: fidelity gate failed: {what}{limit}; {_FIXES[g.gate]}", gate=g.gate,
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
            hint = (f"; a final Softmax stays float16 in rknn-toolkit2: cut it (model.prepare: classifier-logits) or "
                    f"accept it (quantize.float_outputs: [{', '.join(outs)}])" if outs else "")
            raise ConversionError(f"{platform}: the toolkit left tensors unquantized: {', '.join(floating)}; "
                                  f"expected {'/'.join(wanted)} for quantize.dtype {dtype} (force_fp16 is false){hint}")
    else:
        integer = [t["name"] for t in tensors if not str(t["dtype"]).startswith("float")]
        if integer:
            raise ConversionError(f"{platform}: quantize.force_fp16 is true but tensors are integer: {', '.join(integer)}")
