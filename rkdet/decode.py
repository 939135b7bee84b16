"""Output layouts and decoders: YOLOv8 (Ultralytics single output, rknn_model_zoo split head)
and classification, recognised from output shapes so `rkdet diff` can judge decisions.

Layouts understood:
* ``yolov8-single``: Ultralytics export, one output ``[1, 4+nc, N]`` (or ``[1, N, 4+nc]``) with
  rows 0..3 = cx, cy, w, h in input pixels (DFL already applied) and rows 4.. = class scores.
  ``N = 21 * (S/32)^2`` for a square input of side S (strides 8, 16, 32).
* ``yolov8-split``: per stride one box output with 64 channels (4 sides x 16 DFL bins), one class
  output with nc channels (sigmoid applied, or logits: detected by range) and optionally a 1-channel
  score_sum (rknn_model_zoo); NCHW or NHWC. The default rkdet build emits box0, cls0, box1, ...
* ``classification``: one output ``[C]``, ``[1, C]`` or ``[1, C, 1, 1]``.
DFL and NMS are numpy; detections are in model-input pixels (the letterboxed image).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rkdet.errors import InputError

DECODERS = ("auto", "yolov8", "classification", "none")
REG_MAX = 16
CONF_THRESHOLD = 0.25
IOU_THRESHOLD = 0.45
MAX_DETECTIONS = 300


@dataclass
class Branch:
    """One stride of a split head: which output holds what, and how its channels are laid out."""

    stride: int
    size: tuple[int, int]  # H, W
    box: str
    cls: str
    score_sum: str | None = None
    channels_last: bool = False


@dataclass
class Layout:
    """How a model's outputs are to be read, plus the meaningful slices of each output."""

    kind: str  # "yolov8-single" | "yolov8-split" | "classification" | "none"
    detail: str
    roles: dict[str, str] = field(default_factory=dict)  # output name -> box | cls | score_sum | boxes+cls | scores
    slices: dict[str, dict[str, tuple]] = field(default_factory=dict)  # output -> slice name -> index tuple
    branches: list[Branch] = field(default_factory=list)
    nc: int = 0
    input_size: tuple[int, int] | None = None  # H, W
    transposed: bool = False  # single layout stored as [1, N, 4+nc]

    def as_dict(self) -> dict:
        return {"kind": self.kind, "detail": self.detail, "roles": self.roles, "classes": self.nc or None,
                "input_size": list(self.input_size) if self.input_size else None,
                "slices": {o: sorted(s) for o, s in self.slices.items()}}


@dataclass
class Detections:
    """Boxes (x1, y1, x2, y2) in input pixels, scores and class ids after NMS, best first."""

    boxes: np.ndarray  # (K, 4) float64
    scores: np.ndarray  # (K,)
    classes: np.ndarray  # (K,) int64

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def as_list(self) -> list[dict]:
        return [{"class": int(c), "score": float(s), "box": [float(v) for v in b]}
                for b, s, c in zip(self.boxes, self.scores, self.classes)]


def _anchors_for(side: int) -> int | None:
    """Input side S such that strides 8/16/32 give `side` anchors in total, if any."""
    unit = side / 21
    root = math.isqrt(int(unit)) if unit == int(unit) else -1
    return 32 * root if root > 0 and root * root == unit else None


def _split_branches(outputs: list[tuple[str, tuple[int, ...]]]) -> tuple[list[Branch], int] | None:
    if not outputs or any(len(shape) != 4 or shape[0] != 1 for _, shape in outputs):
        return None
    # NCHW (the toolkit's default) when every output is square in its last two dims, else NHWC.
    if all(shape[2] == shape[3] for _, shape in outputs):
        channels_last = False
    elif all(shape[1] == shape[2] for _, shape in outputs):
        channels_last = True
    else:
        return None
    groups: dict[tuple[int, int], list[tuple[str, int, bool]]] = {}
    for name, shape in outputs:
        size, channels = ((shape[1], shape[2]), shape[3]) if channels_last else ((shape[2], shape[3]), shape[1])
        groups.setdefault(size, []).append((name, channels, channels_last))
    if len(groups) < 2:
        return None
    sizes = sorted(groups, reverse=True)
    branches: list[Branch] = []
    nc = 0
    for i, size in enumerate(sizes):
        members = groups[size]
        if i and sizes[i - 1][0] != 2 * size[0]:
            return None
        box = [m for m in members if m[1] == 4 * REG_MAX and "cls" not in m[0].lower()]
        score = [m for m in members if m[1] == 1]
        cls = [m for m in members if m not in box and m not in score]
        if len(box) != 1 or len(cls) != 1 or len(score) > 1 or len(members) != 2 + len(score):
            return None
        if nc and cls[0][1] != nc:
            return None
        nc = cls[0][1]
        branches.append(Branch(0, size, box[0][0], cls[0][0], score[0][0] if score else None, box[0][2]))
    stride = 8
    for b in branches:
        b.stride = stride
        stride *= 2
    return branches, nc


