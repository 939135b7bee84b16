"""accuracy.json (rkdet.records.accuracy): what the writer writes the reader reads back unchanged, through
the one atomic writer; a damaged record is one line naming the file and the dotted field."""

from __future__ import annotations

import json

import pytest

from rkdet.errors import InputError
from rkdet.records.accuracy import AccuracyRecord, AccuracyRow, read_accuracy, write_accuracy


def _record() -> AccuracyRecord:
    rows = (AccuracyRow("FP32", "model.onnx", "top-1", 0.9, 0.0, 1.0, ((0.99, True), (0.999, True)), {"top-5": 1.0}),
            AccuracyRow("INT8 (emulation)", "emu", "top-1", 0.89, -0.01, 0.89 / 0.9, ((0.99, False), (0.999, False)),
                        {"top-5": 0.99}))
    return AccuracyRecord("b-rk3588", "a" * 64, "labels.csv", 100, rows, ("a note",), "c" * 64)


def test_the_record_round_trips(tmp_path) -> None:
    write_accuracy(tmp_path / "accuracy.json", _record())
    assert read_accuracy(tmp_path / "accuracy.json") == _record()
    assert json.loads((tmp_path / "accuracy.json").read_text())["schema"] == "rkdet.accuracy/2"
    assert [p.name for p in tmp_path.iterdir()] == ["accuracy.json"]  # no temp file left beside it


@pytest.mark.parametrize(("damage", "says"), [
    (lambda d: d.update(schema="rkdet.accuracy/9"), r"accuracy.json: schema: expected rkdet.accuracy/2"),
    (lambda d: d["rows"][1].update(value="high"), r"accuracy.json: rows\[1\].value: expected"),
    (lambda d: d["rows"][0]["lines"][0].pop("passed"), r"accuracy.json: rows\[0\].lines\[0\].passed"),
    (lambda d: d.update(rows={}), r"accuracy.json: rows: expected"),
    # crafted values: the table's own arithmetic, bounds, and what only rkdet writes
    (lambda d: d["rows"][1].update(value=0.95), r"rows\[1\].delta: expected value - FP32's value"),
    (lambda d: d["rows"][1].update(ratio=1.0), r"rows\[1\].ratio: expected value / FP32's value"),
    (lambda d: d["rows"][1]["lines"][0].update(passed=True), r"rows\[1\].lines\[0\].passed: expected false"),
    (lambda d: d["rows"][1]["lines"].pop(), r"rows\[1\].lines: expected one entry for each of 0.99, 0.999"),
    (lambda d: d["rows"][0].update(value=7.0), r"rows\[0\].value: expected a fraction from 0 to 1"),
    (lambda d: d["rows"][0].update(variant="INT8"), r"rows\[0\].variant: expected 'FP32'"),
    (lambda d: d["rows"][1].update(variant="x" * 121), r"rows\[1\].variant: expected at most 120 characters"),
    (lambda d: d["rows"][1]["others"].update({"k%d" % i: 1 for i in range(20)}), r"rows\[1\].others: expected at most 16"),
    (lambda d: d["rows"][1]["others"].update(huge=1e300), r"rows\[1\].others.huge: expected a number of at most 1e12"),
    (lambda d: d.update(rows=d["rows"] * 40), r"rows: expected at most 64 rows"),
    (lambda d: d.update(fingerprint="../../etc"), r"fingerprint: expected 64 lowercase hex digits"),
    (lambda d: d.update(labels_sha256=None), r"labels_sha256: expected a value"),
    (lambda d: d.update(samples=0), r"samples: expected a count from 1 to 100000"),
    (lambda d: d.update(notes=["n"] * 33), r"notes: expected at most 32 notes"),
])
def test_a_damaged_record_is_one_line_naming_the_field(tmp_path, damage, says) -> None:
    write_accuracy(tmp_path / "accuracy.json", _record())
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    damage(doc)
    (tmp_path / "accuracy.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match=says):
        read_accuracy(tmp_path / "accuracy.json")


def test_a_record_of_the_first_schema_reads_without_the_labels_hash(tmp_path) -> None:
    doc = _record().to_json()
    doc["schema"] = "rkdet.accuracy/1"
    del doc["labels_sha256"]
    (tmp_path / "accuracy.json").write_text(json.dumps(doc))
    assert read_accuracy(tmp_path / "accuracy.json").labels_sha256 is None
