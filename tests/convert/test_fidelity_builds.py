"""The fidelity gates on real rknn-toolkit2 builds of tiny models: a saturating score fails naming the
output and its calibration range; a low-signal split head and a classifier pass with every gate recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convert_helpers import run_rkdet
from tiny_models import classifier_model, flat_image_folder, score_model, write_config, yolov8_model

pytestmark = pytest.mark.slow


def _fidelity(build: dict) -> dict:
    return json.loads((Path(build["folder"]) / "fidelity.json").read_text())


def test_saturating_score_fails_naming_output_and_range(tmp_path):
    dark = flat_image_folder(tmp_path / "dark", 6, seed=1, low=0, high=60)
    bright = flat_image_folder(tmp_path / "bright", 2, seed=2, low=200, high=255)
    cfg = write_config(tmp_path / "c.yaml", score_model(tmp_path / "score.onnx"), dark, bright)
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 4, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("rkdet: rk3588: fidelity gate failed: score saturates")
    assert "calibration range [0, 0.5" in line and "FP32 on golden [0.7" in line and "fidelity.max_saturation" in line
    assert "quantize.dataset" in line
    assert line.endswith(f"to see which layer loses it: rkdet layers --config {cfg}; to look for a remedy that "
                         f"passes: rkdet convert --config {cfg} --search")
    # the same model calibrated on images like the golden ones passes
    cfg2 = write_config(tmp_path / "c2.yaml", tmp_path / "score.onnx",
                        flat_image_folder(tmp_path / "mixed", 6, seed=3, low=0, high=255), bright)
    proc2 = run_rkdet("convert", "--config", str(cfg2), "--out", str(tmp_path / "out2"), "--json")
    assert proc2.returncode == 0, proc2.stderr[-2000:]


def test_low_signal_split_head_is_reported_not_failed(tiny_assets, tmp_path):
    onnx_path = yolov8_model(tmp_path / "y8.onnx", cls_bias=-4.0)  # class scores ~0.02: nothing detected
    cfg = write_config(tmp_path / "c.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"],
                       model={"prepare": "yolov8-split-head"}, fidelity={})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    build = json.loads(proc.stdout)["builds"][0]
    fid = _fidelity(build)
    assert fid["schema"] == "rkdet.fidelity/2" and fid["layout"]["kind"] == "yolov8-split"
    no_signal = [g for g in fid["gates"] if g["gate"] == "cosine" and g["passed"] is None]
    assert no_signal and all("signal floor" in g["note"] for g in no_signal)
    assert all(g["threshold"] is not None for g in fid["gates"] if g["gate"] != "score_collapse")
    (warning,) = [w for w in build["warnings"] if "not judged" in w]
    assert "decision" in warning and "cosine cls" in warning
    assert build["fidelity"].startswith("rk3588: fidelity: decision n/a >= 0.9 not judged;")
    assert "\n" not in build["fidelity"]


def test_classifier_decision_gate_is_top1(tiny_assets, tmp_path):
    onnx_path = classifier_model(tmp_path / "cls.onnx", nc=3, softmax=False)
    cfg = write_config(tmp_path / "c.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"], fidelity={})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    build = json.loads(proc.stdout)["builds"][0]
    fid = _fidelity(build)
    assert fid["layout"]["kind"] == "classification"
    decision = next(g for g in fid["gates"] if g["gate"] == "decision")
    assert decision["value"] == 1.0 and decision["note"] == "2/2 golden inputs keep the same top-1"
    assert all(v["fp32_top"] == v["quantized_top"] for v in fid["decision"]["inputs"].values())
    cos = next(g for g in fid["gates"] if g["gate"] == "cosine")
    assert cos["binding"] is False  # the decision covers the logits
    assert "decision (2/2 golden inputs keep the same top-1) 1 >= 0.9 ok" in build["fidelity"]
