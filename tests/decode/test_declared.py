"""Declared decisions (config `decision:`): a two-head classifier and a dense probability map, tiny ONNX
models run by onnxruntime, judged by the app's own rule in convert's gate and in `rkdet diff`; a flipped
decision fails the gate, a near tie does not."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from rkdet.config import ConfigError, DecisionRule, load_decision
from rkdet.convert.fidelity import measure
from rkdet.config import FidelitySection
from rkdet.decode import detect_layout, task_of
from rkdet.decode.tasks import declared, decision_changed, decision_finding
from rkdet.diff.api import compare
from rkdet.errors import InputError
from rkdet.tolerance import Tolerance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diff"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from diff_helpers import ResultSetBuilder  # noqa: E402
from decision_models import S, dense_map_model, two_head_model  # noqa: E402

FACE = {"prob": DecisionRule(rule="threshold", channel=1, threshold=0.7)}
DENSE = {"map": DecisionRule(rule="pixel-threshold", axis=-1, channel=1, threshold=0.6)}


def _run(path: Path, n: int, seed: int = 5) -> dict[str, dict[str, np.ndarray]]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        x = rng.normal(0, 1, (1, 3, S, S)).astype(np.float32)
        out[f"g{i}"] = dict(zip(names, sess.run(None, {"x": x})))
    return out


def _gate(sim: dict, ref: dict, names: tuple[str, ...], rules: dict) -> tuple:
    report = measure(sim, ref, names, tuple(next(iter(ref.values()))[n].shape for n in names), "none",
                     FidelitySection(), input_hw=(S, S), declared=rules)
    return report, next(g for g in report.gates if g.gate == "decision")


def test_declared_rules_are_checked_against_the_outputs() -> None:
    outputs = [("prob", (1, 2)), ("box", (1, 4))]
    layout = detect_layout(outputs, declared=FACE)
    assert (layout.kind, layout.task) == ("declared", "declared") and task_of(layout) is declared.TASK
    assert layout.to_json()["rules"]["prob"] == {"rule": "threshold", "axis": 1, "channel": 1, "threshold": 0.7, "top_k": 1,
                                                 "boxes": None, "range": None}
    assert detect_layout(outputs).kind == "none"  # without the declaration: numeric only
    with pytest.raises(InputError, match=r"decision.outputs.score: the model has no output 'score'"):
        detect_layout(outputs, declared={"score": FACE["prob"]})
    with pytest.raises(InputError, match=r"decision.outputs.prob.channel: 2 is outside axis 1"):
        detect_layout(outputs, declared={"prob": DecisionRule(rule="threshold", channel=2, threshold=0.5)})


def test_two_head_classifier_gets_a_decision_verdict_and_a_flip_fails_it(tmp_path: Path) -> None:
    ref = _run(two_head_model(tmp_path / "m.onnx"), 4)
    report, gate = _gate(ref, ref, ("prob", "box"), FACE)
    assert report.decision["task"] == "declared" and gate.passed and gate.value == 1.0
    # the box head has no declared rule: its cosine gate stays binding
    assert any(g.gate == "cosine" and g.subject.startswith("box") and g.binding for g in report.gates)
    flipped = {k: {n: a.copy() for n, a in v.items()} for k, v in ref.items()}
    p = flipped["g2"]["prob"]
    p[0] = [0.05, 0.95] if ref["g2"]["prob"][0, 1] <= 0.7 else [0.95, 0.05]  # the app's yes/no flips, clearly
    _, gate = _gate(flipped, ref, ("prob", "box"), FACE)
    assert gate.passed is False and gate.value == pytest.approx(3 / 4)
    # a near tie (FP32 within score_tolerance of the threshold) is not a decision change
    near = {k: {n: a.copy() for n, a in v.items()} for k, v in ref.items()}
    near_ref = {k: {n: a.copy() for n, a in v.items()} for k, v in ref.items()}
    near_ref["g1"]["prob"][0] = [0.32, 0.68]
    near["g1"]["prob"][0] = [0.28, 0.72]
    _, gate = _gate(near, near_ref, ("prob", "box"), FACE)
    assert gate.passed


def test_dense_map_gets_a_decision_verdict(tmp_path: Path) -> None:
    ref = _run(dense_map_model(tmp_path / "d.onnx"), 3)
    report, gate = _gate(ref, ref, ("map",), DENSE)
    assert gate.passed and report.decision["inputs"]["g0"]["outputs"]["map"]["positions"] == S * S
    moved = {k: {"map": v["map"].copy()} for k, v in ref.items()}
    moved["g0"]["map"][0, :4] = moved["g0"]["map"][0, :4, :, ::-1]  # half the map's probabilities swapped
    report, gate = _gate(moved, ref, ("map",), DENSE)
    entry = report.decision["inputs"]["g0"]["outputs"]["map"]
    assert gate.passed is False and entry["changed_positions"] > 0 and entry["overlap"] < 1.0


def _result_set(path: Path, runs: dict[str, dict[str, np.ndarray]], names: list[str]) -> Path:
    b = ResultSetBuilder(path, list(runs), names)
    for entry in b.run["inputs"]:
        entry["shape"] = [1, 3, S, S]
    for name, outs in runs.items():
        b.add(0, name, [outs[n] for n in names])
    return b.close()


def test_diff_judges_the_declared_decision(tmp_path: Path) -> None:
    ref = _run(two_head_model(tmp_path / "m.onnx"), 3)
    board = {k: {n: a.copy() for n, a in v.items()} for k, v in ref.items()}
    board["g0"]["prob"][0] = [0.05, 0.95] if ref["g0"]["prob"][0, 1] <= 0.7 else [0.95, 0.05]
    a = _result_set(tmp_path / "board", board, ["prob", "box"])
    b = _result_set(tmp_path / "ref", ref, ["prob", "box"])
    c = compare(a, b, Tolerance(min_cosine=0.0), declared=FACE)
    assert c.layout is not None and c.layout.kind == "declared"
    assert c.agrees is not None and c.agrees.decisions_changed == 1 and c.exit_code == 1
    group = next(iter(c.a.inputs["g0"].groups.values()))
    delta = group.decision_vs_reference
    assert decision_changed(delta) and decision_finding(delta).terminal_text() == "prob: 1/1 changed"
    plain = compare(a, b, Tolerance(min_cosine=0.0))
    assert plain.agrees is not None and plain.agrees.decisions_changed is None  # not judged without it


def test_config_section_is_validated(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("decision:\n  outputs:\n    prob: {rule: threshold, channel: 1, threshold: 0.7}\n")
    section = load_decision(good)
    assert section is not None and section.outputs["prob"].threshold == 0.7
    bad = tmp_path / "bad.yaml"
    bad.write_text("decision:\n  outputs:\n    prob: {rule: threshold}\n")
    with pytest.raises(ConfigError, match="decision"):
        load_decision(bad)
    assert load_decision(tmp_path / "good.yaml") is not None
    none = tmp_path / "none.yaml"
    none.write_text("name: x\n")
    assert load_decision(none) is None


BOXES = {"scores": DecisionRule(rule="boxes", boxes="boxes", threshold=0.5, axis=-1)}


def _box_head(n: int = 6, seed: int = 9) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 100, (n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(10, 30, (n, 2))], axis=1)[None].astype(np.float32)
    scores = np.zeros((1, n, 2), np.float32)
    scores[0, :, 0] = rng.uniform(0, 0.2, n)
    scores[0, :3, 1] = [0.9, 0.85, 0.95]  # three candidates of class 1 clearly above 0.5
    return {"scores": scores, "boxes": boxes}


def test_a_box_and_score_head_is_judged_as_detections() -> None:
    head = _box_head()
    layout = detect_layout([("scores", (1, 6, 2)), ("boxes", (1, 6, 4))], declared=BOXES)
    assert layout.rules["scores"].boxes == "boxes"
    ref = {"g0": head, "g1": _box_head(seed=10)}
    _, gate = _gate(ref, ref, ("scores", "boxes"), BOXES)
    assert gate.passed and gate.value == 1.0
    dropped = {k: {n: a.copy() for n, a in v.items()} for k, v in ref.items()}
    dropped["g0"]["scores"][0, 0, 1] = 0.05  # one detection the app made is gone
    report, gate = _gate(dropped, ref, ("scores", "boxes"), BOXES)
    assert gate.passed is False and report.decision["inputs"]["g0"]["outputs"]["scores"]["disagreements"][0]["what"] == "missing"
    delta = declared.TASK.compare(declared.TASK.decide(layout, head), declared.TASK.decide(layout, dropped["g0"]))
    assert decision_changed(delta) and delta["outputs"]["scores"]["detections"]["missing"]
    with pytest.raises(InputError, match="decision.outputs.scores.boxes"):
        detect_layout([("scores", (1, 6, 2)), ("boxes", (1, 5, 4))], declared=BOXES)


def test_the_fleet_says_decision_differs_by_the_declared_rule(tmp_path: Path) -> None:
    from rkdet.fleets.run.classes import _difference

    ref = _run(two_head_model(tmp_path / "m.onnx"), 2)
    board = {k: {n: a.copy() for n, a in v.items()} for k, v in ref.items()}
    board["g1"]["prob"][0] = [0.05, 0.95] if ref["g1"]["prob"][0, 1] <= 0.7 else [0.95, 0.05]
    a = _result_set(tmp_path / "a", ref, ["prob", "box"])
    b = _result_set(tmp_path / "b", board, ["prob", "box"])
    judged = _difference("A", "B", a, b, Tolerance(), FACE)
    assert judged.decision_differs is True and judged.outputs_differing >= 1
    assert _difference("A", "B", a, b, Tolerance()).decision_differs is None  # undeclared: not judged
