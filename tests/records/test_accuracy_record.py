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
    return AccuracyRecord("b-rk3588", "a" * 64, "labels.csv", 100, rows, ("a note",))


def test_the_record_round_trips(tmp_path) -> None:
    write_accuracy(tmp_path / "accuracy.json", _record())
    assert read_accuracy(tmp_path / "accuracy.json") == _record()
    assert json.loads((tmp_path / "accuracy.json").read_text())["schema"] == "rkdet.accuracy/1"
    assert [p.name for p in tmp_path.iterdir()] == ["accuracy.json"]  # no temp file left beside it


@pytest.mark.parametrize(("damage", "says"), [
    (lambda d: d.update(schema="rkdet.accuracy/9"), r"accuracy.json: schema: expected rkdet.accuracy/1"),
    (lambda d: d["rows"][1].update(value="high"), r"accuracy.json: rows\[1\].value: expected"),
    (lambda d: d["rows"][0]["lines"][0].pop("passed"), r"accuracy.json: rows\[0\].lines\[0\].passed"),
    (lambda d: d.update(rows={}), r"accuracy.json: rows: expected"),
])
def test_a_damaged_record_is_one_line_naming_the_field(tmp_path, damage, says) -> None:
    write_accuracy(tmp_path / "accuracy.json", _record())
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    damage(doc)
    (tmp_path / "accuracy.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match=says):
        read_accuracy(tmp_path / "accuracy.json")
