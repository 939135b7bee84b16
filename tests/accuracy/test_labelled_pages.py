"""The shipped labelled pages (calibration_data/labelled): the files are the ones SHA256SUMS names, the
labels read as a valid COCO set for the default model's 11 classes with every class present, and
make_labelled.py renders the same bytes again (the labels are exact because the script drew them)."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from rkdet.accuracy.labels import CocoLabels, read_labels

REPO = Path(__file__).resolve().parents[2]
LABELLED = REPO / "calibration_data" / "labelled"


def _sums(folder: Path) -> dict[str, str]:
    return {line.split()[1]: line.split()[0] for line in (folder / "SHA256SUMS").read_text().splitlines() if line}


def test_the_files_are_the_ones_sha256sums_names_and_small() -> None:
    sums = _sums(LABELLED)
    assert sorted(sums) == sorted(p.name for p in LABELLED.iterdir() if p.suffix in (".png", ".json"))
    for name, digest in sums.items():
        assert hashlib.sha256((LABELLED / name).read_bytes()).hexdigest() == digest, name
    assert sum(p.stat().st_size for p in LABELLED.iterdir()) < 1 << 20


def test_the_labels_are_a_coco_set_with_every_class() -> None:
    labels = read_labels(LABELLED / "labels.json", None, classes=11, per_pixel=False)
    assert isinstance(labels, CocoLabels) and len(labels.samples) == 6
    assert {a["category_id"] for a in labels.document["annotations"]} == set(range(11))


def test_the_script_renders_the_same_pages(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("make_labelled", REPO / "calibration_data" / "make_labelled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write(tmp_path)
    assert _sums(tmp_path) == _sums(LABELLED)
