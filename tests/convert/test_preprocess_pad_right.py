"""Keep-aspect resize with right/bottom padding (preprocess.resize: pad-right-bottom): the image at the
top-left of the input, the rest pad_value — PaddleOCR's text-line resize (cls/rec `resize_norm_img`). Tiny
images whose pixels say where they came from; the mode reaches the manifest's config and the fed tensors
(what the fingerprints hash). No toolkit run."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tiny_models import write_config

from rkdet.config import ConfigError, PreprocessSection, load_config
from rkdet.convert.images import fit_top_left, preprocess
from rkdet.convert.manifest import build_config
from rkdet.onboard.hashing import output_hash


def _coordinate_image(h: int, w: int) -> np.ndarray:
    """Each pixel says where it is: R = row, G = column, B = 7."""
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    return np.stack([ys, xs, np.full_like(ys, 7)], -1).astype(np.uint8)


NEAREST = {"resize": "pad-right-bottom", "interpolation": "nearest", "pad_value": 200}


def test_a_tall_image_fills_the_height_and_the_right_is_padded() -> None:
    img = _coordinate_image(8, 4)
    out, box = preprocess(img, (8, 8), PreprocessSection(**NEAREST))
    assert out.shape == (1, 8, 8, 3) and out.dtype == np.uint8
    assert np.array_equal(out[0, :, :4], img)  # no scaling: the pixels as they were, at the top-left
    assert (out[0, :, 4:] == 200).all()  # the right half: the pad value
    assert (box.pad_left, box.pad_top, box.scale_x, box.scale_y, box.source_size) == (0, 0, 1.0, 1.0, (8, 4))


def test_a_wide_image_fills_the_width_and_the_bottom_is_padded() -> None:
    img = _coordinate_image(2, 8)
    out, box = preprocess(img, (4, 4), PreprocessSection(**NEAREST))  # half size: every other pixel (nearest)
    assert np.array_equal(out[0, :1, :4], img[::2, ::2]) and (out[0, 1:] == 200).all()
    assert (box.scale_x, box.scale_y) == (0.5, 0.5)


def test_channels_follow_the_model_order() -> None:
    out, _ = preprocess(_coordinate_image(8, 4), (8, 8), PreprocessSection(**NEAREST, channel_order="bgr"))
    assert out[0, 5, 3].tolist() == [7, 3, 5] and out[0, 5, 6].tolist() == [200, 200, 200]


def test_the_geometry_is_paddleocrs_text_line_resize() -> None:
    """PaddleOCR's cls/rec resize_norm_img for a 48x192 input: width ceil(48 * (w / h)), capped at 192."""
    for h, w in ((96, 200), (96, 384), (30, 17), (48, 1), (1000, 999), (7, 3)):
        app_w = min(192, int(math.ceil(48 * (w / float(h)))))
        assert fit_top_left(h, w, (48, 192)) == (48, app_w), (h, w)
    assert fit_top_left(96, 200, (48, 192)) == (48, 100) and fit_top_left(7, 3, (48, 192)) == (48, 21)  # 20.57 up
    # wider than the input's aspect (4:1): the app squeezes it to 192x48; this mode keeps the aspect
    assert fit_top_left(96, 500, (48, 192)) == (37, 192)  # ceil(192 * 96 / 500) = ceil(36.86)


def test_a_line_as_the_app_feeds_it_against_stretch() -> None:
    """The same 96x200 line: stretch fills 48x192 with it; pad-right-bottom puts 100 columns of it at the
    left and pad_value after, as the app does (its pad: 0 after (x/255 - 0.5) / 0.5, i.e. pixel 127.5)."""
    img = np.random.default_rng(1).integers(0, 256, (96, 200, 3), dtype=np.uint8)
    padded, _ = preprocess(img, (48, 192), PreprocessSection(resize="pad-right-bottom", pad_value=128))
    stretched, _ = preprocess(img, (48, 192), PreprocessSection(resize="stretch"))
    assert (padded[0, :, 100:] == 128).all() and not (padded[0, :, 99] == 128).all()
    assert output_hash(padded) != output_hash(stretched)  # what the fingerprints hash differs


def test_the_mode_is_recorded_in_the_build_config(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path / "c.yaml", tmp_path / "m.onnx", tmp_path, tmp_path,
                                   preprocess={"resize": "pad-right-bottom", "pad_value": 128}))
    assert build_config(cfg, "rk3588")["preprocess"]["resize"] == "pad-right-bottom"
    assert build_config(cfg, "rk3588")["preprocess"]["pad_value"] == 128
    bad = write_config(tmp_path / "bad.yaml", tmp_path / "m.onnx", tmp_path, tmp_path,
                       preprocess={"resize": "pad-right"})
    with pytest.raises(ConfigError, match="preprocess.resize"):
        load_config(bad)
