"""The fidelity gates judge what matters: decisions first, numeric agreement where FP32 carries signal,
saturation at the calibration range; whole-output cosine hides a class-score collapse (synthetic outputs
shaped like the real models'; real-toolkit builds are in test_fidelity_builds.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rkdet.config import FidelitySection
from rkdet.convert import fidelity
from rkdet.errors import ConversionError


def _per_tensor_int8(x: np.ndarray) -> np.ndarray:
    """Quantize with one int8 scale for the whole tensor, as INT8 does for a single output."""
    scale = float(np.abs(x).max()) / 127.0
    return (np.clip(np.round(x / scale), -128, 127) * scale).astype(np.float32)


def _measure(sim, ref, names, shapes, prepare="none", limits=FidelitySection(), header=None):
    return fidelity.measure(sim, ref, names, shapes, prepare, limits, header)


def test_stock_single_output_collapse_is_caught():
    """The default model's stock [1, 4+11, 8400] output at 640: INT8 zeroes every class score."""
    rng = np.random.default_rng(0)
    n = 8400
    boxes = np.stack([rng.uniform(50, 590, n), rng.uniform(50, 590, n), rng.uniform(10, 60, n), rng.uniform(10, 60, n)])
    scores = np.zeros((11, n), np.float32)
    scores[rng.integers(0, 11, 60), rng.integers(0, n, 60)] = rng.uniform(0.55, 0.95, 60)
    ref = np.concatenate([boxes, scores])[None].astype(np.float32)
    quant = _per_tensor_int8(ref)  # scale 640/127 ~ 5: every score rounds to 0
    whole = fidelity.measure_slices({"p": {"output0": quant}}, {"p": {"output0": ref}},
                                    [fidelity.Slice("output0", "all", None)], FidelitySection())
    assert whole["output0"]["whole_min_cosine"] > 0.999  # looks perfect as a whole
    report = _measure({"p": {"output0": quant}}, {"p": {"output0": ref}}, ("output0",), ((1, 15, n),))
    assert report.layout["kind"] == "yolov8-single"
    assert report.slices["output0[scores]"]["sim_max"] == 0.0
    decision = next(g for g in report.gates if g.gate == "decision")
    assert decision.passed is False and decision.value == 0.0  # every FP32 detection is lost
    with pytest.raises(ConversionError, match="class scores collapsed in output0\\[scores\\].*yolov8-split-head"):
        fidelity.gate(report, "rk3588")


def _split_outputs(rng, cls_peak: float, nc: int = 3) -> dict[str, np.ndarray]:
    """Split-head outputs at 256 (strides 8/16/32: 32, 16, 8 cells) with one sharp DFL box per peak."""
    out = {}
    for i, cells in enumerate((32, 16, 8)):
        box = rng.normal(0, 0.3, (1, 64, cells, cells)).astype(np.float32)
        box[0, :, :, :] += np.tile(np.eye(16, dtype=np.float32)[4] * 8, 4)[:, None, None]  # distance 4 cells per side
        cls = rng.uniform(0, 0.1, (1, nc, cells, cells)).astype(np.float32)
        if i == 0 and cls_peak > 0.3:
            cls[0, 1, 10, 10] = cls_peak
            cls[0, 2, 20, 20] = cls_peak - 0.1
        out[f"box{i}"], out[f"cls{i}"] = box, cls
    return out


def _names_shapes(outs):
    return tuple(outs), tuple(a.shape for a in outs.values())


def test_low_signal_slice_is_reported_not_failed():
    """A split-head class slice whose FP32 max is 0.12 (no detection anywhere) and whose quantized copy is
    all zero: cosine 0 as a whole; with no FP32 element above the signal floor it is reported, not failed."""
    rng = np.random.default_rng(1)
    ref = _split_outputs(rng, 0.9)
    ref["cls2"] = rng.uniform(0, 0.04, ref["cls2"].shape).astype(np.float32)
    sim = {k: v.copy() for k, v in ref.items()}
    sim["cls2"][:] = 0.0
    report = _measure({"p": sim}, {"p": ref}, *_names_shapes(ref), prepare="yolov8-split-head")
    assert report.slices["cls2"]["whole_min_cosine"] == 0.0
    cos = next(g for g in report.gates if g.gate == "cosine" and g.subject == "cls2")
    assert cos.passed is None and "signal floor" in cos.note
    warnings = fidelity.gate(report, "rk3588")
    assert len(warnings) == 1 and "score_recall cls2" in warnings[0]  # one line for all that lacks signal
    assert next(g for g in report.gates if g.gate == "decision").value == 1.0


