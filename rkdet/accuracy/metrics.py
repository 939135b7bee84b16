"""Each task's accuracy against labels, from one variant's outputs decoded by the task registry.

* classification: top-1 (the headline) and top-5, the class order numpy's stable argsort gives (a tie to
  the lower index, as the diff's top-k).
* semantic segmentation: mean IoU over the data set: each class's intersections and unions summed over
  every image (the semantic task's one IoU rule, `semantic.class_overlaps`), classes absent from both the
  labels and the predictions left out, pixels labelled 255 not judged; pixel accuracy beside it.
* detection: COCO box mAP@0.5:0.95 (the headline) and mAP@0.5 by pycocotools' COCOeval, the detections
  decoded down to score EVAL_CONF (Ultralytics' and the model zoo's mAP setting) and mapped from the model
  input back to the page through the letterbox; YOLOv8-seg with polygons in every label: mask mAP (the
  headline), each mask mapped to the page the same way and RLE-encoded, box mAP beside it.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rkdet.accuracy.inputs import BuildModel, FedImage, fed_label_map
from rkdet.accuracy.labels import IGNORE, POLYGONS_KEY, ClassLabels, CocoLabels, LabelSet, MapLabels, read_label_map
from rkdet.accuracy.runs import VariantOutputs
from rkdet.convert.images import Letterbox
from rkdet.decode.tasks import DecisionTask, classification, detection, segmentation, semantic
from rkdet.errors import InputError

EVAL_CONF = 0.001  # detections kept for mAP (a precision-recall curve needs the low scores too)


@dataclass(frozen=True)
class Score:
    """One variant's accuracy: the headline metric and the others beside it."""

    metric: str  # "top-1", "mIoU", "box mAP@0.5:0.95"
    value: float  # 0..1
    others: dict[str, float] = field(default_factory=dict)
    samples: int = 0


def _need(labels: LabelSet, kind: type, what: str) -> None:
    if not isinstance(labels, kind):
        raise InputError(f"{labels.source}: these labels do not fit the model, which decides {what}")


def top_k(model: BuildModel, labels: LabelSet, run: VariantOutputs, fed: dict[str, FedImage]) -> Score:
    _need(labels, ClassLabels, "a class per image (labels: a folder per class or a CSV)")
    assert isinstance(labels, ClassLabels)
    hits1 = hits5 = 0
    for s in labels.samples:
        scores = model.task.decide(model.layout, run.outputs[s.name])
        order = np.argsort(-scores, kind="stable")
        truth = labels.truth[s.name]
        hits1 += int(order[0] == truth)
        hits5 += int(truth in order[:5].tolist())
    n = len(labels.samples)
    return Score("top-1", hits1 / n, {"top-5": hits5 / n}, n)


def mean_iou(model: BuildModel, labels: LabelSet, run: VariantOutputs, fed: dict[str, FedImage]) -> Score:
    _need(labels, MapLabels, "a label per pixel (labels: a folder of PNG label maps)")
    assert isinstance(labels, MapLabels)
    totals: dict[int, list[int]] = {}
    right = judged = 0
    for s in labels.samples:
        truth_full = read_label_map(labels.maps[s.name], fed[s.name].letterbox.source_size, int(model.layout.nc or 0))
        truth = fed_label_map(model, truth_full, IGNORE)
        predicted = model.task.decide(model.layout, run.outputs[s.name])
        keep = truth != IGNORE
        t, p = truth[keep].astype(np.int64), predicted[keep]
        for c, (inter, union) in semantic.class_overlaps(t, p).items():
            acc = totals.setdefault(c, [0, 0])
            acc[0] += inter
            acc[1] += union
        right += int((t == p).sum())
        judged += int(keep.sum())
    ious = semantic.iou_of({c: (i, u) for c, (i, u) in totals.items()})
    return Score("mIoU", semantic.mean_iou(ious), {"pixel accuracy": right / judged if judged else 1.0,
                                                   "classes judged": float(len(ious))}, len(labels.samples))


@dataclass(frozen=True)
class PageDetection:
    """One detection on the page: class index, COCO [x, y, width, height], score, and its mask on the page
    (bool (H, W)) when the model gives masks."""

    cls: int
    bbox: list[float]
    score: float
    mask: np.ndarray | None = None


def page_mask(mask: np.ndarray, stride: float, box: Letterbox) -> np.ndarray:
    """A mask at the prototypes' grid (Hm, Wm) as the page's pixels (H, W): each page pixel's centre mapped
    through the letterbox into the model input, then to the prototype cell holding it (outside: False)."""
    h, w = box.source_size
    hm, wm = mask.shape
    rows = np.floor(((np.arange(h) + 0.5) * box.scale_y + box.pad_top) / stride).astype(np.int64)
    cols = np.floor(((np.arange(w) + 0.5) * box.scale_x + box.pad_left) / stride).astype(np.int64)
    inside = ((rows >= 0) & (rows < hm))[:, None] & ((cols >= 0) & (cols < wm))[None, :]
    return mask[np.clip(rows, 0, hm - 1)][:, np.clip(cols, 0, wm - 1)] & inside


