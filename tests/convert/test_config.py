"""Config validation: every error names the file and the key; defaults are explicit and marked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convert_helpers import REPO, run_rkdet
from rkdet.config import load_config
from rkdet.errors import ConfigError

BASE = "name: t\nmodel: {onnx: m.onnx}\nquantize: {dataset: cal}\ngolden: {inputs: gold}\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_default_config_loads_with_paths_relative_to_the_file():
    cfg = load_config(REPO / "configs" / "yolov8.yaml")
    assert cfg.model.onnx == REPO / "models" / "yolov8n-doclaynet.onnx"
    assert cfg.quantize.force_fp16 is False
    assert cfg.toolkit.optimization_level == 0
    assert cfg.quantize.dataset == REPO / "calibration_data" / "calibration"


@pytest.mark.parametrize("text, expected", [
    (BASE.replace("model: {onnx: m.onnx}", "model: {onnx: m.onnx, prepar: none}"),
     "unknown key 'model.prepar'; did you mean 'model.prepare'?"),
    (BASE + "quantise: {}\n", "unknown key 'quantise'; did you mean 'quantize'?"),
    (BASE + "target: {platforms: [rk9999]}\n", "unknown platform 'rk9999'; allowed: rk3562"),
    (BASE + "run: {repeats: many}\n", "key 'run.repeats'"),
    (BASE + "quantize: {dataset: cal, algorithm: best}\n", "key 'quantize.algorithm'"),
    (BASE + "toolkit: {auto_hybrid: true}\n", "silent float fallback"),
    ("name: t\nquantize: {dataset: cal}\ngolden: {inputs: gold}\n", "missing required key 'model'"),
    ("name: [unclosed\n", "not valid YAML at line"),
    ("- a\n- b\n", "must be a YAML mapping"),
])
def test_bad_config_names_file_and_key(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_config_errors_are_one_line_exit_2(tmp_path):
    path = _write(tmp_path, BASE + "quantise: {}\n")
    proc = run_rkdet("config", "show", "--config", str(path))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "did you mean 'quantize'" in proc.stderr


def test_config_show_marks_defaults_and_json_is_complete(tmp_path):
    proc = run_rkdet("config", "show", "--config", str(REPO / "configs" / "yolov8.yaml"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.strip().startswith("compress_weight: false") and "# default" in line for line in lines)
    assert any(line.strip().startswith("optimization_level: 0") and "# default" not in line for line in lines)
    proc = run_rkdet("config", "show", "--json", "--config", str(REPO / "configs" / "yolov8.yaml"))
    resolved = json.loads(proc.stdout)
    assert resolved["toolkit"]["memory_plan_strategy"] == "BestFit"
    assert resolved["quantize"]["force_fp16"] is False


def test_missing_config_file_is_exit_2(tmp_path):
    proc = run_rkdet("convert", "--config", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "nope.yaml: config file not found" in proc.stderr