def test_decision_change_fails_with_the_disagreement():
    rng = np.random.default_rng(2)
    ref = _split_outputs(rng, 0.9)
    sim = {k: v.copy() for k, v in ref.items()}
    sim["cls0"][0, 1, 10, 10] = 0.05  # the confident class-1 detection is lost
    report = _measure({"p": sim}, {"p": ref}, *_names_shapes(ref), prepare="yolov8-split-head")
    decision = next(g for g in report.gates if g.gate == "decision")
    assert decision.value == 0.5 and decision.note == "1/2 detections agree"
    assert report.decision["inputs"]["p"]["disagreements"][0]["what"] == "missing"
    with pytest.raises(ConversionError, match=r"decision agreement 0.5 \(1/2 detections agree\), below the limit 0.9 "
                                              r"\(fidelity.min_decision_agreement\)"):
        fidelity.gate(report, "rk3588")


def test_score_within_tolerance_across_the_threshold_agrees():
    rng = np.random.default_rng(3)
    ref = _split_outputs(rng, 0.9)
    ref["cls0"][0, 2, 20, 20] = 0.27  # just above the 0.25 confidence threshold in FP32
    sim = {k: v.copy() for k, v in ref.items()}
    sim["cls0"][0, 2, 20, 20] = 0.22  # just below it quantized: within score_tolerance, not a decision change
    report = _measure({"p": sim}, {"p": ref}, *_names_shapes(ref), prepare="yolov8-split-head")
    assert next(g for g in report.gates if g.gate == "decision").value == 1.0
    strict = _measure({"p": sim}, {"p": ref}, *_names_shapes(ref), prepare="yolov8-split-head",
                      limits=FidelitySection(score_tolerance=0.01))
    assert next(g for g in strict.gates if g.gate == "decision").value == 0.5


def test_classifier_same_top1_passes_despite_low_cosine():
    ref = {f"i{k}": {"y": np.array([[2.0, -1.0]], np.float32) * (k + 1)} for k in range(3)}
    sim = {k: {"y": np.array([[1.6, -0.2]], np.float32) * v["y"][0, 0] / 2} for k, v in ref.items()}
    report = _measure(sim, ref, ("y",), ((1, 2),))
    cos = next(g for g in report.gates if g.gate == "cosine")
    assert cos.value < 0.95 and cos.passed is False and not cos.binding  # reported: the decision covers it
    assert next(g for g in report.gates if g.gate == "decision").value == 1.0
    assert fidelity.gate(report, "rk3588") == []
    flipped = {k: {"y": v["y"][:, ::-1].copy()} for k, v in ref.items()}
    with pytest.raises(ConversionError, match="0/3 golden inputs keep the same top-1"):
        fidelity.gate(_measure(flipped, ref, ("y",), ((1, 2),)), "rk3588")


def test_undecoded_output_is_judged_numerically_where_signal_is():
    rng = np.random.default_rng(4)
    ref = rng.normal(0, 1, (1, 4, 8, 8)).astype(np.float32)
    ref[0, 0, 0, 0] = 1000.0  # one huge value: everything else is under the 5% noise floor of this output
    noisy = ref + rng.normal(0, 0.5, ref.shape).astype(np.float32)
    report = _measure({"p": {"y": noisy}}, {"p": {"y": ref}}, ("y",), (ref.shape,))
    assert report.layout["kind"] == "none"
    assert report.slices["y"]["signal_elements"] == 1
    assert fidelity.gate(report, "rk3588") == []
    bad = ref.copy()
    bad[0, 0, 0, 0] = -1000.0
    with pytest.raises(ConversionError, match="y cosine -1 where FP32 carries signal, below the limit 0.98"):
        fidelity.gate(_measure({"p": {"y": bad}}, {"p": {"y": ref}}, ("y",), (ref.shape,)), "rk3588")


def test_saturation_names_output_and_calibration_range():
    ref = {"g": {"score": np.full((1, 1, 4, 4), 0.81, np.float32)}}
    scale = 0.5 / 255
    sim = {"g": {"score": np.full((1, 1, 4, 4), 255 * scale, np.float32)}}  # pinned at the top of [0, 0.5]
    header = [{"name": "score", "dtype": "int8", "scale": [scale], "zero_point": [-128]}]
    report = _measure(sim, ref, ("score",), ((1, 1, 4, 4),), header=header)
    with pytest.raises(ConversionError, match=r"score saturates: .* 0.62 of the range beyond it \(calibration range "
                                              r"\[0, 0.5\], FP32 on golden \[0.81, 0.81\]\), above the limit 0.1 "
                                              r"\(fidelity.max_saturation\)"):
        fidelity.gate(report, "rk3588")
    inside = {"g": {"score": np.full((1, 1, 4, 4), 0.45, np.float32)}}
    ok = _measure(inside, inside, ("score",), ((1, 1, 4, 4),), header=header)
    assert next(g for g in ok.gates if g.gate == "saturation").value == 0.0


