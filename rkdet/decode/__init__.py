"""What a model decided, recognised from its output layout, so convert's gate, `rkdet diff`, the fleet and
the self-check bundle judge decisions with one decoder.

Layouts (`KINDS`), each recognised from output names/shapes (rkdet/decode/layouts.py), decoded in
rkdet/decode/heads.py; detections are in model-input pixels:
* ``yolov8-single``: Ultralytics YOLOv8 / YOLO11 export, one output ``[1, 4+nc, N]`` (or ``[1, N, 4+nc]``),
  cx, cy, w, h in pixels (DFL applied), then class scores; N = the cells of strides 8/16/32.
* ``yolov8-split``: rknn_model_zoo's YOLOv8 / YOLO11 / YOLOv10 head: per stride a 64-channel DFL box map, an
  nc-channel class map and optionally a 1-channel score_sum; NCHW or NHWC. rkdet's default build emits it.
* ``ppyoloe-split``: the same with 17 (PP-YOLOE) or 8 (PicoDet) DFL bins, or four strides.
* ``picodet``: PP-PicoDet's Paddle export: per stride (8..64) scores ``[1, HW, nc]`` and GFL box
  distributions ``[1, HW, 4*(reg_max+1)]`` (flattened: the input size fixes the grids' shape).
* ``yolov5-single`` (``[1, N, 5+nc]``, 3 anchors per cell) and ``yolov5-split`` (per stride
  ``[1, 3*(5+nc), H, W]``): anchor-based with objectness.
* ``yolov10``: the NMS-free end-to-end output ``[1, K, 6]`` (K = max_det, 300 by default).
* ``yolov8-seg``: YOLOv8/YOLO11-seg, ``[1, 4+nc+32, N]`` plus prototypes ``[1, 32, H/4, W/4]``.
* ``classification``: one output ``[C]``, ``[1, C]`` or ``[1, C, 1, 1]``.
* ``semantic-seg``: one class-score map ``[1, C, H, W]`` (or ``[1, H, W, C]``) at the input's H, W whose name
  says segmentation (or any such map with ``--decoder semantic``): a label per pixel (rkdet/decode/tasks/semantic.py).
Any outputs, with the config's ``decision:`` section: ``declared`` (rkdet/decode/tasks/declared.py).
Anything else is ``none``: numeric comparison only, and the detail line says what the outputs were.
What a model decides, and what "the same decision" is, per task: rkdet/decode/tasks/ (the registry,
`task_of(layout)`; `SAME_DECISION`).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from rkdet.decode import layouts, tasks
from rkdet.decode.common import (
    CONF_THRESHOLD,
    IOU_THRESHOLD,
    MASK_THRESHOLD,
    MAX_DETECTIONS,
    Branch,
    Detections,
    Layout,
    iou_matrix,
    mask_iou_matrix,
    nms,
)
from rkdet.decode.tasks import SAME_DECISION, DecisionTask, SameDecision, overlap_matrix, task_of, task_of_record
from rkdet.decode.tasks import declared as declared_task
from rkdet.decode.tasks.classification import class_scores
from rkdet.choices import DECODERS
from rkdet.decode.heads import decode
from rkdet.errors import InputError

__all__ = ["CONF_THRESHOLD", "DECODERS", "IOU_THRESHOLD", "KINDS", "MASK_THRESHOLD", "MAX_DETECTIONS", "REG_MAX",
           "SAME_DECISION", "Branch", "DecisionTask", "Detections", "Layout", "SameDecision", "class_scores", "decode",
           "decode_detections", "decode_yolov8", "detect_layout", "input_hw", "iou_matrix", "mask_iou_matrix", "nms",
           "overlap_matrix", "task_of", "task_of_record"]

KINDS = ("yolov8-single", "yolov8-split", "ppyoloe-split", "picodet", "yolov5-single", "yolov5-split", "yolov10",
         "yolov8-seg", "classification", "semantic-seg", "declared", "none")
REG_MAX = 16  # YOLOv8's DFL bins (kept for callers that name it)
_FAMILY = {  # --decoder -> the kinds it accepts, and what it expects
    "yolov8": (("yolov8-single", "yolov8-split"), "the Ultralytics single output [1,4+nc,N] or the split head "
               "(64-channel box + nc-channel cls per stride)"),
    "yolov5": (("yolov5-single", "yolov5-split"), "[1,N,5+nc] (N = 3 anchors x the cells of strides 8/16/32) or "
               "three [1,3*(5+nc),H,W] maps"),
    "yolov10": (("yolov10", "yolov8-split"), "the end-to-end output [1,K,6] or rknn_model_zoo's split head"),
    "picodet": (("picodet", "ppyoloe-split"), "per stride scores [1,HW,nc] + box distributions [1,HW,4*(reg_max+1)], "
                "or maps of them"),
    "segmentation": (("yolov8-seg",), "[1,4+nc+M,N] detections plus [1,M,H/4,W/4] prototypes"),
    "classification": (("classification",), "one output shaped [C], [1,C] or [1,C,1,1]"),
    "semantic": (("semantic-seg",), "one class-score map [1,C,H,W] or [1,H,W,C] with 2 or more classes"),
}


def input_hw(shape: tuple[int, ...] | list[int] | None) -> tuple[int, int] | None:
    """(H, W) of an image input [1, 3, H, W] or [1, H, W, 3] (1 or 4 channels too); None otherwise."""
    if shape is None or len(shape) != 4:
        return None
    dims = [int(d) for d in shape]
    if dims[1] in (1, 3, 4) and dims[3] not in (1, 3, 4):
        return dims[2], dims[3]
    if dims[3] in (1, 3, 4):
        return dims[1], dims[2]
    return None


def _recognise(outputs: layouts.Outputs, hw: tuple[int, int] | None) -> Layout | None:
    return (layouts.segmentation(outputs, hw) or layouts.single_output(outputs, hw) or layouts.yolov5_split(outputs, hw)
            or layouts.split_head(outputs, hw) or layouts.picodet_flat(outputs, hw) or layouts.classification(outputs)
            or next((found for task in tasks.TASKS if (found := task.recognise(outputs, hw)) is not None), None))


def detect_layout(outputs: list[tuple[str, tuple[int, ...]]], requested: str = "auto",
                  input_size: tuple[int, int] | None = None,
                  declared: Mapping[str, declared_task.RuleSource] | None = None) -> Layout:
    """Choose the layout from output names and shapes (and the model's input H, W when known: a flattened
    or non-square grid needs it); `requested` forces a family or "none"; `declared` (the config's
    `decision.outputs`) names the app's own rule per output and wins over any recognised layout."""
    if requested not in DECODERS:
        raise InputError(f"--decoder {requested!r}: expected one of {', '.join(DECODERS)}")
    if requested == "none":
        return Layout("none", "decoder disabled (--decoder none)")
    outputs = [(n, tuple(int(d) for d in s)) for n, s in outputs]
    if declared:
        found = declared_task.layout_of(outputs, declared)
        found.task, found.same_decision = declared_task.TASK.name, declared_task.TASK.same.rule
        return found
    found = _recognise(outputs, input_size)
    forcing = next((t for t in tasks.TASKS if t.decoder is not None and t.decoder == requested), None)
    if forcing is not None:  # a task's own --decoder value: its layouts by shape alone (e.g. any class-score map)
        found = forcing.forced_layout(outputs, input_size)
    if found is None and input_size is not None:  # the input size may not be the decoder's (e.g. NHWC misread)
        found = _recognise(outputs, None)
    if requested != "auto":
        kinds, expected = _FAMILY[requested]
        if found is None or found.kind not in kinds:
            raise InputError(f"--decoder {requested}: outputs {layouts.shapes_text(outputs)} do not match {expected}")
    if found is not None:
        task = task_of(found)  # the layout carries its task's name and rule (records and reports show them)
        if task is not None:
            found.task, found.same_decision = task.name, task.same.rule
        return found
    return Layout("none", f"no known layout recognised from the output shapes ({layouts.shapes_text(outputs)[:200]}); "
                  "numeric comparison only")


def decode_detections(layout: Layout, arrays: dict[str, np.ndarray], conf: float = CONF_THRESHOLD,
                      iou: float = IOU_THRESHOLD) -> Detections:
    """Detections (with masks for segmentation) of any detection layout."""
    return decode(layout, arrays, conf, iou)


decode_yolov8 = decode_detections  # the name the YOLOv8-only decoder had

