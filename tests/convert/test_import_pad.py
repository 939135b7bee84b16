"""`rkdet import-rknn --pad-value/--interpolation`: the golden inputs are letterboxed as the app does it
(a model-zoo app pads with 0, not Ultralytics' 114), and the sources line says so."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from rkdet.convert.imported import FedSpec, Given, _inputs


def test_golden_inputs_take_the_apps_pad_value_and_interpolation(tmp_path: Path) -> None:
    folder = tmp_path / "inputs"
    folder.mkdir()
    cv2.imwrite(str(folder / "wide.png"), np.full((40, 80, 3), 200, np.uint8))  # letterboxed into 64x64: borders
    fed = FedSpec("images", (1, 64, 64, 3), (0.0, 0.0, 0.0), (255.0, 255.0, 255.0), "rgb", {})
    default = _inputs(folder, fed, Given(channel_order="rgb"))["wide"]
    zero = _inputs(folder, fed, Given(channel_order="rgb", pad_value=0))["wide"]
    assert default[0, 0, 0].tolist() == [114, 114, 114] and zero[0, 0, 0].tolist() == [0, 0, 0]
    assert np.array_equal(default[0, 32], zero[0, 32])  # the picture itself is the same
    cv2.imwrite(str(folder / "wide.png"), np.random.default_rng(0).integers(0, 255, (40, 80, 3), np.uint8))
    linear = _inputs(folder, fed, Given(channel_order="rgb"))["wide"]
    nearest = _inputs(folder, fed, Given(channel_order="rgb", interpolation="nearest"))["wide"]
    assert not np.array_equal(linear, nearest)


def test_golden_inputs_can_keep_the_aspect_at_the_top_left(tmp_path: Path) -> None:
    """--resize pad-right-bottom: the picture at the top-left, only the bottom padded (PaddleOCR's lines)."""
    folder = tmp_path / "inputs"
    folder.mkdir()
    cv2.imwrite(str(folder / "wide.png"), np.full((40, 80, 3), 200, np.uint8))  # into 64x64: 32 rows of picture
    fed = FedSpec("images", (1, 64, 64, 3), (0.0, 0.0, 0.0), (255.0, 255.0, 255.0), "rgb", {})
    top = _inputs(folder, fed, Given(channel_order="rgb", resize="pad-right-bottom", pad_value=0))["wide"]
    assert (top[0, :32] == 200).all() and (top[0, 32:] == 0).all()
