"""Image size bounds follow the model's input: a 24x24 net takes 24x24 crops (the fixed 32 px floor applies
to models at least that large), and the refusal says the size to use, not "resize it"."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from rkdet.convert.images import MIN_SIDE, decode_rgb, min_side_for
from rkdet.errors import InputError


def _png(path: Path, side: int) -> Path:
    cv2.imwrite(str(path), np.random.default_rng(side).integers(0, 255, (side, side, 3), dtype=np.uint8))
    return path


def test_a_small_model_takes_images_of_its_own_size(tmp_path: Path) -> None:
    assert min_side_for((24, 24)) == 24 and min_side_for((640, 640)) == MIN_SIDE and min_side_for((12, 48)) == 12
    crop = _png(tmp_path / "crop.png", 24)
    assert decode_rgb(crop, min_side_for((24, 24))).shape == (24, 24, 3)
    with pytest.raises(InputError, match="use an image at least 32 px on each side"):
        decode_rgb(crop, min_side_for((640, 640)))
    with pytest.raises(InputError, match="outside 24..8192 px per side.*at least 24 px"):
        decode_rgb(_png(tmp_path / "tiny.png", 20), min_side_for((24, 24)))
