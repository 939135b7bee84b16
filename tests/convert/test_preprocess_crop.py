"""Resize-short-side then centre-crop (torchvision's standard eval transform, issue 24 §5): the geometry
torchvision documents, the config's refusals, and a real rknn-toolkit2 build of a tiny classifier whose
golden inputs are the crops."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from convert_helpers import run_rkdet
from tiny_models import classifier_model, write_config

from rkdet.config import ConfigError, PreprocessSection
from rkdet.convert.images import preprocess, short_side_crop
from rkdet.errors import InputError


def _coordinate_image(h: int, w: int) -> np.ndarray:
    """Each pixel says where it is: R = row, G = column (mod 256), B = 7."""
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    return np.stack([ys % 256, xs % 256, np.full_like(ys, 7)], -1).astype(np.uint8)


def test_geometry_is_torchvisions_resize_then_center_crop():
    # torchvision Resize(36) of a 40x60 (HxW) image: short side 36, long int(36 * 60 / 40) = 54;
    # CenterCrop(32): top int(round((36 - 32) / 2)) = 2, left int(round((54 - 32) / 2)) = 11
    assert short_side_crop(40, 60, (32, 32), 36) == (36, 54, 2, 11)
    # portrait, a non-square crop, and the default S (the input's larger side)
    assert short_side_crop(75, 50, (24, 32), None) == (48, 32, 12, 0)
    assert short_side_crop(50, 50, (32, 32), 33) == (33, 33, 0, 0)  # round(0.5) = 0, as Python rounds
    with pytest.raises(InputError, match="preprocess.short_side 20 is smaller than the model input 32x32"):
        short_side_crop(40, 60, (32, 32), 20)


def test_crop_takes_the_centre_in_the_model_channel_order():
    img = _coordinate_image(40, 60)
    pp = PreprocessSection(resize="center-crop", short_side=40, interpolation="nearest", channel_order="bgr")
    out, box = preprocess(img, (32, 32), pp)
    assert out.shape == (1, 32, 32, 3) and out.dtype == np.uint8
    # S = 40 = the image's short side: no scaling; the crop is rows 4..35, columns 14..45; BGR: B first
    assert out[0, 0, 0].tolist() == [7, 14, 4] and out[0, -1, -1].tolist() == [7, 45, 35]
    assert (box.pad_left, box.pad_top, box.scale_x, box.scale_y) == (-14, -4, 1.0, 1.0)


def test_short_side_goes_with_center_crop_only():
    with pytest.raises(ValueError, match="short_side goes with resize: center-crop"):
        PreprocessSection(resize="letterbox", short_side=256)
    assert PreprocessSection(resize="center-crop").short_side is None


def test_config_names_the_key(tmp_path):
    from rkdet.config import load_config

    cfg = write_config(tmp_path / "c.yaml", tmp_path / "m.onnx", tmp_path, tmp_path,
                       preprocess={"resize": "stretch", "short_side": 256})
    with pytest.raises(ConfigError, match="preprocess"):
        load_config(cfg)


@pytest.mark.slow
def test_tiny_classifier_builds_with_the_centre_crop(tmp_path):
    for sub, seed in (("cal", 1), ("gold", 2)):
        (tmp_path / sub).mkdir()
        rng = np.random.default_rng(seed)
        for i in range(4 if sub == "cal" else 2):
            cv2.imwrite(str(tmp_path / sub / f"{sub}-{i}.png"), rng.integers(0, 255, (48, 72, 3), dtype=np.uint8))
    onnx_path = classifier_model(tmp_path / "cls.onnx", nc=4, softmax=False)
    mean, std = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]
    cfg = write_config(tmp_path / "c.yaml", onnx_path, tmp_path / "cal", tmp_path / "gold", fidelity={},
                       preprocess={"resize": "center-crop", "short_side": 36, "mean": mean, "std": std})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = Path(json.loads(proc.stdout)["builds"][0]["folder"])
    fed = np.load(folder / "golden" / "inputs" / "gold-0.npy")
    rgb = cv2.imread(str(tmp_path / "gold" / "gold-0.png"))[:, :, ::-1]
    # 48x72 -> Resize(36): 36x54 -> CenterCrop(32): rows 2..33, columns 11..42
    expected = cv2.resize(np.ascontiguousarray(rgb), (54, 36), interpolation=cv2.INTER_LINEAR)[2:34, 11:43]
    assert np.array_equal(fed[0], expected)
    manifest = json.loads((folder / "manifest.json").read_text())
    resolved = manifest["inputs"]["config"]["resolved"]["preprocess"]
    assert resolved["resize"] == "center-crop" and resolved["short_side"] == 36
    assert manifest["fed_input"]["mean"] == mean and manifest["gates"]["passed"] is True
