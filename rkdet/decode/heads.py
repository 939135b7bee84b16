"""Decoders per family: model outputs -> Detections in model-input pixels (numpy; NMS where the head needs it).

Box conventions (facts of each family's own post-processing, e.g. rknn_model_zoo's Python examples):
* DFL heads (YOLOv8/YOLO11, PP-YOLOE, PicoDet): per cell the softmax expectation over the bins of each
  side gives the distances (left, top, right, bottom) in strides from the cell centre (col + 0.5, row + 0.5).
  PicoDet's Paddle export is post-processed as PaddleDetection does: every class above the threshold is a
  detection (multiclass NMS); the others keep the best class per cell (Ultralytics, rknn_model_zoo).
* YOLOv5 maps: sigmoid outputs; centre = (2 * s_xy - 0.5 + cell) * stride, size = (2 * s_wh)^2 * anchor;
  score = objectness * class score. The single output already holds cx, cy, w, h in pixels.
* YOLOv10 end-to-end: rows (x1, y1, x2, y2, score, class), already one per object: no NMS.
* YOLOv8-seg: mask = sigmoid(coefficients . prototypes) > MASK_THRESHOLD, cropped to the box, at the
  prototypes' resolution (a quarter of the input).
Scores outside [0, 1] are logits and get the sigmoid first (a head exported without its Sigmoid).
"""

from __future__ import annotations

import numpy as np

from rkdet.decode.common import (
    CONF_THRESHOLD,
    IOU_THRESHOLD,
    MASK_THRESHOLD,
    Detections,
    Layout,
    finish,
    finish_multi_label,
    probabilities,
    sigmoid,
)

Arrays = dict[str, np.ndarray]


