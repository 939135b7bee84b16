"""The near-tie band of a declared threshold (rkdet/decode/tasks/declared.py, near_tie_band): bounded by the
output's declared range, so a flip of a confident score is a changed decision with the default tolerance
(PaddleOCR's direction classifier at 0.9 lost every rotation to INT8 and passed while the band was 0.9 ± 0.15),
while a genuine tie at the threshold stays a near tie. Known scores, judged by convert's gate (measure)."""

from __future__ import annotations

import numpy as np
import pytest

from rkdet.config import ConfigError, DecisionRule, FidelitySection, load_decision
from rkdet.convert.fidelity import measure
from rkdet.decode import detect_layout
from rkdet.decode.tasks import declared
from rkdet.errors import InputError
from pydantic import ValidationError

PROB = DecisionRule(rule="threshold", channel=1, threshold=0.9, range=(0.0, 1.0))  # the cls app's rule


def _scores(*class1: float) -> dict[str, dict[str, np.ndarray]]:
    """One golden input per score: a softmax pair [1 - p, p]."""
    return {f"g{i}": {"prob": np.array([[1 - p, p]], np.float32)} for i, p in enumerate(class1)}


def _gate(sim: dict, ref: dict, rule: DecisionRule, limits: FidelitySection = FidelitySection()):
    report = measure(sim, ref, ("prob",), ((1, 2),), "none", limits, declared={"prob": rule})
    return report, next(g for g in report.gates if g.gate == "decision")


def _band(rule: DecisionRule, tol: float = 0.15) -> declared.Band:
    return declared.near_tie_band("prob", declared.rules_of({"prob": rule})["prob"], tol)


def test_the_band_covers_the_same_share_of_the_room_at_every_threshold() -> None:
    def at(t: float) -> declared.Band:
        return _band(DecisionRule(rule="threshold", channel=1, threshold=t, range=(0.0, 1.0)))

    assert (at(0.5).low, at(0.5).high) == pytest.approx((0.35, 0.65))  # mid-range: the tolerance itself
    assert (at(0.9).low, at(0.9).high) == pytest.approx((0.87, 0.93))  # 0.15 * 0.1 / 0.5 = 0.03
    assert (at(0.1).low, at(0.1).high) == pytest.approx((0.07, 0.13))
    assert (at(0.3).low, at(0.3).high) == pytest.approx((0.21, 0.39))  # the detector's threshold
    for t in (0.01, 0.3, 0.5, 0.9, 0.999):  # never wider than the tolerance, never at the range's end
        b = at(t)
        assert b.bounded and 0 < b.low <= b.high < 1 and b.half_width <= 0.15 + 1e-12
    logits = _band(DecisionRule(rule="threshold", channel=1, threshold=0.9))  # no range: no bound known
    assert not logits.bounded and (logits.low, logits.high) == pytest.approx((0.75, 1.05))
    assert "unbounded" in logits.describe()


def test_a_confident_flip_at_0_9_fails_with_the_default_tolerance() -> None:
    """0.95 -> 0.85 across 0.9: the old band 0.75..1.05 called it a near tie; the bounded one does not."""
    ref, sim = _scores(0.95, 0.3), _scores(0.85, 0.3)
    report, gate = _gate(sim, ref, PROB)
    assert gate.passed is False and gate.value == pytest.approx(1 / 2)
    entry = report.decision["inputs"]["g0"]["outputs"]["prob"]
    assert entry["changed_beyond_near_tie"] == 1 and entry["near_tie_band"] == "near-tie band 0.87..0.93"
    assert "near-tie band 0.87..0.93" in gate.note
    # the same scores without a declared range: the band is 0.9 +- 0.15 and the record says it is unbounded
    unbounded = DecisionRule(rule="threshold", channel=1, threshold=0.9)
    report, gate = _gate(sim, ref, unbounded)
    assert gate.passed is True and "unbounded" in gate.note


def test_every_lost_rotation_fails_as_on_the_real_int8_classifier() -> None:
    """The measured INT8 case (docs/ACCURACY.md): FP32 0.966-0.998 for class '180', the simulator <= 0.852."""
    ref, sim = _scores(0.966, 0.998, 0.97, 0.99, 0.2, 0.4), _scores(0.852, 0.84, 0.83, 0.85, 0.2, 0.4)
    _, gate = _gate(sim, ref, PROB)
    assert gate.passed is False and gate.value == pytest.approx(2 / 6)


