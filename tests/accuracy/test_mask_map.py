"""Mask mAP for YOLOv8-seg against COCO polygons, on decoded outputs whose mask is known (the decoder tests'
synthetic head, tests/diff/test_decoder_families.py): the mask that is the labelled polygon scores mask AP@0.5
of 1, a mask a quarter of it (same box) 0 while its box still scores 1; a mask on a letterboxed page lands
where the page's pixels are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from rkdet.accuracy.inputs import BuildModel, FedImage
from rkdet.accuracy.labels import read_labels
from rkdet.accuracy.metrics import coco_map, page_mask
from rkdet.accuracy.runs import VariantOutputs
from rkdet.config import PreprocessSection
from rkdet.convert.images import Letterbox
from rkdet.decode import detect_layout, task_of
from rkdet.errors import InputError

sys.path.insert(0, str(Path(__file__).parents[1] / "diff"))
from test_decoder_families import seg_outputs  # noqa: E402

ONE = pytest.approx(1.0, abs=1e-12)  # COCOeval averages 101 recall points: 1.0 within rounding


def _model(arrays: dict[str, np.ndarray]) -> BuildModel:
    layout = detect_layout([(n, a.shape) for n, a in arrays.items()], input_size=(64, 64))
    task = task_of(layout)
    assert task is not None
    return BuildModel(Path("seg-build"), "0" * 64, b"", None, "images", (64, 64), tuple(arrays), PreprocessSection(),
                      layout, task, "INT8")


def _labels(tmp_path: Path, polygons: bool = True) -> Path:
    cv2.imwrite(str(tmp_path / "p.png"), np.zeros((64, 64, 3), np.uint8))
    ann = {"image_id": 1, "category_id": 0, "bbox": [8, 8, 32, 32]}
    if polygons:
        ann["segmentation"] = [[8, 8, 40, 8, 40, 40, 8, 40]]
    (tmp_path / "l.json").write_text(json.dumps({
        "images": [{"id": 1, "file_name": "p.png", "width": 64, "height": 64}], "annotations": [ann],
        "categories": [{"id": 0, "name": "a"}, {"id": 1, "name": "b"}]}))
    return tmp_path / "l.json"


def _score(tmp_path: Path, arrays: dict[str, np.ndarray], polygons: bool = True):
    model = _model(arrays)
    labels = read_labels(_labels(tmp_path, polygons), None, classes=2, per_pixel=False)
    fed = {"p": FedImage(np.zeros((1, 64, 64, 3), np.uint8), Letterbox(1.0, 1.0, 0, 0, (64, 64)))}
    return coco_map(model, labels, VariantOutputs("FP32", "", {"p": arrays}), fed)


def test_the_mask_that_is_the_polygon_scores_1_and_a_quarter_of_it_0(tmp_path) -> None:
    right = _score(tmp_path, seg_outputs())
    assert right.metric == "mask mAP@0.5:0.95" and right.others["mask mAP@0.5"] == ONE and right.value > 0.9
    assert right.others["box mAP@0.5:0.95"] == ONE
    quarter = _score(tmp_path, seg_outputs(region=(6, 14)))  # mask IoU 1/4 with the polygon, box unchanged
    assert quarter.others["mask mAP@0.5"] == 0.0 and quarter.others["box mAP@0.5:0.95"] == ONE


def test_without_polygons_the_box_map_is_the_headline(tmp_path) -> None:
    score = _score(tmp_path, seg_outputs(region=(6, 14)), polygons=False)
    assert (score.metric, score.value) == ("box mAP@0.5:0.95", ONE) and "mask mAP@0.5" not in score.others


def test_a_mask_on_a_letterboxed_page_lands_on_the_page_pixels() -> None:
    """A 16x16 prototype grid at stride 4 over a 64x64 input holding a 128x64 page (scale 0.5, padded 16
    left and right): cell (r, c) covers page rows 8r..8r+7 and columns 8(c-4)..8(c-4)+7."""
    grid = np.zeros((16, 16), bool)
    grid[3, 5] = True
    page = page_mask(grid, 4.0, Letterbox(0.5, 0.5, 16, 0, (128, 64)))
    expected = np.zeros((128, 64), bool)
    expected[24:32, 8:16] = True
    assert page.shape == (128, 64) and np.array_equal(page, expected)


def test_a_file_whose_size_is_not_the_images_is_one_line(tmp_path) -> None:
    labels = read_labels(_labels(tmp_path), None, classes=2, per_pixel=False)
    fed = {"p": FedImage(np.zeros((1, 64, 64, 3), np.uint8), Letterbox(1.0, 1.0, 0, 0, (64, 80)))}
    with pytest.raises(InputError, match=r"l.json: image 'p.png' is 80x64 but the file says 64x64"):
        coco_map(_model(seg_outputs()), labels, VariantOutputs("FP32", "", {"p": seg_outputs()}), fed)
