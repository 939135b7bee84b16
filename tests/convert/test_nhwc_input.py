"""NHWC inputs (model.input_layout: nhwc): a Keras/TF-style tiny model made here is prepared with a
Transpose prepended (the prepared ONNX computes what the original does), `rkdet init` writes the line,
and the real toolkit builds it on the first try."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml

from convert_helpers import run_rkdet
from rkdet.config import ModelSection
from rkdet.convert.init import write_config
from rkdet.convert.onnx_graph import prepare_model
from rkdet.errors import InputError
from tiny_models import image_folder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "decode"))
from decision_models import nhwc_classifier  # noqa: E402


def test_the_prepared_model_takes_nchw_and_computes_the_same(tmp_path: Path) -> None:
    onnx_path = nhwc_classifier(tmp_path / "k.onnx")
    with pytest.raises(InputError, match="set model.input_layout: nhwc"):
        prepare_model(ModelSection(onnx=onnx_path))
    prepared = prepare_model(ModelSection(onnx=onnx_path, input_layout="nhwc"))
    assert prepared.input_shape_nchw == (1, 3, 16, 16) and prepared.input_name == "input_1"
    assert any("input_layout nhwc: a Transpose prepended" in w for w in prepared.warnings)
    x = np.random.default_rng(0).normal(0, 1, (1, 16, 16, 3)).astype(np.float32)
    original = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, {"input_1": x})[0]
    sess = ort.InferenceSession(prepared.onnx_bytes, providers=["CPUExecutionProvider"])
    assert np.array_equal(sess.run(None, {"input_1": x.transpose(0, 3, 1, 2).copy()})[0], original)
    with pytest.raises(InputError, match="not \\[N, H, W, 3\\]; set model.input_layout: nchw"):
        prepare_model(ModelSection(onnx=nhwc_classifier(tmp_path / "k2.onnx"), input_layout="nhwc").model_copy(
            update={"onnx": _nchw(tmp_path)}))


def _nchw(tmp_path: Path) -> Path:
    from tiny_models import conv_model

    return conv_model(tmp_path / "nchw.onnx", size=16)


@pytest.mark.slow
def test_init_and_convert_take_an_nhwc_model(tmp_path: Path) -> None:
    onnx_path = nhwc_classifier(tmp_path / "keras.onnx")
    cfg, facts = write_config(onnx_path, tmp_path / "project" / "keras.yaml")
    doc = yaml.safe_load(cfg.read_text())
    assert doc["model"]["input_layout"] == "nhwc" and facts.shape == [1, 3, 16, 16]
    assert facts.kind == "classifier"
    image_folder(cfg.parent / "calibration", 6, seed=1)
    image_folder(cfg.parent / "golden", 2, seed=2)
    for folder in ("calibration", "golden"):  # image_folder writes into a subfolder: flatten
        for f in list((cfg.parent / folder).rglob("*.png")):
            if f.parent != cfg.parent / folder:
                shutil.move(str(f), cfg.parent / folder / f.name)
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = Path(json.loads(proc.stdout)["builds"][0]["folder"])
    manifest = json.loads((build / "manifest.json").read_text())
    prepared = manifest["inputs"]["onnx_prepared"]
    assert prepared["input_shape_nchw"] == [1, 3, 16, 16]
    assert manifest["inputs"]["config"]["resolved"]["model"]["input_layout"] == "nhwc"
    fid = json.loads((build / "fidelity.json").read_text())
    assert fid["layout"]["kind"] == "classification"
