"""The records every decoder returns (layouts, detections) and the geometry they share (NMS, IoU).

What "the same decision" is per task lives with each task (rkdet/decode/tasks/, `SAME_DECISION`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

CONF_THRESHOLD = 0.25  # a detection counts from this score (Ultralytics' and rknn_model_zoo's default)
IOU_THRESHOLD = 0.45  # NMS (both, too)
MAX_DETECTIONS = 300
MASK_THRESHOLD = 0.5  # a mask pixel is set where sigmoid(coefficients . prototypes) > this


@dataclass
class Branch:
    """One stride of a split head: which output holds what, and how its channels are laid out."""

    stride: int
    size: tuple[int, int]  # H, W of the grid
    box: str
    cls: str
    score_sum: str | None = None
    channels_last: bool = False
    bins: int = 16  # DFL bins per side (YOLOv8 16, PP-YOLOE 17, PicoDet 8)
    flat: bool = False  # PicoDet export: (1, H*W, C) instead of a map


@dataclass
class Layout:
    """How a model's outputs are to be read, plus the meaningful slices of each output."""

    kind: str  # see rkdet.decode.KINDS
    detail: str
    roles: dict[str, str] = field(default_factory=dict)  # output name -> box | cls | score_sum | boxes+cls | scores | proto | detections
    slices: dict[str, dict[str, tuple]] = field(default_factory=dict)  # output -> slice name -> index tuple
    branches: list[Branch] = field(default_factory=list)
    nc: int = 0
    input_size: tuple[int, int] | None = None  # H, W
    transposed: bool = False  # single layout stored as [1, N, C]
    anchors: tuple[tuple[tuple[float, float], ...], ...] = ()  # YOLOv5: per stride, (w, h) in input pixels
    mask_coefs: int = 0  # segmentation: coefficients per detection (= prototype channels)

    task: str = "none"  # the decision task these outputs carry (rkdet/decode/tasks/), set by detect_layout
    same_decision: str | None = None  # that task's rule, in words
    rules: dict[str, Any] = field(default_factory=dict)  # declared decisions: output -> its rule (tasks/declared.py)

    def to_json(self) -> dict:
        doc = {"kind": self.kind, "task": self.task, "detail": self.detail, "roles": self.roles,
               "classes": self.nc or None, "input_size": list(self.input_size) if self.input_size else None,
               "slices": {o: sorted(s) for o, s in self.slices.items()}, "same_decision": self.same_decision}
        if self.rules:
            doc["rules"] = {n: dict(vars(r)) for n, r in self.rules.items()}
        return doc


@dataclass
class Detections:
    """Boxes (x1, y1, x2, y2) in input pixels, scores and class ids, best first; masks for segmentation
    (K, Hm, Wm) booleans at the prototypes' resolution, `mask_stride` input pixels per mask pixel."""

    boxes: np.ndarray  # (K, 4) float64
    scores: np.ndarray  # (K,)
    classes: np.ndarray  # (K,) int64
    masks: np.ndarray | None = None
    mask_stride: float = 1.0

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def as_list(self) -> list[dict]:
        out = [{"class": int(c), "score": float(s), "box": [float(v) for v in b]}
               for b, s, c in zip(self.boxes, self.scores, self.classes)]
        if self.masks is not None:
            for item, mask in zip(out, self.masks):
                item["mask_pixels"] = int(mask.sum())
        return out

    def subset(self, keep: np.ndarray) -> Detections:
        return Detections(self.boxes[keep], self.scores[keep], self.classes[keep],
                          None if self.masks is None else self.masks[keep], self.mask_stride)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def probabilities(x: np.ndarray) -> np.ndarray:
    """Scores as they are when already in [0, 1] (a Sigmoid in the model), else the sigmoid of the logits."""
    if x.size and (x.min() < 0 or x.max() > 1):
        return sigmoid(x.astype(np.float64))
    return x


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float = IOU_THRESHOLD,
        max_det: int = MAX_DETECTIONS) -> np.ndarray:
    """Indices kept by class-aware greedy NMS (boxes of different classes never suppress each other)."""
    if boxes.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    shifted = boxes + (classes.astype(np.float64) * (float(np.abs(boxes).max()) + 1.0))[:, None]
    x1, y1, x2, y2 = (np.ascontiguousarray(shifted[:, k]) for k in range(4))
    areas = np.maximum(x2 - x1, 0) * np.maximum(y2 - y1, 0)
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size and len(keep) < max_det:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        w = np.maximum(np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]), 0)
        h = np.maximum(np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]), 0)
        inter = w * h
        union = areas[i] + areas[rest] - inter
        iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of xyxy boxes, shape (len(a), len(b))."""
    w = np.maximum(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0)
    h = np.maximum(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0)
    inter = w * h
    area_a = np.maximum(a[:, 2] - a[:, 0], 0) * np.maximum(a[:, 3] - a[:, 1], 0)
    area_b = np.maximum(b[:, 2] - b[:, 0], 0) * np.maximum(b[:, 3] - b[:, 1], 0)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter, dtype=np.float64), where=union > 0)


def mask_iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of boolean masks (K, H, W) x (L, H, W); two empty masks overlap 0."""
    fa = a.reshape(a.shape[0], -1).astype(np.float64)
    fb = b.reshape(b.shape[0], -1).astype(np.float64)
    inter = fa @ fb.T
    union = fa.sum(axis=1)[:, None] + fb.sum(axis=1)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def finish(boxes: np.ndarray, cls_scores: np.ndarray, conf: float, iou: float,
           extra: np.ndarray | None = None) -> tuple[Detections, np.ndarray | None]:
    """Best class per candidate, confidence filter, NMS; `extra` rows (mask coefficients) follow the kept ones."""
    best = cls_scores.argmax(axis=1) if cls_scores.shape[1] else np.zeros(cls_scores.shape[0], np.int64)
    score = cls_scores[np.arange(cls_scores.shape[0]), best] if cls_scores.shape[1] else np.zeros(0)
    keep = np.flatnonzero(score > conf)
    boxes, score, best = boxes[keep], score[keep], best[keep]
    kept = nms(boxes, score, best, iou)
    dets = Detections(boxes[kept], score[kept].astype(np.float64), best[kept].astype(np.int64))
    return dets, None if extra is None else extra[keep][kept]


def finish_multi_label(boxes: np.ndarray, cls_scores: np.ndarray, conf: float, iou: float) -> Detections:
    """Every (candidate, class) above `conf` is a detection, then class-aware NMS: PaddleDetection's
    multiclass NMS (a PicoDet cell can report two classes), where `finish` keeps one class per candidate."""
    anchor, klass = np.nonzero(cls_scores > conf)
    score = cls_scores[anchor, klass]
    kept = nms(boxes[anchor], score, klass, iou)
    return Detections(boxes[anchor][kept], score[kept].astype(np.float64), klass[kept].astype(np.int64))