def test_a_genuine_tie_at_the_threshold_is_a_near_tie() -> None:
    ref, sim = _scores(0.901, 0.3), _scores(0.899, 0.3)
    report, gate = _gate(sim, ref, PROB)
    entry = report.decision["inputs"]["g0"]["outputs"]["prob"]
    assert entry["changed_positions"] == 1 and entry["changed_beyond_near_tie"] == 0
    assert gate.passed is True and gate.value == 1.0


def test_both_scores_must_lie_in_the_band() -> None:
    """A marginal FP32 score the candidate moves far across the threshold is a changed decision."""
    _, gate = _gate(_scores(0.3), _scores(0.905), PROB)
    assert gate.passed is False
    _, gate = _gate(_scores(0.905), _scores(0.3), PROB)  # and the other way round
    assert gate.passed is False


def test_a_tolerance_that_would_reach_the_range_end_is_refused_in_one_line() -> None:
    with pytest.raises(InputError, match=r"fidelity.score_tolerance 0.5 is at least half of "
                                         r"decision.outputs.prob.range \[0, 1\]"):
        _gate(_scores(0.95), _scores(0.95), PROB, FidelitySection(score_tolerance=0.5))


def test_a_range_must_hold_the_threshold() -> None:
    with pytest.raises(ValidationError, match="threshold 1.2 is not inside range"):
        DecisionRule(rule="threshold", channel=1, threshold=1.2, range=(0.0, 1.0))
    with pytest.raises(ValidationError, match="has no threshold"):
        DecisionRule(rule="argmax", range=(0.0, 1.0))
    from_json = detect_layout([("prob", (1, 2))], declared={"prob": {"rule": "threshold", "channel": 1,
                                                                      "threshold": 0.9, "range": [0, 1]}})
    assert from_json.rules["prob"].range == (0.0, 1.0)  # a build manifest's resolved rule, as JSON
    with pytest.raises(InputError, match=r"decision.outputs.prob.range"):  # a crafted manifest's rule
        detect_layout([("prob", (1, 2))], declared={"prob": {"rule": "threshold", "channel": 1, "threshold": 0.9,
                                                              "range": [0.95, 1.0]}})


def test_a_box_head_judges_score_deltas_by_the_band() -> None:
    """A box + score head at 0.9 on probabilities: a detection 0.95 -> 0.85 is lost, not a near tie."""
    rule = DecisionRule(rule="boxes", boxes="boxes", threshold=0.9, axis=-1, range=(0.0, 1.0))
    boxes = np.array([[[10, 10, 40, 40], [60, 60, 90, 90]]], np.float32)
    ref = {"g0": {"scores": np.array([[[0.05, 0.95], [0.9, 0.1]]], np.float32), "boxes": boxes}}
    sim = {"g0": {"scores": np.array([[[0.15, 0.85], [0.9, 0.1]]], np.float32), "boxes": boxes}}
    names, shapes = ("scores", "boxes"), ((1, 2, 2), (1, 2, 4))
    report = measure(sim, ref, names, shapes, "none", FidelitySection(), declared={"scores": rule})
    assert next(g for g in report.gates if g.gate == "decision").passed is False
    loose = DecisionRule(rule="boxes", boxes="boxes", threshold=0.9, axis=-1)  # no range: 0.9 +- 0.15
    report = measure(sim, ref, names, shapes, "none", FidelitySection(), declared={"scores": loose})
    assert next(g for g in report.gates if g.gate == "decision").passed is True


def test_a_config_takes_the_range(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("decision:\n  outputs:\n    prob: {rule: threshold, channel: 1, threshold: 0.9, range: [0, 1]}\n")
    section = load_decision(path)
    assert section is not None and section.outputs["prob"].range == (0.0, 1.0)
    path.write_text("decision:\n  outputs:\n    prob: {rule: threshold, channel: 1, threshold: 0.9, range: [0, 0.5]}\n")
    with pytest.raises(ConfigError, match="not inside range"):
        load_decision(path)


def test_a_config_whose_tolerance_would_reach_the_range_end_is_refused_at_load(tmp_path) -> None:
    from rkdet.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text(f"name: m\nmodel: {{onnx: {tmp_path}/m.onnx}}\nquantize: {{dataset: {tmp_path}}}\n"
                    f"golden: {{inputs: {tmp_path}}}\nfidelity: {{score_tolerance: 0.6}}\n"
                    "decision:\n  outputs:\n    prob: {rule: threshold, channel: 1, threshold: 0.9, range: [0, 1]}\n")
    with pytest.raises(ConfigError, match=r"fidelity.score_tolerance 0.6 is at least half of decision.outputs.prob.range"):
        load_config(path)
