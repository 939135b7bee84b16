"""Config and model mistakes caught on purpose, each with one line naming the key (real toolkit builds of
tiny models made here; no mocks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convert_helpers import run_rkdet
from tiny_models import classifier_model, shape_chain_model, write_config, yolov8_model


def _last_line(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def dynamic_yolo(tmp_path_factory) -> Path:
    return yolov8_model(tmp_path_factory.mktemp("dyn") / "y8-dynamic.onnx", dynamic=True)


def test_input_size_and_inputs_disagreeing_is_exit_2_naming_both(tiny_config, tmp_path):
    cfg = tiny_config(model={"input_size": [64, 64], "inputs": {"x": [1, 3, 32, 32]}})
    for args in (("config", "show", "--config", str(cfg)), ("convert", "--config", str(cfg), "--out", str(tmp_path))):
        proc = run_rkdet(*args)
        assert proc.returncode == 2
        assert "model.input_size [64, 64] and model.inputs.x [1, 3, 32, 32] disagree" in _last_line(proc)


def test_value_dependent_shape_chain_is_reported_with_onnxruntime_view(tiny_assets, tmp_path):
    onnx_path = shape_chain_model(tmp_path / "chain.onnx", value_dependent=True)
    cfg = write_config(tmp_path / "c.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"],
                       model={"inputs": {"x": [1, 3, 32, 32]}})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = _last_line(proc)
    assert "output 'y' has no static shape after ONNX shape inference" in line
    assert "Reshape 'final_reshape' takes its shape from a Shape->Concat chain that also depends on values" in line
    assert "onnxruntime computes y [1, 4] for input [1, 3, 32, 32]" in line
    assert "fix: cut the head before it" in line and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_shape_only_chain_is_fixed_and_builds(tiny_assets, tmp_path):
    """A Reshape target computed from Shape ops only is a function of the input shape: rkdet fixes it at
    the configured shape (what the rapidocr OCR classifier needs) and says so."""
    onnx_path = shape_chain_model(tmp_path / "chain.onnx")
    cfg = write_config(tmp_path / "c.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"],
                       model={"inputs": {"x": [1, 3, 32, 32]}}, fidelity={})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    build = json.loads(proc.stdout)["builds"][0]
    assert any(w.startswith("fixed 1 Reshape target(s) computed from Shape ops") and "'final_reshape'" in w
               for w in build["warnings"])
    manifest = json.loads((Path(build["folder"]) / "manifest.json").read_text())
    assert manifest["inputs"]["onnx_prepared"]["outputs"] == [{"name": "y", "shape": [1, 4]}]


def test_input_size_on_a_dynamic_batch_points_to_model_inputs(dynamic_yolo, tiny_assets, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", dynamic_yolo, tiny_assets["cal"], tiny_assets["gold"],
                       model={"input_size": [640, 640]})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert ("model.input_size sets only H and W" in _last_line(proc)
            and "model.inputs: {images: [1, 3, 640, 640]}" in _last_line(proc))


def test_shape_the_graph_cannot_take_names_the_keys(tiny_assets, tmp_path):
    static = yolov8_model(tmp_path / "y8.onnx")  # Reshape targets baked for 640
    cfg = write_config(tmp_path / "c.yaml", static, tiny_assets["cal"], tiny_assets["gold"],
                       model={"input_size": [320, 320]})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "does not take the requested input shape [1, 3, 320, 320]" in _last_line(proc)
    assert "change or drop model.input_size" in _last_line(proc)


@pytest.mark.slow
def test_dynamic_export_builds_with_split_head_and_warns_on_imgsz(dynamic_yolo, tiny_assets, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", dynamic_yolo, tiny_assets["cal"], tiny_assets["gold"],
                       model={"prepare": "yolov8-split-head", "inputs": {"images": [1, 3, 320, 320]}}, fidelity={})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (warning,) = [w for w in json.loads(proc.stdout)["builds"][0]["warnings"] if "imgsz" in w]
    assert warning.startswith("input shape [1, 3, 320, 320] differs from the model's metadata imgsz [640, 640]")
    assert f"warning: {warning}" in proc.stderr.splitlines()  # printed on one line, brackets kept literally


@pytest.mark.slow
def test_final_softmax_float16_names_both_ways_out(tiny_assets, tmp_path):
    onnx_path = classifier_model(tmp_path / "cls.onnx", softmax=True)
    cfg = write_config(tmp_path / "c.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"])
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 4
    line = _last_line(proc)
    assert "left tensors unquantized: y (float16)" in line
    assert "model.prepare: classifier-logits" in line and "quantize.float_outputs: [y]" in line

    accepted = write_config(tmp_path / "a.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"],
                            quantize={"float_outputs": ["y"]})
    proc = run_rkdet("convert", "--config", str(accepted), "--out", str(tmp_path / "out-a"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((Path(json.loads(proc.stdout)["builds"][0]["folder"]) / "manifest.json").read_text())
    assert doc["inputs"]["config"]["resolved"]["quantize"]["float_outputs"] == ["y"]
    assert doc["rknn"]["header"]["outputs"][0]["dtype"] == "float16"

    cut = write_config(tmp_path / "l.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"],
                       model={"prepare": "classifier-logits"})
    proc = run_rkdet("convert", "--config", str(cut), "--out", str(tmp_path / "out-l"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    folder = Path(json.loads(proc.stdout)["builds"][0]["folder"])
    doc = json.loads((folder / "manifest.json").read_text())
    assert {t["dtype"] for t in doc["rknn"]["header"]["outputs"]} == {"int8"}
    assert json.loads((folder / "model.io.json").read_text())["outputs"] == ["y"]


def test_float_outputs_must_name_an_output(tiny_assets, tmp_path):
    onnx_path = classifier_model(tmp_path / "cls.onnx", softmax=True)
    cfg = write_config(tmp_path / "c.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"],
                       quantize={"float_outputs": ["probs"]})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "quantize.float_outputs names 'probs', not an output of the prepared model (outputs: y)" in _last_line(proc)


def test_classifier_logits_on_a_model_without_softmax(tiny_assets, tmp_path):
    onnx_path = classifier_model(tmp_path / "cls.onnx", softmax=False)
    cfg = write_config(tmp_path / "c.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"],
                       model={"prepare": "classifier-logits"})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "output 'y' comes from Gemm, not a Softmax; set model.prepare: none" in _last_line(proc)


@pytest.mark.slow
def test_non_image_files_are_listed_in_one_warning(tiny_config, tiny_assets, tmp_path):
    import shutil

    cal = tmp_path / "cal"
    shutil.copytree(tiny_assets["cal"], cal)
    (cal / "notes.txt").write_text("x")
    (cal / "scan.tiff").write_bytes(b"II*\x00")
    (cal / "sub").mkdir()
    cfg = tiny_config(quantize={"dataset": str(cal)})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [w for w in json.loads(proc.stdout)["builds"][0]["warnings"] if "not images" in w]
    assert lines == [f"not images, not read (.png, .jpg, .jpeg, .bmp only): quantize.dataset {cal}: notes.txt, "
                     "scan.tiff, sub/"]
