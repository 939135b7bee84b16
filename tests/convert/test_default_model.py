"""The shipped default model (YOLOv8n DocLayNet) converts to a fully INT8 RK3588 build whose class scores survive."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rkdet.onboard.hashing import output_hash

pytestmark = pytest.mark.slow


def test_default_build_manifest(default_build):
    manifest = json.loads((default_build / "manifest.json").read_text())
    prepared = manifest["inputs"]["onnx_prepared"]
    assert prepared["prepare"] == "yolov8-split-head"
    assert prepared["input_shape_nchw"] == [1, 3, 640, 640]
    assert [o["name"] for o in prepared["outputs"]] == ["box0", "cls0", "box1", "cls1", "box2", "cls2"]
    assert prepared["outputs"][0]["shape"] == [1, 64, 80, 80]
    assert manifest["inputs"]["onnx"]["sha256"] == "7259c856bb6dae572c9385587049a08065548bbfae8360634b5a576b04248957"
    assert len(manifest["inputs"]["calibration"]) == 24 and len(manifest["inputs"]["golden"]) == 8
    assert {t["dtype"] for t in manifest["rknn"]["header"]["inputs"] + manifest["rknn"]["header"]["outputs"]} == {"int8"}
    assert manifest["rknn"]["header"]["format_version"] >= 6


def test_default_build_class_scores_survive(default_build):
    fid = json.loads((default_build / "fidelity.json").read_text())
    for name in ("cls0", "cls1", "cls2"):
        assert fid["slices"][name]["confident_ref_scores"] > 10, "golden pages should give confident FP32 detections"
        assert fid["slices"][name]["score_recall"] >= 0.9
        assert fid["slices"][name]["signal_min_cosine"] >= 0.95
    decision = next(g for g in fid["gates"] if g["gate"] == "decision")
    assert decision["passed"] and decision["value"] >= 0.9 and decision["threshold"] == 0.9
    assert sum(v["detections"] for v in fid["decision"]["inputs"].values()) > 100
    assert all(g["passed"] is not False for g in fid["gates"] if g["binding"])
    assert {g["gate"] for g in fid["gates"]} == {"decision", "cosine", "score_collapse", "score_recall", "saturation"}


def test_golden_inputs_are_stored_exactly_as_fed(default_build):
    manifest = json.loads((default_build / "manifest.json").read_text())
    for rec in manifest["inputs"]["golden"]:
        stem = rec["file"].rsplit(".", 1)[0]
        tensor = np.load(default_build / "golden" / "inputs" / f"{stem}.npy")
        assert tensor.dtype == np.uint8 and tensor.shape == (1, 640, 640, 3)
        assert output_hash(tensor) == rec["tensor"]
        assert (tensor[0, 0, 0] == 114).all() or (tensor[0, -1, -1] == 114).all()  # letterbox padding
