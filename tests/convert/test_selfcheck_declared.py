"""rkdet-selfcheck judges the declared decisions (config `decision:`) too: the bundle carries the rule per
output (`decision_rules`), and a bundle whose outputs differ says whether the app's decision changed on
the differing input — decided on the board by the same rule the host's gate and diff use
(rkdet/onboard/decisions.py). Tiny real ONNX models (a two-head face classifier, a dense probability map)
run by the real onnxruntime as the runtime (the bundle's onnx-fp32 reference)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from rkdet.config import DecisionRule
from rkdet.convert.selfcheck_bundle import decision_summary, declared_rules
from rkdet.onboard import bundle as bundle_format
from rkdet.onboard import reference, selfcheck
from rkdet.onboard.hashing import file_sha256

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "decode"))
from decision_models import S, dense_map_model, two_head_model  # noqa: E402

FACE = {"prob": DecisionRule(rule="threshold", channel=1, threshold=0.7)}
DENSE = {"map": DecisionRule(rule="pixel-threshold", axis=-1, channel=1, threshold=0.6)}
MEAN, STD = [0.0, 0.0, 0.0], [255.0, 255.0, 255.0]


def _outputs(model: Path, tensor: np.ndarray) -> list[tuple[str, np.ndarray]]:
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return list(zip(names, sess.run(None, {"x": reference.fp32_input(tensor, MEAN, STD)})))


def _bundle(tmp_path: Path, model: Path, tensor: np.ndarray, expected: list[tuple[str, np.ndarray]],
            rules: dict | None) -> Path:
    doc = {"schema": bundle_format.BUNDLE_SCHEMA, "name": "m", "platform": "rk3588", "fingerprint": "ab" * 32,
           "models": {"onnxruntime": {"file": model.name, "sha256": file_sha256(str(model))}},
           "fed_input": {"layout": "NHWC", "dtype": "uint8", "shape": [1, S, S, 3], "mean": MEAN, "std": STD},
           "io": {"inputs": [{"name": "x", "shape": [1, S, S, 3], "dtype": "uint8"}], "outputs": [n for n, _ in expected]},
           "inputs": [{"name": "one", "tensor": bundle_format.encode_array(tensor),
                       "expected": {"onnx-fp32": [dict(bundle_format.encode_array(a), name=n) for n, a in expected]},
                       "decisions": {"onnx-fp32": {"kind": "none"}}}]}
    raw = rules is not None and isinstance(next(iter(rules.values()), None), dict)  # crafted: as written
    if rules is not None:
        doc["decision_rules"] = rules if raw else declared_rules(expected, rules)
        if not raw:
            doc["inputs"][0]["decisions"]["onnx-fp32"] = decision_summary(expected, declared=rules)
    path = tmp_path / "selfcheck.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture()
def face(tmp_path: Path) -> tuple[Path, np.ndarray, list[tuple[str, np.ndarray]]]:
    model = two_head_model(tmp_path / "face.onnx")
    tensor = np.random.default_rng(7).integers(0, 256, (1, S, S, 3), dtype=np.uint8)
    return model, tensor, _outputs(model, tensor)


def test_the_bundle_carries_the_declared_rules(face, tmp_path: Path) -> None:
    model, tensor, outs = face
    rules = declared_rules(outs, FACE)
    assert rules == {"prob": {"rule": "threshold", "axis": 1, "channel": 1, "threshold": 0.7, "boxes": None}}
    result = selfcheck.check(str(model), str(_bundle(tmp_path, model, tensor, outs, FACE)), backend="onnxruntime")
    assert result.ok and result.declared_changed is None, result.line


def test_a_flipped_declared_decision_fails_the_selfcheck_and_is_named(face, tmp_path: Path) -> None:
    model, tensor, outs = face
    prob = dict(outs)["prob"]
    face_now = bool(prob[0, 1] > 0.7)
    flipped = prob.copy()
    flipped[0, 1] = 0.1 if face_now else 0.95  # the bundle expects the other face / not-face decision
    expected = [("prob", flipped), ("box", dict(outs)["box"])]
    result = selfcheck.check(str(model), str(_bundle(tmp_path, model, tensor, expected, FACE)), backend="onnxruntime")
    assert result.exit_code == selfcheck.EXIT_DIFFERENT and result.status == "differs", result.line
    assert result.declared_changed == ["prob"]
    assert f"declared decision CHANGED: prob 1/1 (got {face_now}, expected {not face_now})" in result.line


def test_a_difference_that_keeps_the_declared_decision_says_so(face, tmp_path: Path) -> None:
    model, tensor, outs = face
    moved = dict(outs)["box"].copy()
    moved[0, 2] += 1.0  # only the box head differs: the face decision (prob) stands
    expected = [("prob", dict(outs)["prob"]), ("box", moved)]
    result = selfcheck.check(str(model), str(_bundle(tmp_path, model, tensor, expected, FACE)), backend="onnxruntime")
    assert result.exit_code == 1 and result.mismatch.output == "box", result.line
    assert result.declared_changed == [] and "; declared decisions unchanged (prob)" in result.line


def test_a_dense_map_counts_the_positions_whose_decision_flipped(tmp_path: Path) -> None:
    model = dense_map_model(tmp_path / "dense.onnx")
    tensor = np.random.default_rng(8).integers(0, 256, (1, S, S, 3), dtype=np.uint8)
    outs = _outputs(model, tensor)
    prob = dict(outs)["map"].copy()
    positive = prob[0, :, :, 1] > 0.6
    prob[0, :3, 0, 1] = np.where(positive[:3, 0], 0.2, 0.9)  # three positions decided the other way
    result = selfcheck.check(str(model), str(_bundle(tmp_path, model, tensor, [("map", prob)], DENSE)),
                             backend="onnxruntime")
    assert result.exit_code == 1 and result.declared_changed == ["map"], result.line
    assert f"declared decision CHANGED: map 3/{S * S}" in result.line


@pytest.mark.parametrize("rules, says", [
    ({"prob": {"rule": "run `id`"}}, "decision_rules.prob: expected a rule"),
    ({"score": {"rule": "argmax", "axis": 1}}, "decision_rules.score: expected a rule"),
    ({"prob": {"rule": "threshold", "axis": 1}}, "decision_rules.prob: a threshold rule needs channel"),
    ({"prob": {"rule": "argmax", "axis": 10 ** 9}}, "decision_rules.prob.axis: expected an integer"),
    ({"prob": {"rule": "boxes", "threshold": 0.5, "boxes": "../etc"}}, "a boxes rule needs boxes"),
    (["prob"], "decision_rules: expected an object"),
])
def test_crafted_rules_are_a_bad_bundle_in_one_line(face, tmp_path: Path, rules, says: str) -> None:
    model, tensor, outs = face
    path = _bundle(tmp_path, model, tensor, outs, None)
    doc = json.loads(path.read_text())
    doc["decision_rules"] = rules
    path.write_text(json.dumps(doc))
    result = selfcheck.check(str(model), str(path), backend="onnxruntime")
    assert result.exit_code == selfcheck.EXIT_BAD_BUNDLE and says in result.line and "\n" not in result.line, result.line


def test_a_rule_the_outputs_do_not_fit_is_not_judged_not_a_crash(face, tmp_path: Path) -> None:
    model, tensor, outs = face
    expected = [("prob", dict(outs)["prob"] + 0.5), ("box", dict(outs)["box"])]
    rules = {"prob": {"rule": "threshold", "axis": 1, "channel": 7, "threshold": 0.5}}  # prob has 2 channels
    result = selfcheck.check(str(model), str(_bundle(tmp_path, model, tensor, expected, rules)), backend="onnxruntime")
    assert result.exit_code == 1 and result.declared_changed is None
    assert "declared decisions not judged (output prob [1, 2] has no channel 7 on axis 1)" in result.line


def _many(tmp_path: Path, model: Path, cases: list[tuple[str, np.ndarray, list[tuple[str, np.ndarray]]]]) -> Path:
    """A bundle of several inputs (name, tensor, expected outputs), with FACE's rules and each input's
    expected decisions as convert writes them."""
    first = _bundle(tmp_path, model, cases[0][1], cases[0][2], FACE)
    doc = json.loads(first.read_text())
    doc["inputs"] = [{"name": name, "tensor": bundle_format.encode_array(tensor),
                      "expected": {"onnx-fp32": [dict(bundle_format.encode_array(a), name=n) for n, a in expected]},
                      "decisions": {"onnx-fp32": decision_summary(expected, declared=FACE)}}
                     for name, tensor, expected in cases]
    first.write_text(json.dumps(doc))
    return first


def test_every_differing_input_is_judged_not_only_the_first(face, tmp_path: Path) -> None:
    """The first differing input only moves a box (its face decision stands); the second flips the face
    decision: the self-check must say so, and name the input, though the first difference is elsewhere."""
    model, tensor, outs = face
    other = np.random.default_rng(11).integers(0, 256, (1, S, S, 3), dtype=np.uint8)
    moved = dict(outs)["box"].copy()
    moved[0, 2] += 1.0
    second = dict(_outputs(model, other))
    face_now = bool(second["prob"][0, 1] > 0.7)
    flipped = second["prob"].copy()
    flipped[0, 1] = 0.1 if face_now else 0.95
    cases = [("one", tensor, [("prob", dict(outs)["prob"]), ("box", moved)]),
             ("two", other, [("prob", flipped), ("box", second["box"])]),
             ("three", tensor, outs)]  # identical (the first test shows these outputs match bit for bit)
    result = selfcheck.check(str(model), str(_many(tmp_path, model, cases)), backend="onnxruntime")
    assert result.exit_code == selfcheck.EXIT_DIFFERENT and result.mismatch.input == "one", result.line
    assert result.mismatch.output == "box" and result.differing == ["one", "two"], result.line
    assert result.declared_changed == ["prob"] and result.declared_inputs == ["two"]
    assert "; 2 of 3 inputs differ" in result.line
    assert (f"; declared decision CHANGED on 1 of 2 differing inputs: input two: prob 1/1 (got {face_now}, "
            f"expected {not face_now})") in result.line
    assert "unchanged" not in result.line


def test_differing_inputs_that_all_keep_the_declared_decision_say_so(face, tmp_path: Path) -> None:
    model, tensor, outs = face
    other = np.random.default_rng(13).integers(0, 256, (1, S, S, 3), dtype=np.uint8)
    cases = []
    for name, t in (("one", tensor), ("two", other)):
        o = dict(_outputs(model, t))
        box = o["box"].copy()
        box[0, 0] += 2.0  # only the box head differs
        cases.append((name, t, [("prob", o["prob"]), ("box", box)]))
    result = selfcheck.check(str(model), str(_many(tmp_path, model, cases)), backend="onnxruntime")
    assert result.exit_code == 1 and result.differing == ["one", "two"], result.line
    assert result.declared_changed == [] and result.declared_inputs == []
    assert "; declared decisions unchanged (prob) on all 2 judged differing inputs" in result.line