def test_summary_is_one_line_with_every_gate_kind_and_threshold():
    rng = np.random.default_rng(5)
    ref = _split_outputs(rng, 0.9)
    line = fidelity.summary_line(_measure({"p": ref}, {"p": ref}, *_names_shapes(ref), prepare="yolov8-split-head"), "rk3588")
    assert "\n" not in line and line.startswith("rk3588: fidelity: decision (2/2 detections agree) 1 >= 0.9 ok")
    for part in ("score_collapse", "score_recall", "cosine", ">= 0.95"):
        assert part in line


def test_quantization_gate_rejects_float_tensors():
    header = {"inputs": [{"name": "x", "dtype": "int8"}], "outputs": [{"name": "y", "dtype": "float16"}]}
    with pytest.raises(ConversionError, match="left tensors unquantized: y"):
        fidelity.quantization_gate(header, "w8a8", True, "rk3588")
    fidelity.quantization_gate(header | {"outputs": [{"name": "y", "dtype": "int8"}]}, "w8a8", True, "rk3588")
    fidelity.quantization_gate(header, "w8a8", True, "rk3588", float_outputs=["y"])


def test_classifier_near_tie_swap_is_not_a_decision_change():
    """Measured on rapidocr's OCR direction classifier: FP32 [0.499, 0.501] became [0.511, 0.489] in INT8."""
    limits = FidelitySection()
    near = fidelity.compare_top_k(np.array([0.499, 0.501]), np.array([0.511, 0.489]), limits)
    assert near["agree"] == 1 and near["fp32_margin"] < 0.01
    clear = fidelity.compare_top_k(np.array([0.2, 0.8]), np.array([0.7, 0.3]), limits)
    assert clear["agree"] == 0 and clear["fp32_margin"] == pytest.approx(0.6)
    logits = fidelity.compare_top_k(np.array([0.0, 4.0]), np.array([1.0, 0.0]), limits)  # softmax: 0.018 vs 0.982
    assert logits["agree"] == 0


def _failed_gate_message(report, used=None) -> str:
    with pytest.raises(ConversionError) as err:
        fidelity.gate(report, "rk3588", used)
    return str(err.value)


@pytest.mark.parametrize("algorithm", ["normal", "mmse", "kl_divergence"])
def test_the_advice_leaves_out_what_the_build_already_used(algorithm):
    """Issue 36 §3: a build with quantize.algorithm: mmse that fails is not told to try mmse."""
    rng = np.random.default_rng(2)
    ref = _split_outputs(rng, 0.9)
    sim = {k: v.copy() for k, v in ref.items()}
    sim["cls0"][0, 1, 10, 10] = 0.05
    report = _measure({"p": sim}, {"p": ref}, *_names_shapes(ref), prepare="yolov8-split-head")
    used = {"quantize.algorithm": algorithm, "quantize.force_fp16": False, "model.prepare": "yolov8-split-head"}
    message = _failed_gate_message(report, used)
    advice = message.split("; ", 1)[1]
    assert f"quantize.algorithm: {algorithm}" not in advice, advice
    others = {"mmse", "kl_divergence"} - {algorithm}
    assert all(f"quantize.algorithm: {a}" in advice for a in others), advice
    assert "quantize.force_fp16: true" in advice and "more representative calibration images" in advice
    assert "quantize.algorithm: mmse" in _failed_gate_message(report)  # nothing known: every remedy


def test_a_float_build_is_not_told_to_quantize_differently_or_build_float():
    used = {"quantize.algorithm": "normal", "quantize.force_fp16": True, "model.prepare": "yolov8-split-head"}
    for kind in ("decision", "cosine", "score_collapse", "score_recall", "saturation"):
        advice = fidelity.remedy_advice(kind, used)
        assert "quantize.algorithm" not in advice and "force_fp16" not in advice and "split-head" not in advice
        assert advice  # still says where to look
    split = fidelity.remedy_advice("score_collapse", {"model.prepare": "yolov8-split-head"})
    assert "model.prepare" not in split and "quantize.force_fp16: true" in split
    assert "model.prepare: yolov8-split-head" in fidelity.remedy_advice("score_collapse", {"model.prepare": "none"})