def page_detections(model: BuildModel, arrays: dict[str, np.ndarray], box: Letterbox, conf: float
                    ) -> list[PageDetection]:
    """One image's detections on the page: decoded by the task, mapped from the model input back through
    the letterbox, clipped to the page; empty boxes dropped; masks (YOLOv8-seg) mapped the same way."""
    dets = model.task.decide(model.layout, arrays, conf)
    h, w = box.source_size
    out = []
    for k, ((x1, y1, x2, y2), score, cls) in enumerate(zip(dets.boxes, dets.scores, dets.classes)):
        a = float(np.clip((x1 - box.pad_left) / box.scale_x, 0, w))
        c = float(np.clip((x2 - box.pad_left) / box.scale_x, 0, w))
        b = float(np.clip((y1 - box.pad_top) / box.scale_y, 0, h))
        d = float(np.clip((y2 - box.pad_top) / box.scale_y, 0, h))
        if c > a and d > b and int(cls) >= 0:
            mask = None if dets.masks is None else page_mask(dets.masks[k], dets.mask_stride, box)
            out.append(PageDetection(int(cls), [a, b, c - a, d - b], float(score), mask))
    return out


def _cocoeval(labels: CocoLabels, found: list[dict], kind: str) -> tuple[float, float]:
    """(mAP@0.5:0.95, mAP@0.5) of `found` by pycocotools' COCOeval (`kind`: "bbox" or "segm")."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if not found:
        return 0.0, 0.0
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress and summary
        truth = COCO()
        truth.dataset = labels.document
        truth.createIndex()
        evaluation = COCOeval(truth, truth.loadRes(found), kind)
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return max(0.0, float(evaluation.stats[0])), max(0.0, float(evaluation.stats[1]))  # -1: no ground truth


def _pycocotools_mask():  # type: ignore[no-untyped-def]
    """pycocotools' mask module, or one line saying how to get it (a host dependency in the lock)."""
    try:
        from pycocotools import mask
    except ImportError:
        raise InputError("detection accuracy needs pycocotools (a host dependency of rkdet: pip install rkdet's "
                         "requirements/host.lock.txt)") from None
    return mask


def coco_map(model: BuildModel, labels: LabelSet, run: VariantOutputs, fed: dict[str, FedImage]) -> Score:
    """Box mAP; with masks from the model and polygons in every label, mask mAP is the headline."""
    _need(labels, CocoLabels, "boxes (labels: a COCO .json)")
    assert isinstance(labels, CocoLabels)
    mask_utils = _pycocotools_mask()
    boxes, masks = [], []
    for s in labels.samples:
        if fed[s.name].letterbox.source_size != labels.sizes[s.name]:
            h, w = fed[s.name].letterbox.source_size
            raise InputError(f"{labels.source}: image {s.image.name!r} is {w}x{h} but the file says "
                             f"{labels.sizes[s.name][1]}x{labels.sizes[s.name][0]}; fix its width and height")
        for det in page_detections(model, run.outputs[s.name], fed[s.name].letterbox, EVAL_CONF):
            if det.cls >= len(labels.category_ids):
                continue
            common = {"image_id": labels.image_ids[s.name], "category_id": labels.category_ids[det.cls],
                      "score": det.score}
            boxes.append({**common, "bbox": det.bbox})
            if det.mask is not None:
                masks.append({**common, POLYGONS_KEY: mask_utils.encode(np.asfortranarray(det.mask.astype(np.uint8)))})
    box_map, box_50 = _cocoeval(labels, boxes, "bbox")
    others = {"mAP@0.5": box_50, "detections": float(len(boxes))}
    if labels.has_masks and masks:
        mask_map, mask_50 = _cocoeval(labels, masks, "segm")
        return Score("mask mAP@0.5:0.95", mask_map, {"mask mAP@0.5": mask_50, "box mAP@0.5:0.95": box_map, **others},
                     len(labels.samples))
    return Score("box mAP@0.5:0.95", box_map, others, len(labels.samples))


Metric = Callable[[BuildModel, LabelSet, VariantOutputs, dict[str, FedImage]], Score]
METRICS: dict[DecisionTask, Metric] = {  # the task registry's tasks -> their accuracy against labels
    classification.TASK: top_k,
    semantic.TASK: mean_iou,
    detection.TASK: coco_map,
    segmentation.TASK: coco_map,  # mask mAP when the labels carry polygons, else box mAP
}


def metric_for(model: BuildModel) -> Metric:
    found = METRICS.get(model.task)
    if found is None:
        raise InputError(f"{model.folder}: no accuracy metric for {model.layout.detail}")
    if found is coco_map:
        _pycocotools_mask()  # before any work: a missing evaluator is one line up front
    return found
