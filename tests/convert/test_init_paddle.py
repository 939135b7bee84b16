"""`rkdet init` reads Paddle-style metadata (issue 24 §6): class names in the `character` key, and the
producer_name (PaddlePaddle exports) and metadata keys for channel order, resize mode and mean/std, each
`# CHECK` comment saying where its guess comes from. Tiny ONNX models made here with onnx.helper."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
import yaml

from convert_helpers import run_rkdet
from tiny_models import classifier_model, conv_model


def _with(path: Path, producer: str | None = None, **metadata: str) -> Path:
    model = onnx.load(path)
    if producer is not None:
        model.producer_name = producer
    for key, value in metadata.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    onnx.save(model, path)
    return path


def _init(onnx_path: Path, out: Path):
    proc = run_rkdet("init", "--onnx", str(onnx_path), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    return text, yaml.safe_load(text)


def _comment(text: str, key: str) -> str:
    line = next(ln for ln in text.splitlines() if ln.lstrip().startswith(f"{key}:"))
    return line.split("#", 1)[1] if "#" in line else ""


@pytest.mark.slow
def test_paddle_classifier_names_order_crop_and_imagenet_then_builds(tiny_assets, tmp_path):
    onnx_path = _with(classifier_model(tmp_path / "orientation.onnx", nc=4, size=32), "PaddlePaddle",
                      character="0\n90\n180\n270\n")
    cfg = tmp_path / "project" / "my.yaml"
    text, doc = _init(onnx_path, cfg)
    assert "# Classes (metadata character (Paddle-style); rkdet reports class ids): 0 0, 1 90, 2 180, 3 270" in text
    pp = doc["preprocess"]
    assert pp["channel_order"] == "bgr" and pp["resize"] == "center-crop" and pp["short_side"] == round(32 * 256 / 224)
    assert pp["mean"] == [123.675, 116.28, 103.53] and pp["std"] == [58.395, 57.12, 57.375]
    for key in ("channel_order", "resize", "short_side", "mean", "std"):
        assert _comment(text, key).strip().startswith("CHECK:"), key
    for key in ("channel_order", "resize", "mean", "std"):
        assert "producer_name 'PaddlePaddle'" in _comment(text, key), key
    assert "model's channel order (after channel_order)" in text
    for folder, source in (("calibration", tiny_assets["cal"]), ("golden", tiny_assets["gold"])):
        for image in source.iterdir():
            shutil.copy(image, cfg.parent / folder)
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((Path(json.loads(proc.stdout)["builds"][0]["folder"]) / "manifest.json").read_text())
    assert manifest["fed_input"]["channel_order"] == "bgr"


def test_paddle_detector_is_stretched(tmp_path):
    onnx_path = _with(conv_model(tmp_path / "layout.onnx"), "PaddlePaddle", character="text\ntitle\nfigure\ntable")
    text, doc = _init(onnx_path, tmp_path / "d.yaml")
    assert doc["preprocess"]["resize"] == "stretch" and "short_side" not in doc["preprocess"]
    assert "keep_ratio: false" in _comment(text, "resize") and "PaddleDetection" in _comment(text, "resize")
    assert doc["preprocess"]["channel_order"] == "bgr"
    assert "# Classes (metadata character (Paddle-style); rkdet reports class ids): 0 text, 1 title, 2 figure, 3 table" in text


def test_metadata_keys_win_and_are_named(tmp_path):
    onnx_path = _with(conv_model(tmp_path / "m.onnx"), "PaddlePaddle", mean="[0.5, 0.5, 0.5]", std="0.5,0.5,0.5",
                      channel_order="rgb", keep_ratio="false")
    text, doc = _init(onnx_path, tmp_path / "m.yaml")
    pp = doc["preprocess"]
    assert pp["mean"] == [127.5, 127.5, 127.5] and pp["std"] == [127.5, 127.5, 127.5] and pp["channel_order"] == "rgb"
    assert "metadata key 'mean' '[0.5, 0.5, 0.5]' x 255" in _comment(text, "mean")
    assert "metadata key 'std'" in _comment(text, "std")
    assert "metadata key channel_order 'rgb'" in _comment(text, "channel_order")
    assert "metadata key 'keep_ratio' false" in _comment(text, "resize")


def test_resize_short_metadata_gives_a_centre_crop(tmp_path):
    onnx_path = _with(classifier_model(tmp_path / "c.onnx", size=32), resize_short="40")
    text, doc = _init(onnx_path, tmp_path / "c.yaml")
    assert doc["preprocess"]["resize"] == "center-crop" and doc["preprocess"]["short_side"] == 40
    assert "metadata key 'resize_short'" in _comment(text, "short_side")


def test_a_model_that_says_nothing_gets_defaults_said_so(tmp_path):
    text, doc = _init(_with(conv_model(tmp_path / "plain.onnx"), "someexporter"), tmp_path / "p.yaml")
    assert doc["preprocess"]["channel_order"] == "rgb" and doc["preprocess"]["resize"] == "letterbox"
    for key in ("channel_order", "resize", "mean", "std"):
        assert _comment(text, key).strip().startswith("CHECK: rkdet's default"), key
    assert "# the ONNX producer_name is 'someexporter'" in text