def _cxcywh(cx: np.ndarray, cy: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def _rows(layout: Layout, array: np.ndarray) -> np.ndarray:
    """A single output as (channels, N) float64 whichever way it is stored."""
    out = np.asarray(array, dtype=np.float64)[0]
    return out.T if layout.transposed else out


def single(layout: Layout, arrays: Arrays, conf: float, iou: float) -> Detections:
    """yolov8-single and yolov5-single."""
    (name,) = layout.roles
    out = _rows(layout, arrays[name])
    boxes = _cxcywh(out[0], out[1], out[2], out[3])
    if layout.kind == "yolov5-single":
        scores = probabilities(out[4])[:, None] * probabilities(out[5:].T)
    else:
        scores = probabilities(out[4:].T)
    return finish(boxes, scores, conf, iou)[0]


def split(layout: Layout, arrays: Arrays, conf: float, iou: float) -> Detections:
    """DFL split heads: yolov8-split, ppyoloe-split (maps) and picodet (flattened grids)."""
    all_boxes: list[np.ndarray] = []
    all_cls: list[np.ndarray] = []
    for b in layout.branches:
        box = np.asarray(arrays[b.box])[0]  # native dtype: only the candidates are converted
        cls = np.asarray(arrays[b.cls])[0]
        h, w = b.size
        if b.flat:  # (HW, C)
            box, cls = box.T, cls
        else:
            if b.channels_last:
                box, cls = box.transpose(2, 0, 1), cls.transpose(2, 0, 1)
            box, cls = box.reshape(box.shape[0], h * w), cls.reshape(cls.shape[0], h * w).T
        cls = probabilities(cls)
        candidates = np.flatnonzero(cls.max(axis=1) > conf)  # DFL only where a class could survive
        bins = box.reshape(4, b.bins, h * w)[:, :, candidates].astype(np.float64)
        bins = np.exp(bins - bins.max(axis=1, keepdims=True))
        dist = (bins * np.arange(b.bins)[None, :, None]).sum(axis=1) / bins.sum(axis=1)  # (4, K)
        ax = (candidates % w) + 0.5
        ay = (candidates // w) + 0.5
        all_boxes.append(np.stack([ax - dist[0], ay - dist[1], ax + dist[2], ay + dist[3]], axis=1) * b.stride)
        all_cls.append(cls[candidates].astype(np.float64))
    if layout.kind == "picodet":  # the Paddle export's own post-processing: every class above conf, per class NMS
        return finish_multi_label(np.concatenate(all_boxes), np.concatenate(all_cls), conf, iou)
    return finish(np.concatenate(all_boxes), np.concatenate(all_cls), conf, iou)[0]


def yolov5_maps(layout: Layout, arrays: Arrays, conf: float, iou: float) -> Detections:
    """yolov5-split: three anchors per cell per stride."""
    all_boxes: list[np.ndarray] = []
    all_scores: list[np.ndarray] = []
    per = 5 + layout.nc
    for b, anchors in zip(layout.branches, layout.anchors):
        out = np.asarray(arrays[b.box], dtype=np.float64)[0]
        if b.channels_last:
            out = out.transpose(2, 0, 1)
        h, w = b.size
        p = probabilities(out.reshape(len(anchors), per, h * w))  # (A, 5+nc, HW)
        cells = np.arange(h * w)
        gx, gy = (cells % w).astype(np.float64), (cells // w).astype(np.float64)
        for a, (aw, ah) in enumerate(anchors):
            cx = (p[a, 0] * 2 - 0.5 + gx) * b.stride
            cy = (p[a, 1] * 2 - 0.5 + gy) * b.stride
            bw, bh = (p[a, 2] * 2) ** 2 * aw, (p[a, 3] * 2) ** 2 * ah
            all_boxes.append(_cxcywh(cx, cy, bw, bh))
            all_scores.append(p[a, 4][:, None] * p[a, 5:].T)
    return finish(np.concatenate(all_boxes), np.concatenate(all_scores), conf, iou)[0]


def end_to_end(layout: Layout, arrays: Arrays, conf: float) -> Detections:
    """yolov10: one row per object, best first; only the confidence filter applies."""
    (name,) = layout.roles
    rows = np.asarray(arrays[name], dtype=np.float64)[0]
    keep = np.flatnonzero(rows[:, 4] > conf)
    keep = keep[np.argsort(-rows[keep, 4], kind="stable")]
    return Detections(rows[keep, :4].copy(), rows[keep, 4].copy(), np.rint(rows[keep, 5]).astype(np.int64))


def segmentation(layout: Layout, arrays: Arrays, conf: float, iou: float) -> Detections:
    """yolov8-seg: detections as yolov8-single, then each kept detection's mask from the prototypes."""
    det_name = next(n for n, r in layout.roles.items() if r != "proto")
    proto_name = next(n for n, r in layout.roles.items() if r == "proto")
    out = _rows(layout, arrays[det_name])
    nc, m = layout.nc, layout.mask_coefs
    boxes = _cxcywh(out[0], out[1], out[2], out[3])
    dets, coefs = finish(boxes, probabilities(out[4:4 + nc].T), conf, iou, extra=out[4 + nc:4 + nc + m].T)
    proto = np.asarray(arrays[proto_name], dtype=np.float64)[0]  # (M, Hm, Wm)
    _, hm, wm = proto.shape
    assert layout.input_size is not None and coefs is not None
    stride = layout.input_size[0] / hm
    masks = sigmoid(coefs @ proto.reshape(m, -1)).reshape(-1, hm, wm) > MASK_THRESHOLD
    ys = (np.arange(hm) + 0.5) * stride
    xs = (np.arange(wm) + 0.5) * stride
    for k, (x1, y1, x2, y2) in enumerate(dets.boxes):
        inside = ((ys >= y1) & (ys < y2))[:, None] & ((xs >= x1) & (xs < x2))[None, :]
        masks[k] &= inside
    dets.masks, dets.mask_stride = masks, stride
    return dets


def decode(layout: Layout, arrays: Arrays, conf: float = CONF_THRESHOLD, iou: float = IOU_THRESHOLD) -> Detections:
    """Detections of any recognised detection or segmentation layout."""
    if layout.kind in ("yolov8-single", "yolov5-single"):
        return single(layout, arrays, conf, iou)
    if layout.kind in ("yolov8-split", "ppyoloe-split", "picodet"):
        return split(layout, arrays, conf, iou)
    if layout.kind == "yolov5-split":
        return yolov5_maps(layout, arrays, conf, iou)
    if layout.kind == "yolov10":
        return end_to_end(layout, arrays, conf)
    if layout.kind == "yolov8-seg":
        return segmentation(layout, arrays, conf, iou)
    raise ValueError(f"not a detection layout: {layout.kind}")
