"""`rkdet accuracy` on the default model's shared build (tests/shared_build.py) with COCO labels: labels
that are FP32's own detections give FP32 a box mAP of exactly 1 (the decode, the letterbox mapped back
to the page and the category order are right), the same boxes shrunk to 1/16 of their area give about 0, and the
shipped labelled pages (calibration_data/labelled) give the FP32 and INT8 rows with their record."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from rkdet.accuracy import runs
from rkdet.accuracy.inputs import feed, load_model
from rkdet.accuracy.labels import read_labels
from rkdet.accuracy.metrics import page_detections
from rkdet.decode import CONF_THRESHOLD
from rkdet.records.accuracy import read_accuracy
from rkdet.records.build import load_build

sys.path.insert(0, str(Path(__file__).parents[1] / "convert"))
from convert_helpers import REPO, run_rkdet  # noqa: E402

SHIPPED = REPO / "calibration_data" / "labelled"


def _own_labels(build: Path, folder: Path, shrink: bool) -> Path:
    """A COCO file of FP32's own detections (score >= the decision threshold) on three shipped pages;
    `shrink`: every box a quarter of its width and height at its top-left corner (IoU 1/16 with itself)."""
    folder.mkdir()
    for page in sorted(SHIPPED.glob("*.png"))[:3]:
        shutil.copy(page, folder / page.name)
    model = load_model(load_build(build, complete=False))
    shipped = read_labels(SHIPPED / "labels.json", None, classes=model.layout.nc, per_pixel=False)
    samples = tuple(s for s in shipped.samples if (folder / s.image.name).exists())
    fed = feed(model, samples)
    fp32 = runs.fp32(model, fed)
    images, annotations = [], []
    for i, s in enumerate(samples, start=1):
        h, w = fed[s.name].letterbox.source_size
        images.append({"id": i, "file_name": s.image.name, "width": w, "height": h})
        for det in page_detections(model, fp32.outputs[s.name], fed[s.name].letterbox, CONF_THRESHOLD):
            cls, (x, y, bw, bh) = det.cls, det.bbox
            if shrink:
                bw, bh = bw / 4, bh / 4
            annotations.append({"image_id": i, "category_id": cls, "bbox": [x, y, bw, bh]})
    assert len(annotations) > 10
    doc = {"images": images, "annotations": annotations,
           "categories": [{"id": c, "name": str(c)} for c in range(model.layout.nc)]}
    (folder / "labels.json").write_text(json.dumps(doc))
    return folder / "labels.json"


def test_labels_that_are_fp32s_own_detections_give_fp32_a_map_of_1(default_build, tmp_path) -> None:
    labels = _own_labels(default_build, tmp_path / "own", shrink=False)
    proc = run_rkdet("accuracy", str(default_build), "--labels", str(labels), "--out", str(tmp_path / "o"))
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    fp32 = read_accuracy(tmp_path / "o" / "accuracy.json").rows[0]
    one = pytest.approx(1.0, abs=1e-12)  # COCOeval averages 101 recall points: 1.0 within rounding
    assert (fp32.variant, fp32.metric, fp32.value, fp32.others["mAP@0.5"]) == ("FP32", "box mAP@0.5:0.95", one, one)


def test_the_same_boxes_shrunk_to_a_sixteenth_give_about_0(default_build, tmp_path) -> None:
    labels = _own_labels(default_build, tmp_path / "moved", shrink=True)
    proc = run_rkdet("accuracy", str(default_build), "--labels", str(labels), "--out", str(tmp_path / "o"))
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    fp32 = read_accuracy(tmp_path / "o" / "accuracy.json").rows[0]
    assert fp32.others["mAP@0.5"] < 0.05  # a shrunk box overlaps no detection of its class at IoU 0.5


def test_the_shipped_labelled_pages_give_the_fp32_and_int8_rows(default_build, tmp_path) -> None:
    proc = run_rkdet("accuracy", str(default_build), "--labels", str(SHIPPED / "labels.json"), "--out", str(tmp_path),
                     "--json")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    record = read_accuracy(tmp_path / "accuracy.json")
    assert record.samples == 6 and record.labels == "labels.json" and len(record.fingerprint) == 64
    fp32, int8 = record.rows
    assert (fp32.variant, int8.variant) == ("FP32", "INT8 (emulation)")
    assert fp32.delta == 0 and fp32.ratio == 1 and 0 < fp32.value <= 1
    assert abs(int8.delta - (int8.value - fp32.value)) < 1e-12 and abs(int8.ratio - int8.value / fp32.value) < 1e-12
    assert [ok for _, ok in int8.lines] == [int8.ratio >= 0.99, int8.ratio >= 0.999]
    assert proc.returncode == (0 if int8.ratio >= 0.99 else 1)
