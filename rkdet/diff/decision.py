"""Decision-level comparison: does the difference change what the model *decides*?

Detections are matched greedily by overlap (best pairs first) as rkdet.decode.SAME_DECISION defines it per
task: box IoU for detectors, mask IoU for segmentation; a matched pair with a different class is a class
flip, unmatched reference detections are missing, unmatched candidate ones are extra. Classification
compares top-1 and the top-k set.
"""

from __future__ import annotations

import numpy as np

from rkdet.decode import SAME_DECISION, Detections, overlap_matrix

MATCH_IOU = SAME_DECISION["detection"].min_iou  # the one definition, in rkdet/decode/common.py
TOP_K = 5


def compare_detections(reference: Detections, candidate: Detections, match_iou: float | None = None) -> dict:
    """Counts and worst deltas between two detection lists (JSON-ready); `match_iou` overrides the rule's."""
    iou, rule = overlap_matrix(reference, candidate)
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


def compare_classification(reference: np.ndarray, candidate: np.ndarray, k: int = TOP_K) -> dict:
    """Top-1 flip and top-k set change between two score vectors (JSON-ready)."""
    k = min(k, reference.size)
    ref_top = np.argsort(-reference, kind="stable")[:k]
    cand_top = np.argsort(-candidate, kind="stable")[:k]
    top1_flip = bool(ref_top[0] != cand_top[0])
    topk_changed = set(ref_top.tolist()) != set(cand_top.tolist())
    return {
        "kind": "classification",
        "reference_top1": int(ref_top[0]),
        "candidate_top1": int(cand_top[0]),
        "top1_flip": top1_flip,
        "k": int(k),
        "topk_changed": topk_changed,
        "top1_score_delta": float(candidate[ref_top[0]] - reference[ref_top[0]]),
        "changed": top1_flip or topk_changed,
    }
