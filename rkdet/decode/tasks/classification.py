"""Classification: one score vector, the decision its top-1 (the diff also reports the top-5 set).

The same decision: the same top-1. Convert's gate asks more: the same top-k (fidelity.top_k) in order,
where a swap between classes whose FP32 probabilities are within score_tolerance (a near tie) is not a
decision change.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

import numpy as np

from rkdet.decode.common import CONF_THRESHOLD, Layout
from rkdet.decode.tasks.base import Arrays, DecisionTask, GateCount, GateLimits, SameDecision

SAME = SameDecision("classification", "top-k", None, "same top-1 (the diff also reports the top-5 set)")
TOP_K = 5  # the diff's top-k set
KIND = "classification"  # the layout (rkdet.decode.layouts.classification) and the records' "kind"


def class_scores(layout: Layout, arrays: Arrays) -> np.ndarray:
    """The flat score vector of a classification output."""
    (name,) = layout.roles
    return np.asarray(arrays[name], dtype=np.float64).ravel()


def compare_classification(reference: np.ndarray, candidate: np.ndarray, k: int = TOP_K) -> dict:
    """The diff's delta: top-1 flip and top-k set change between two score vectors (JSON-ready)."""
    k = min(k, reference.size)
    ref_top = np.argsort(-reference, kind="stable")[:k]
    cand_top = np.argsort(-candidate, kind="stable")[:k]
    top1_flip = bool(ref_top[0] != cand_top[0])
    topk_changed = set(ref_top.tolist()) != set(cand_top.tolist())
    return {
        "kind": KIND,
        "reference_top1": int(ref_top[0]),
        "candidate_top1": int(cand_top[0]),
        "top1_flip": top1_flip,
        "k": int(k),
        "topk_changed": topk_changed,
        "top1_score_delta": float(candidate[ref_top[0]] - reference[ref_top[0]]),
        "changed": top1_flip or topk_changed,
    }


def _probabilities(scores: np.ndarray) -> np.ndarray:
    """Scores as probabilities: kept when they already are (a Softmax output), else softmax of the logits."""
    x = scores.astype(np.float64)
    if x.min() >= 0 and x.max() <= 1 and abs(x.sum() - 1) < 1e-2:
        return x
    e = np.exp(x - x.max())
    return e / e.sum()


def compare_top_k(ref: np.ndarray, cand: np.ndarray, limits: GateLimits) -> dict[str, Any]:
    """Convert's gate on one input: same top-k classes in order, where a swap between classes whose FP32
    probabilities are within score_tolerance of each other (a near tie) is not a decision change."""
    k = min(limits.top_k, ref.size)
    rt = np.argsort(-ref, kind="stable")[:k].tolist()
    ct = np.argsort(-cand, kind="stable")[:k].tolist()
    p = _probabilities(ref)
    margins = [float(p[a] - p[b]) for a, b in zip(rt, ct) if a != b]
    agree = all(m <= limits.score_tolerance for m in margins)
    return {"fp32_top": rt, "quantized_top": ct, "agree": int(agree), "detections": 1,
            "fp32_margin": max(margins) if margins else None}


@dataclass(frozen=True)
class ClassificationFinding:
    """What a difference did to the top-k (one distinct result against its reference)."""

    changed: bool
    reference_top1: int | None = None
    candidate_top1: int | None = None
    top1_flip: bool = False
    topk_changed: bool = False
    kind: str = KIND

    def terminal_text(self) -> str:
        return "top-1 flip" if self.top1_flip else ("top-k changed" if self.topk_changed else "same top-k")

    def html(self) -> str:
        if self.top1_flip:
            return f'<span class="bad">top-1 flip {escape(str(self.reference_top1))} → {escape(str(self.candidate_top1))}</span>'
        return "top-k changed" if self.topk_changed else "same top-k"


class Classification(DecisionTask):
    name = "classification"
    record_kind = KIND
    kinds = (KIND,)
    same = SAME

    def decide(self, layout: Layout, arrays: Arrays, conf: float = CONF_THRESHOLD) -> np.ndarray:
        return class_scores(layout, arrays)

    def summary(self, decided: np.ndarray) -> dict[str, Any]:
        top = np.argsort(-decided, kind="stable")[:TOP_K]
        return {"kind": KIND, "top5": [int(i) for i in top], "scores": [float(decided[i]) for i in top]}

    def bundle_summary(self, layout: Layout, arrays: Arrays) -> dict[str, Any]:
        return {"kind": KIND, "top1": int(np.argmax(class_scores(layout, arrays)))}

    def compare(self, reference: np.ndarray, candidate: np.ndarray) -> dict[str, Any]:
        return compare_classification(reference, candidate)

    def changed(self, delta: dict[str, Any]) -> bool:
        return bool(delta.get("top1_flip"))  # the verdict counts top-1 flips; a top-k change is reported

    def finding(self, delta: dict[str, Any]) -> ClassificationFinding:
        return ClassificationFinding(bool(delta["changed"]), reference_top1=delta["reference_top1"],
                                     candidate_top1=delta["candidate_top1"], top1_flip=bool(delta["top1_flip"]),
                                     topk_changed=bool(delta["topk_changed"]))

    def gate(self, layout: Layout, ref: dict[str, Arrays], sim: dict[str, Arrays], limits: GateLimits) -> GateCount:
        per_input = {name: compare_top_k(class_scores(layout, ref[name]), class_scores(layout, sim[name]), limits)
                     for name in sorted(ref)}
        agree = sum(v["agree"] for v in per_input.values())
        return GateCount(per_input, len(per_input), agree,
                         f"{agree}/{len(per_input)} golden inputs keep the same top-{limits.top_k}")

    def decided_outputs(self, layout: Layout, output_names: tuple[str, ...]) -> set[str]:
        return set(layout.roles)


TASK = Classification()
