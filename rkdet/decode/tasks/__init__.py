"""The decision tasks, one registry: every task a model can decide, each declared once in its module.

A task module (`detection.py`, `segmentation.py`, `classification.py`, `semantic.py`, `declared.py`) declares the layouts it decodes,
its decision records, what "the same decision" means with its thresholds, convert's decision gate and
the presenters' lines; `TASKS` lists them. Convert, the diff, the self-check bundle and the presenters
ask here (`task_of(layout)`, `task_of_record(record)`) and never compare task names: a task name as a
string literal outside this package fails tests/test_architecture.py. Adding a task is one module
here plus one line in `TASKS`.
"""

from __future__ import annotations

from typing import Any

from rkdet.decode.common import Detections, Layout
from rkdet.decode.tasks import classification, declared, detection, segmentation, semantic
from rkdet.decode.tasks.base import DecisionFinding, DecisionTask, GateCount, GateLimits, SameDecision

__all__ = ["SAME_DECISION", "TASKS", "DecisionFinding", "DecisionTask", "GateCount", "GateLimits", "SameDecision",
           "decision_finding", "decision_changed", "overlap_matrix", "task_of", "task_of_record"]

TASKS: tuple[DecisionTask, ...] = (
    detection.TASK,
    segmentation.TASK,
    classification.TASK,
    semantic.TASK,
    declared.TASK,
)
SAME_DECISION: dict[str, SameDecision] = {t.name: t.same for t in TASKS}  # task name -> its rule


def task_of(layout: Layout) -> DecisionTask | None:
    """The task whose decisions a layout's outputs carry; None: no decoder (numeric comparison only)."""
    return next((t for t in TASKS if t.handles(layout)), None)


def task_of_record(record: dict[str, Any] | None) -> DecisionTask | None:
    """The task that wrote a decision record (a summary or a delta): by its "task", else its "kind"."""
    if not isinstance(record, dict):
        return None
    named = next((t for t in TASKS if t.name == record.get("task")), None)
    return named or next((t for t in TASKS if t.record_kind == record.get("kind")), None)


def decision_changed(delta: dict[str, Any] | None) -> bool:
    """Does a diff delta change the decision (its task says what counts)?"""
    if not delta:
        return False
    task = task_of_record(delta)
    return task.changed(delta) if task is not None else bool(delta.get("changed"))


def decision_finding(delta: dict[str, Any]) -> DecisionFinding:
    """The typed finding of a diff delta, for the presenters."""
    task = task_of_record(delta)
    if task is None:
        raise ValueError(f"not a decision record: kind {delta.get('kind')!r}")
    return task.finding(delta)


def overlap_matrix(ref: Detections, cand: Detections) -> tuple[Any, SameDecision]:
    """The overlap two detection lists pair by, and its rule: masks (segmentation) when both carry them."""
    task = segmentation.TASK if ref.masks is not None and cand.masks is not None else detection.TASK
    return task.overlap(ref, cand)


def compare_detections(reference: Detections, candidate: Detections, match_iou: float | None = None) -> dict:
    """The diff's detection delta, paired by mask IoU when both sides carry masks, else box IoU."""
    task = segmentation.TASK if reference.masks is not None and candidate.masks is not None else detection.TASK
    return detection.compare_detections(task, reference, candidate, match_iou)