def detect_layout(outputs: list[tuple[str, tuple[int, ...]]], requested: str = "auto") -> Layout:
    """Choose the layout from output names and shapes; `requested` forces a family or "none"."""
    if requested not in DECODERS:
        raise InputError(f"--decoder {requested!r}: expected one of {', '.join(DECODERS)}")
    if requested == "none":
        return Layout("none", "decoder disabled (--decoder none)")
    if requested in ("auto", "yolov8"):
        if len(outputs) == 1 and len(outputs[0][1]) == 3 and outputs[0][1][0] == 1:
            name, (_, rows, cols) = outputs[0]
            for transposed, (channels, anchors) in ((False, (rows, cols)), (True, (cols, rows))):
                side = _anchors_for(anchors)
                if 4 < channels < anchors and side:  # anchors always outnumber 4+nc channels
                    nc = channels - 4
                    box = (slice(None), slice(None), slice(0, 4)) if transposed else (slice(None), slice(0, 4))
                    cls = (slice(None), slice(None), slice(4, None)) if transposed else (slice(None), slice(4, None))
                    return Layout("yolov8-single", f"Ultralytics YOLOv8 single output {name} {list(outputs[0][1])}: "
                                  f"{nc} classes, {side}x{side} input", roles={name: "boxes+cls"},
                                  slices={name: {"box": box, "cls": cls}}, nc=nc, input_size=(side, side),
                                  transposed=transposed)
        split = _split_branches(outputs)
        if split:
            branches, nc = split
            roles: dict[str, str] = {}
            for b in branches:
                roles[b.box], roles[b.cls] = "box", "cls"
                if b.score_sum:
                    roles[b.score_sum] = "score_sum"
            side = branches[0].size[0] * 8
            return Layout("yolov8-split", f"YOLOv8 split head: {len(branches)} branches (strides "
                          f"{'/'.join(str(b.stride) for b in branches)}), 64-channel DFL box + {nc}-class cls"
                          f"{' + score_sum' if branches[0].score_sum else ''}, {side}x{branches[0].size[1] * 8} input",
                          roles=roles, branches=branches, nc=nc, input_size=(side, branches[0].size[1] * 8))
        if requested == "yolov8":
            raise InputError("--decoder yolov8: outputs " + ", ".join(f"{n}{list(s)}" for n, s in outputs) +
                             " match neither the Ultralytics single output [1,4+nc,N] nor the split head "
                             "(64-channel box + nc-channel cls per stride)")
    if len(outputs) == 1:
        name, shape = outputs[0]
        dims = [d for d in shape if d != 1]
        if len(dims) == 1 and dims[0] > 1 and (len(shape) <= 2 or shape[-2:] == (1, 1)):
            return Layout("classification", f"classification: {dims[0]} classes in {name}", roles={name: "scores"},
                          nc=dims[0])
    if requested == "classification":
        raise InputError("--decoder classification: expected one output shaped [C], [1,C] or [1,C,1,1], got " +
                         ", ".join(f"{n}{list(s)}" for n, s in outputs))
    return Layout("none", "no known layout recognised from the output shapes; numeric comparison only")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


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


def _finish(boxes: np.ndarray, cls_scores: np.ndarray, conf: float, iou: float) -> Detections:
    """Best class per anchor, confidence filter, NMS; `cls_scores` is (A, nc), `boxes` a callable-free (A, 4)."""
    best = cls_scores.argmax(axis=1)
    score = cls_scores[np.arange(cls_scores.shape[0]), best]
    keep = np.flatnonzero(score > conf)
    boxes, score, best = boxes[keep], score[keep], best[keep]
    kept = nms(boxes, score, best, iou)
    return Detections(boxes[kept], score[kept].astype(np.float64), best[kept].astype(np.int64))


def decode_yolov8(layout: Layout, arrays: dict[str, np.ndarray], conf: float = CONF_THRESHOLD,
                  iou: float = IOU_THRESHOLD) -> Detections:
    """Detections from either YOLOv8 layout (dequantize-free: outputs are float or integer scores)."""
    if layout.kind == "yolov8-single":
        (name,) = layout.roles
        out = np.asarray(arrays[name], dtype=np.float64)[0]
        out = out if not layout.transposed else out.T  # (4+nc, N)
        cls = out[4:].T
        if cls.size and (cls.min() < 0 or cls.max() > 1):
            cls = _sigmoid(cls)
        cx, cy, w, h = out[0], out[1], out[2], out[3]
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
        return _finish(boxes, cls, conf, iou)
    if layout.kind != "yolov8-split":
        raise ValueError(f"not a YOLOv8 layout: {layout.kind}")
    all_boxes: list[np.ndarray] = []
    all_cls: list[np.ndarray] = []
    for b in layout.branches:
        box = np.asarray(arrays[b.box])[0]  # native dtype: only the candidates are converted
        cls = np.asarray(arrays[b.cls])[0]
        if b.channels_last:
            box, cls = box.transpose(2, 0, 1), cls.transpose(2, 0, 1)
        h, w = b.size
        cls = cls.reshape(cls.shape[0], h * w).T  # (HW, nc)
        if cls.size and (cls.min() < 0 or cls.max() > 1):
            cls = _sigmoid(cls.astype(np.float64))
        candidates = np.flatnonzero(cls.max(axis=1) > conf)  # DFL only where a class could survive
        bins = box.reshape(4, REG_MAX, h * w)[:, :, candidates].astype(np.float64)
        bins = np.exp(bins - bins.max(axis=1, keepdims=True))
        dist = (bins * np.arange(REG_MAX)[None, :, None]).sum(axis=1) / bins.sum(axis=1)  # (4, K)
        ax = (candidates % w) + 0.5
        ay = (candidates // w) + 0.5
        xyxy = np.stack([ax - dist[0], ay - dist[1], ax + dist[2], ay + dist[3]], axis=1) * b.stride
        all_boxes.append(xyxy)
        all_cls.append(cls[candidates].astype(np.float64))
    return _finish(np.concatenate(all_boxes), np.concatenate(all_cls), conf, iou)


def class_scores(layout: Layout, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The flat score vector of a classification output."""
    (name,) = layout.roles
    return np.asarray(arrays[name], dtype=np.float64).ravel()
