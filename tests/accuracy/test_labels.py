"""Labels are read without trusting them: every bad entry is one line naming the file and the entry
(InputError, exit 2) before anything runs, and the CLI shows it with no traceback and writes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from rkdet.accuracy.labels import ClassLabels, CocoLabels, read_label_map, read_labels
from rkdet.errors import EXIT_BAD_INPUT, InputError

sys.path.insert(0, str(Path(__file__).parents[1] / "convert"))
from convert_helpers import run_rkdet  # noqa: E402


def _images(folder: Path, names: list[str], size: tuple[int, int] = (40, 50)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        cv2.imwrite(str(folder / f"{n}.png"), np.full((*size, 3), 200, np.uint8))
    return folder


def _coco(path: Path, **changes) -> Path:
    doc = {"images": [{"id": 1, "file_name": "a.png", "width": 50, "height": 40},
                      {"id": 2, "file_name": "b.png", "width": 50, "height": 40}],
           "annotations": [{"image_id": 1, "category_id": 0, "bbox": [1, 2, 10, 10]},
                           {"image_id": 2, "category_id": 1, "bbox": [5, 5, 20, 20]}],
           "categories": [{"id": 0, "name": "x"}, {"id": 1, "name": "y"}]}
    doc.update(changes)
    path.write_text(json.dumps(doc))
    return path


def test_a_good_coco_file_is_read_with_its_category_order(tmp_path) -> None:
    _images(tmp_path, ["a", "b"])
    labels = read_labels(_coco(tmp_path / "l.json"), None, classes=2, per_pixel=False)
    assert isinstance(labels, CocoLabels)
    assert labels.image_ids == {"a": 1, "b": 2} and labels.category_ids == (0, 1) and not labels.has_masks
    assert [s.name for s in labels.samples] == ["a", "b"]


@pytest.mark.parametrize(("change", "says"), [
    ({"annotations": [{"image_id": 1, "category_id": 0, "bbox": [1, 2, 10, 10]},
                      {"image_id": 2, "category_id": 1, "bbox": [5, 5, 20]}]}, r"annotations\[1\]: bbox must be"),
    ({"annotations": [{"image_id": 9, "category_id": 0, "bbox": [1, 2, 10, 10]}]}, r"annotations\[0\]: image_id 9 is not in images"),
    ({"annotations": [{"image_id": 1, "category_id": 5, "bbox": [1, 2, 10, 10]}]}, r"annotations\[0\]: category_id 5"),
    ({"annotations": [{"image_id": 1, "category_id": 0, "bbox": [45, 2, 10, 10]}]}, r"annotations\[0\]: bbox .* outside"),
    ({"annotations": [{"image_id": 1, "category_id": 0, "bbox": [1, 2, "NaN", 10]}]}, r"annotations\[0\]: bbox value"),
    ({"images": [{"id": 1, "file_name": "../a.png", "width": 50, "height": 40}]}, r"images\[0\]: file_name '\.\./a\.png' is not in"),
    ({"images": [{"id": 1, "file_name": "a.png", "width": 50}]}, r"images\[0\]: height"),
    ({"categories": [{"id": 0}]}, r"1 categories, the model has 2 classes"),
    ({"annotations": {}}, r"key 'annotations' is missing or not a list"),
])
def test_a_bad_coco_entry_is_one_line_naming_it(tmp_path, change, says) -> None:
    _images(tmp_path, ["a", "b"])
    path = _coco(tmp_path / "l.json", **change)
    with pytest.raises(InputError, match=says) as err:
        read_labels(path, None, classes=2, per_pixel=False)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("rows", "says"), [
    (["a.png,0", "b.png,7"], r":2: class 7 is outside the model's 3 classes"),
    (["a.png,0", "a.png,1"], r":2: image 'a.png' is labelled twice"),
    (["a.png,cat"], r":1: class 'cat' is not a class index"),
    (["c.png,0"], r":1: image 'c.png' is not in"),
    (["a.png,0,1"], r":1: expected 2 fields"),
])
def test_a_bad_csv_row_is_one_line_naming_file_and_line(tmp_path, rows, says) -> None:
    _images(tmp_path, ["a", "b"])
    (tmp_path / "l.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(InputError, match=says):
        read_labels(tmp_path / "l.csv", None, classes=3, per_pixel=False)


def test_class_folders_take_the_index_before_a_dash_and_refuse_a_name(tmp_path) -> None:
    _images(tmp_path / "labels" / "0-red", ["a"])
    _images(tmp_path / "labels" / "2", ["b"])
    labels = read_labels(tmp_path / "labels", None, classes=3, per_pixel=False)
    assert isinstance(labels, ClassLabels) and labels.truth == {"a": 0, "b": 2}
    _images(tmp_path / "labels" / "cat", ["c"])
    with pytest.raises(InputError, match=r"labels/cat: class 'cat' is not a class index"):
        read_labels(tmp_path / "labels", None, classes=3, per_pixel=False)


def test_a_label_map_of_another_size_or_an_unknown_class_is_refused(tmp_path) -> None:
    cv2.imwrite(str(tmp_path / "m.png"), np.zeros((40, 50), np.uint8))
    assert read_label_map(tmp_path / "m.png", (40, 50), 3).shape == (40, 50)
    with pytest.raises(InputError, match=r"m.png: label map is 50x40, its image 60x40"):
        read_label_map(tmp_path / "m.png", (40, 60), 3)
    bad = np.zeros((40, 50), np.uint8)
    bad[3, 4] = 9
    cv2.imwrite(str(tmp_path / "m.png"), bad)
    with pytest.raises(InputError, match=r"m.png: pixel value 9 is not a class"):
        read_label_map(tmp_path / "m.png", (40, 50), 3)
    cv2.imwrite(str(tmp_path / "m.png"), np.zeros((40, 50, 3), np.uint8))
    with pytest.raises(InputError, match=r"not an 8-bit single-channel PNG"):
        read_label_map(tmp_path / "m.png", (40, 50), 3)


def test_the_cli_refuses_a_crafted_labels_file_in_one_line_and_writes_nothing(colour_builds, tmp_path) -> None:
    _images(tmp_path / "images", ["a", "b"])
    (tmp_path / "l.csv").write_text("a.png,0\nb.png,1\n../../etc/passwd,2\n")
    proc = run_rkdet("accuracy", str(colour_builds["classifier"]), "--labels", str(tmp_path / "l.csv"), "--images",
                     str(tmp_path / "images"), "--out", str(tmp_path / "o"))
    assert proc.returncode == EXIT_BAD_INPUT
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"rkdet: {tmp_path / 'l.csv'}:3: image '../../etc/passwd' is not in {tmp_path / 'images'}; "
                     "name a file in that folder"], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "o").exists()  # not even the --out folder


def test_the_labels_hash_follows_the_labels_and_images_not_where_they_are(tmp_path) -> None:
    """labels_digest (accuracy.json's labels_sha256, history's key): a copy elsewhere hashes the same; a changed
    class, a changed image pixel or a changed COCO file each change it."""
    import shutil

    from rkdet.accuracy.labels import labels_digest

    def folders(root: Path, second_class: str) -> Path:
        _images(root / "0", ["a"])
        _images(root / second_class, ["b"])
        return root

    one = labels_digest(read_labels(folders(tmp_path / "one", "1"), None, classes=3, per_pixel=False))
    assert len(one) == 64
    shutil.copytree(tmp_path / "one", tmp_path / "elsewhere" / "two")
    assert labels_digest(read_labels(tmp_path / "elsewhere" / "two", None, classes=3, per_pixel=False)) == one
    assert labels_digest(read_labels(folders(tmp_path / "moved", "2"), None, classes=3, per_pixel=False)) != one
    cv2.imwrite(str(tmp_path / "elsewhere" / "two" / "1" / "b.png"), np.full((40, 50, 3), 201, np.uint8))
    assert labels_digest(read_labels(tmp_path / "elsewhere" / "two", None, classes=3, per_pixel=False)) != one
    _images(tmp_path / "coco", ["a", "b"])
    coco = labels_digest(read_labels(_coco(tmp_path / "coco" / "labels.json"), None, classes=2, per_pixel=False))
    doc = json.loads((tmp_path / "coco" / "labels.json").read_text())
    doc["annotations"][0]["bbox"][0] += 1
    (tmp_path / "coco" / "labels.json").write_text(json.dumps(doc))
    assert labels_digest(read_labels(tmp_path / "coco" / "labels.json", None, classes=2, per_pixel=False)) != coco
