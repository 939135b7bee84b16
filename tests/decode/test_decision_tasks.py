"""The decision-task registry (rkdet/decode/tasks/): every layout belongs to one task, records find their
task back, and a new task is one module plus one registry line — shown here by plugging a task in."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rkdet import decode
from rkdet.decode import KINDS, SAME_DECISION, Detections, Layout, detect_layout
from rkdet.decode import tasks
from rkdet.decode.tasks import DecisionTask, GateCount, SameDecision, decision_changed, decision_finding, task_of
from rkdet.decode.tasks.classification import compare_classification
from rkdet.diff.decision import compare_detections


def _dets(boxes: list[list[float]], classes: list[int], masks: np.ndarray | None = None) -> Detections:
    return Detections(np.array(boxes, dtype=np.float64).reshape(-1, 4), np.full(len(classes), 0.9),
                      np.array(classes, dtype=np.int64), masks)


def test_every_decoded_layout_kind_has_exactly_one_task() -> None:
    for kind in KINDS:
        owners = [t.name for t in tasks.TASKS if kind in t.kinds]
        assert len(owners) == (0 if kind == "none" else 1), (kind, owners)
    assert len({t.name for t in tasks.TASKS}) == len(tasks.TASKS)


def test_same_decision_rules_are_the_tasks_own() -> None:
    assert list(SAME_DECISION) == [t.name for t in tasks.TASKS]
    assert SAME_DECISION["detection"] == SameDecision("detection", "box IoU", 0.5, SAME_DECISION["detection"].rule)
    assert (SAME_DECISION["segmentation"].overlap, SAME_DECISION["segmentation"].min_iou) == ("mask IoU", 0.5)
    assert (SAME_DECISION["classification"].overlap, SAME_DECISION["classification"].min_iou) == ("top-k", None)


def test_layouts_carry_their_task() -> None:
    cls = detect_layout([("logits", (1, 10))])
    assert cls.task == "classification" and task_of(cls) is tasks.classification.TASK
    assert cls.to_json()["same_decision"] == SAME_DECISION["classification"].rule
    none = detect_layout([("x", (7, 3, 5))])
    assert none.task == "none" and task_of(none) is None and none.to_json()["same_decision"] is None


def test_records_find_their_task_and_changed_follows_it() -> None:
    ref = _dets([[0, 0, 10, 10], [20, 20, 40, 40]], [1, 2])
    flipped = _dets([[0, 0, 10, 10], [20, 20, 40, 40]], [1, 3])
    delta = compare_detections(ref, flipped)
    assert tasks.task_of_record(delta) is tasks.detection.TASK and decision_changed(delta)
    assert decision_finding(delta).terminal_text() == "1 flip/0 miss/0 extra"
    assert "1 class flip(s), 0 missing, 0 extra</span> of 2" in decision_finding(delta).html()
    same = compare_detections(ref, ref)
    assert not decision_changed(same) and decision_finding(same).terminal_text() == "same 2 boxes (IoU>=1.000)"
    masks = np.zeros((2, 8, 8), dtype=bool)
    masks[0, :4, :4] = masks[1, 4:, 4:] = True
    seg = compare_detections(_dets([[0, 0, 10, 10], [20, 20, 40, 40]], [1, 2], masks),
                             _dets([[0, 0, 10, 10], [20, 20, 40, 40]], [1, 2], masks))
    assert (seg["task"], seg["overlap"]) == ("segmentation", "mask IoU")
    assert tasks.task_of_record(seg) is tasks.segmentation.TASK and not decision_changed(seg)
    topk_only = compare_classification(np.array([0.9, 0.5, 0.4, 0.3, 0.2, 0.1]), np.array([0.9, 0.5, 0.4, 0.3, 0.1, 0.2]))
    assert topk_only["changed"] and not decision_changed(topk_only)  # the verdict counts top-1 flips only
    assert decision_finding(topk_only).terminal_text() == "top-k changed"
    flip = compare_classification(np.array([0.9, 0.1]), np.array([0.1, 0.9]))
    assert decision_changed(flip) and decision_finding(flip).html() == '<span class="bad">top-1 flip 0 → 1</span>'
    assert tasks.task_of_record({"kind": "none"}) is None and not decision_changed(None)


class _Parity(DecisionTask):
    """A toy task: the decision is the parity of an output's sum (what a plug-in has to declare)."""

    name = "parity"
    record_kind = "parity"
    kinds = ("parity-layout",)
    same = SameDecision("parity", "equal parity", None, "same parity of the sum")

    def recognise(self, outputs: list[tuple[str, tuple[int, ...]]], input_hw: Any) -> Layout | None:
        return Layout("parity-layout", "one output named parity") if [n for n, _ in outputs] == ["parity"] else None

    def decide(self, layout: Layout, arrays: dict[str, np.ndarray], conf: float = 0.25) -> int:
        return int(sum(float(a.sum()) for a in arrays.values())) % 2

    def summary(self, decided: int) -> dict[str, Any]:
        return {"kind": self.record_kind, "parity": decided}

    def bundle_summary(self, layout: Layout, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        return self.summary(self.decide(layout, arrays))

    def compare(self, reference: int, candidate: int) -> dict[str, Any]:
        return {"kind": self.record_kind, "changed": reference != candidate}

    def changed(self, delta: dict[str, Any]) -> bool:
        return bool(delta["changed"])

    def finding(self, delta: dict[str, Any]) -> Any:
        return type("F", (), {"kind": "parity", "changed": delta["changed"], "terminal_text": lambda s: "parity",
                              "html": lambda s: "parity"})()

    def gate(self, layout: Layout, ref: Any, sim: Any, limits: Any) -> GateCount:
        per = {n: int(self.decide(layout, ref[n]) == self.decide(layout, sim[n])) for n in sorted(ref)}
        return GateCount(per, len(per), sum(per.values()), "parity kept")


def test_a_new_task_is_one_module_plus_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    toy = _Parity()
    assert detect_layout([("parity", (1, 7, 3))]).kind == "none"
    monkeypatch.setattr(tasks, "TASKS", (*tasks.TASKS, toy))  # the registry line
    layout = detect_layout([("parity", (1, 7, 3))])  # the task brings its own layout
    assert (layout.kind, layout.task, layout.to_json()["same_decision"]) == ("parity-layout", "parity", "same parity of the sum")
    assert task_of(layout) is toy and detect_layout([("logits", (1, 10))]).task == "classification"
    delta = toy.compare(toy.decide(layout, {"o": np.array([1.0])}), toy.decide(layout, {"o": np.array([2.0])}))
    assert tasks.task_of_record(delta) is toy and decision_changed(delta) and decision_finding(delta).html() == "parity"
    assert decode.task_of(Layout("yolov8-seg", "x")) is tasks.segmentation.TASK  # the others unchanged
