"""`rkdet init --onnx MODEL`: a commented config with every guess marked `# CHECK`, on which `rkdet convert`
builds each layout rkdet handles on the first try (tiny models made here, the real toolkit)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from convert_helpers import run_rkdet
from tiny_models import classifier_model, split_head_model, yolov8_model

KINDS = {
    # name: (maker, recognised kind, prepare, writes model.inputs)
    "stock-yolov8": (lambda p: yolov8_model(p, cls_bias=-4.0), "yolov8-stock", "yolov8-split-head", False),
    "stock-yolov8-dynamic": (lambda p: yolov8_model(p, dynamic=True, cls_bias=-4.0), "yolov8-stock",
                             "yolov8-split-head", True),
    "split-head": (lambda p: split_head_model(p), "yolov8-split", "none", False),
    "model-zoo-9-outputs": (lambda p: split_head_model(p, score_sum=True), "yolov8-split-score-sum", "none", False),
    "classifier-softmax": (lambda p: classifier_model(p, softmax=True, metadata=True), "classifier",
                           "classifier-logits", False),
}


def _init(onnx_path: Path, out: Path, *extra: str):
    return run_rkdet("init", "--onnx", str(onnx_path), "--out", str(out), *extra)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_init_then_convert_builds_first_try(kind, tiny_assets, tmp_path):
    maker, recognised, prepare, has_inputs = KINDS[kind]
    onnx_path = maker(tmp_path / f"{kind}.onnx")
    cfg = tmp_path / "project" / "my.yaml"
    proc = _init(onnx_path, cfg)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"wrote {cfg}: {recognised} (")
    text = cfg.read_text()
    doc = yaml.safe_load(text)
    assert doc["model"]["prepare"] == prepare
    assert ("inputs" in doc["model"]) == has_inputs
    if has_inputs:
        assert doc["model"]["inputs"] == {"images": [1, 3, 640, 640]}  # dynamic batch -> 1, H/W from imgsz
    check_lines = [ln for ln in text.splitlines() if "# CHECK" in ln]
    assert any("quantize" in ln or "dataset:" in ln for ln in check_lines)
    assert any(ln.lstrip().startswith("platforms:") for ln in check_lines)
    assert f"# Recognised: {recognised}" in text
    if recognised.startswith("yolov8-stock"):
        assert "class0" in text and "mean: [0, 0, 0]               # Ultralytics" in text
    # an empty calibration folder: one line naming the key
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "quantize.dataset folder has no images" in proc.stderr.strip().splitlines()[-1]
    for folder, source in (("calibration", tiny_assets["cal"]), ("golden", tiny_assets["gold"])):
        for image in source.iterdir():
            shutil.copy(image, cfg.parent / folder)
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = json.loads(proc.stdout)["builds"][0]
    fid = json.loads((Path(build["folder"]) / "fidelity.json").read_text())
    expected_layout = "classification" if recognised == "classifier" else "yolov8-split"
    assert fid["layout"]["kind"] == expected_layout
    manifest = json.loads((Path(build["folder"]) / "manifest.json").read_text())
    assert {t["dtype"] for t in manifest["rknn"]["header"]["outputs"]} == {"int8"}


def test_init_refuses_to_overwrite_and_force_replaces(tmp_path):
    onnx_path = classifier_model(tmp_path / "c.onnx", softmax=False)
    out = tmp_path / "c.yaml"
    out.write_text("# my edits\n")
    proc = _init(onnx_path, out)
    assert proc.returncode == 2 and "already exists; choose another --out or pass --force" in proc.stderr
    assert out.read_text() == "# my edits\n"
    assert _init(onnx_path, out, "--force").returncode == 0 and "prepare: none" in out.read_text()
    link = tmp_path / "link.yaml"
    link.symlink_to(out)
    proc = _init(onnx_path, link, "--force")
    assert proc.returncode == 2 and "not a regular file" in proc.stderr and link.is_symlink()


def test_init_on_a_non_image_model_is_one_line(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "two",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("a", "b")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "two.onnx")
    proc = _init(tmp_path / "two.onnx", tmp_path / "two.yaml")
    assert proc.returncode == 2 and "has 2 inputs (a, b)" in proc.stderr and not (tmp_path / "two.yaml").exists()
    proc = _init(tmp_path / "absent.onnx", tmp_path / "x.yaml")
    assert proc.returncode == 2 and "--onnx model not found" in proc.stderr
