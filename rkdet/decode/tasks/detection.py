"""Object detection: boxes with a class and a score (YOLOv5/v8/v10/YOLO11, PP-YOLOE, PicoDet).

The same decision: the same class and box IoU >= 0.5, pairs taken best overlap first, each box once
(0.5 is the IoU at which COCO's AP50 and PASCAL VOC count a box as found). The diff reports class flips,
missing and extra boxes; convert's gate counts detections that agree within the score tolerance, both
sides decoded down to `conf - score_tolerance` so a score moved just across the threshold still pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

import numpy as np

from rkdet.decode.common import CONF_THRESHOLD, Detections, Layout, iou_matrix
from rkdet.decode.heads import decode
from rkdet.decode.tasks.base import Arrays, DecisionTask, GateCount, GateLimits, SameDecision

SAME = SameDecision("detection", "box IoU", 0.5, "same class and box IoU >= 0.5 (pairs best overlap first, each box once)")
KINDS = ("yolov8-single", "yolov8-split", "ppyoloe-split", "picodet", "yolov5-single", "yolov5-split", "yolov10")
MAX_LISTED = 5  # disagreements listed per golden input in fidelity.json


def compare_detections(task: Detection, reference: Detections, candidate: Detections,
                       match_iou: float | None = None) -> dict:
    """The diff's delta: counts and worst deltas between two detection lists (JSON-ready), paired by the
    task's overlap; `match_iou` overrides the rule's."""
    iou, rule = task.overlap(reference, candidate)
    match_iou = rule.min_iou if match_iou is None else match_iou
    assert match_iou is not None
    pairs: list[tuple[int, int, float]] = []
    if iou.size:
        order = np.argsort(-iou, axis=None, kind="stable")
        used_r: set[int] = set()
        used_c: set[int] = set()
        for flat in order:
            r, c = divmod(int(flat), iou.shape[1])
            value = float(iou[r, c])
            if value < match_iou:
                break
            if r in used_r or c in used_c:
                continue
            used_r.add(r)
            used_c.add(c)
            pairs.append((r, c, value))
    flips = [(r, c, v) for r, c, v in pairs if reference.classes[r] != candidate.classes[c]]
    same = [(r, c, v) for r, c, v in pairs if reference.classes[r] == candidate.classes[c]]
    matched_r = {r for r, _, _ in pairs}
    matched_c = {c for _, c, _ in pairs}
    score_deltas = [float(candidate.scores[c] - reference.scores[r]) for r, c, _ in same]
    return {
        "kind": "detection",
        "task": rule.task,
        "overlap": rule.overlap,
        "match_iou": match_iou,
        "reference_count": len(reference),
        "candidate_count": len(candidate),
        "matched": len(same),
        "class_flips": [{"reference_class": int(reference.classes[r]), "candidate_class": int(candidate.classes[c]),
                         "iou": v, "box": [float(x) for x in reference.boxes[r]]} for r, c, v in flips],
        "missing": [dict(reference.as_list()[r]) for r in range(len(reference)) if r not in matched_r],
        "extra": [dict(candidate.as_list()[c]) for c in range(len(candidate)) if c not in matched_c],
        "min_iou": min((v for _, _, v in same), default=None),
        "max_abs_score_delta": max((abs(d) for d in score_deltas), default=None),
        "changed": bool(flips) or len(matched_r) < len(reference) or len(matched_c) < len(candidate),
    }


def _gate_match(task: Detection, ref: Detections, cand: Detections, match_iou: float) -> list[tuple[int, int, float]]:
    """Greedy same-class matching, best overlap first (decisions are per class)."""
    if not len(ref) or not len(cand):
        return []
    iou = task.overlap(ref, cand)[0]
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


def compare_detection_decisions(task: Detection, ref: Detections, cand: Detections, limits: GateLimits,
                                conf: float = CONF_THRESHOLD) -> dict[str, Any]:
    """Agreement between FP32 and quantized detections of one input.

    Both sides are decoded down to `conf - score_tolerance`, so a detection that quantization moves just
    across the confidence threshold (within tolerance) still finds its partner. A detection counts when
    either side reports it (score >= conf); it agrees when matched by class with IoU >= match_iou and
    its score within score_tolerance."""
    tol = limits.score_tolerance
    pairs = _gate_match(task, ref, cand, task.gate_pair_iou(ref, cand, limits))
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
    return {"detections": units, "agree": agree, "disagreements": disagreements[:MAX_LISTED],
            "disagreement_count": len(disagreements)}


def _num(x: float | int | None, spec: str = ".3g") -> str:
    return "–" if x is None else escape(format(x, spec))


@dataclass(frozen=True)
class DetectionFinding:
    """What a difference did to the detections (one distinct result against its reference)."""

    changed: bool
    reference_count: int = 0
    matched: int = 0
    class_flips: int = 0
    missing: int = 0
    extra: int = 0
    min_iou: float | None = None
    max_abs_score_delta: float | None = None
    kind: str = "detection"

    @classmethod
    def from_delta(cls, d: dict[str, Any]) -> DetectionFinding:
        return cls(bool(d["changed"]), d["reference_count"], d["matched"], len(d["class_flips"]), len(d["missing"]),
                   len(d["extra"]), d["min_iou"], d["max_abs_score_delta"])

    def terminal_text(self) -> str:
        if self.changed:
            return f"{self.class_flips} flip/{self.missing} miss/{self.extra} extra"
        if self.matched:
            return f"same {self.matched} boxes (IoU>={'-' if self.min_iou is None else format(self.min_iou, '.3f')})"
        return "no boxes either side"

    def html(self) -> str:
        if not self.changed and not self.matched:
            return "no boxes either side"
        if not self.changed:
            return (f"same {self.matched} boxes, min IoU {_num(self.min_iou, '.3f')}, "
                    f"|Δscore| ≤ {_num(self.max_abs_score_delta)}")
        return (f'<span class="bad">{self.class_flips} class flip(s), {self.missing} missing, '
                f'{self.extra} extra</span> of {self.reference_count}')


def detections_of(items: list[dict[str, Any]]) -> Detections:
    """Detections back from a summary's JSON list (boxes, scores, classes)."""
    boxes = np.array([d["box"] for d in items], dtype=np.float64).reshape(-1, 4)
    return Detections(boxes, np.array([d["score"] for d in items]), np.array([d["class"] for d in items], dtype=np.int64))


