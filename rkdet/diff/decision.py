"""Decision-level comparison: does the difference change what the model *decides*?

Each decision task declares its comparison (rkdet/decode/tasks/): detections are matched greedily by
overlap (best pairs first) as the task's `SameDecision` says — box IoU for detectors, mask IoU for
segmentation; a matched pair with a different class is a class flip, unmatched reference detections are
missing, unmatched candidate ones are extra. Classification compares top-1 and the top-k set. This
module keeps the names the diff has always exported.
"""

from __future__ import annotations

from rkdet.decode import SAME_DECISION
from rkdet.decode.tasks import compare_detections
from rkdet.decode.tasks.classification import TOP_K, compare_classification
from rkdet.decode.tasks.detection import SAME

__all__ = ["MATCH_IOU", "SAME_DECISION", "TOP_K", "compare_classification", "compare_detections"]

MATCH_IOU = SAME.min_iou  # the one definition, in rkdet/decode/tasks/detection.py
