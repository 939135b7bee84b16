"""Instance segmentation (detect + mask): YOLOv8-seg / YOLO11-seg detections, each with its mask.

The same decision: the same class and mask IoU >= 0.5 (pairs best overlap first, each mask once); a
side without masks falls back to detection's box IoU. Everything else (records, the diff's delta,
convert's gate, presenter lines) is detection's: a masked detection is still a detection.
"""

from __future__ import annotations

import numpy as np

from rkdet.decode.common import Detections, mask_iou_matrix
from rkdet.decode.tasks.base import GateLimits, SameDecision
from rkdet.decode.tasks.detection import Detection

SAME = SameDecision("segmentation", "mask IoU", 0.5,
                    "same class and mask IoU >= 0.5 (pairs best overlap first, each mask once)")


class Segmentation(Detection):
    name = "segmentation"
    kinds = ("yolov8-seg",)
    same = SAME

    def overlap(self, ref: Detections, cand: Detections) -> tuple[np.ndarray, SameDecision]:
        """Mask IoU when both sides carry masks, else detection's box IoU."""
        if ref.masks is None or cand.masks is None:
            return super().overlap(ref, cand)
        if not len(ref) or not len(cand):
            return np.zeros((len(ref), len(cand))), SAME
        return mask_iou_matrix(ref.masks, cand.masks), SAME

    def gate_pair_iou(self, ref: Detections, cand: Detections, limits: GateLimits) -> float:
        """Masks pair at SAME's mask IoU (fidelity.match_iou is the box IoU)."""
        if ref.masks is None or cand.masks is None or SAME.min_iou is None:
            return super().gate_pair_iou(ref, cand, limits)
        return SAME.min_iou

    def gate_match_iou(self, limits: GateLimits) -> float | None:
        return SAME.min_iou


TASK = Segmentation()