class Detection(DecisionTask):
    name = "detection"
    record_kind = "detection"
    kinds = KINDS
    same = SAME

    def overlap(self, ref: Detections, cand: Detections) -> tuple[np.ndarray, SameDecision]:
        """The pairwise overlap "the same decision" pairs by, and the rule: box IoU."""
        if not len(ref) or not len(cand):
            return np.zeros((len(ref), len(cand))), self.same
        return iou_matrix(ref.boxes, cand.boxes), self.same

    def gate_pair_iou(self, ref: Detections, cand: Detections, limits: GateLimits) -> float:
        """The overlap convert's gate pairs at: fidelity.match_iou (the config's, default SAME's)."""
        return limits.match_iou

    def decide(self, layout: Layout, arrays: Arrays, conf: float = CONF_THRESHOLD) -> Detections:
        return decode(layout, arrays, conf)

    def summary(self, decided: Detections) -> dict[str, Any]:
        return {"kind": self.record_kind, "task": self.name, "detections": decided.as_list()}

    def bundle_summary(self, layout: Layout, arrays: Arrays) -> dict[str, Any]:
        return {"kind": layout.kind, "task": self.name, "detections": self.decide(layout, arrays).as_list()}

    def compare(self, reference: Detections, candidate: Detections) -> dict[str, Any]:
        return compare_detections(self, reference, candidate)

    def changed(self, delta: dict[str, Any]) -> bool:
        return bool(delta.get("changed"))

    def finding(self, delta: dict[str, Any]) -> DetectionFinding:
        return DetectionFinding.from_delta(delta)

    def gate(self, layout: Layout, ref: dict[str, Arrays], sim: dict[str, Arrays], limits: GateLimits) -> GateCount:
        low = max(CONF_THRESHOLD - limits.score_tolerance, 1e-6)
        per_input = {name: compare_detection_decisions(self, self.decide(layout, ref[name], conf=low),
                                                       self.decide(layout, sim[name], conf=low), limits)
                     for name in sorted(ref)}
        units = sum(v["detections"] for v in per_input.values())
        agree = sum(v["agree"] for v in per_input.values())
        return GateCount(per_input, units, agree, f"{agree}/{units} detections agree")

    def plotted(self, summary: dict[str, Any]) -> Detections:
        return detections_of(summary["detections"])

    def plot_score(self, delta: dict[str, Any]) -> int:
        return len(delta["class_flips"]) + len(delta["missing"]) + len(delta["extra"])


TASK = Detection()
