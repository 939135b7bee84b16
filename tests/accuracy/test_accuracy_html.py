"""The accuracy record as HTML (rkdet.accuracy.html) and `rkdet accuracy ACCURACY_JSON [--html]`: the
terminal's table (variants, metric, delta, side metrics, the 99 % / 99.9 % lines, a board row with its
backend label, an emulated one flagged), every string from the record escaped, and a crafted record one
line with exit 2, nothing written. No model is needed: records are written by the one writer."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from rkdet.accuracy.html import render_accuracy_html
from rkdet.accuracy.table import rows as table_rows
from rkdet.accuracy.table import terminal_lines
from rkdet.accuracy.metrics import Score
from rkdet.records.accuracy import AccuracyRecord, write_accuracy

sys.path.insert(0, str(Path(__file__).parents[1] / "convert"))
from convert_helpers import run_rkdet  # noqa: E402

HOSTILE = "<script>alert(1)</script>\x1b[32mSAME\u202e"


def _record(board: str = "board: rknnlite (emulated board)", int8: float = 0.48) -> AccuracyRecord:
    """FP32 0.5, INT8 `int8`, a board row at 0.499 (99.8 % of FP32: holds 99 %, not 99.9 %)."""
    scores = [("FP32", "model.onnx", Score("box mAP@0.5:0.95", 0.5, {"mAP@0.5": 0.7, "detections": 172.0}, 6)),
              ("INT8 (emulation)", "model.int8emu.onnx", Score("box mAP@0.5:0.95", int8, {"mAP@0.5": 0.69,
                                                                                           "detections": 135.0}, 6)),
              (board, f"results/{HOSTILE}", Score("box mAP@0.5:0.95", 0.499, {"mAP@0.5": 0.7, "detections": 171.0}, 6))]
    return AccuracyRecord("yolov8n-rk3588", "ab" * 32, "labels.json", 6, tuple(table_rows(scores)),
                          (f"a note {HOSTILE}",), "cd" * 32)


def _cells(page: str) -> list[list[str]]:
    """The first table's rows as text cells (tags dropped)."""
    table = page.split("<table>")[1].split("</table>")[0]
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
            for row in table.split("<tr>")[1:]]


def test_the_page_is_the_terminal_table_with_the_board_row_labelled() -> None:
    record = _record()
    page = render_accuracy_html(record)
    cells = _cells(page)
    assert cells[0] == ["variant", "box mAP@0.5:0.95", "delta vs FP32", "mAP@0.5", "detections", "≥ 99% FP32",
                        "≥ 99.9% FP32"]
    assert cells[1] == ["FP32", "50.00%", "+0.00%", "70.00%", "172", "(reference)", "(reference)"]
    assert cells[2] == ["INT8 (emulation)", "48.00%", "-2.00%", "69.00%", "135", "FAIL", "FAIL"]
    assert cells[3] == ["board: rknnlite (emulated board) EMULATED: not an NPU", "49.90%", "-0.10%", "70.00%", "171",
                        "pass", "FAIL"]
    # the same numbers, cell for cell, as the terminal table prints
    terminal = [line.split() for line in terminal_lines(list(record.rows))[1:]]
    assert terminal[1][-6:] == ["48.00%", "-2.00%", "69.00%", "135", "FAIL", "FAIL"]
    assert "1 row(s) below 99% of FP32&#x27;s box mAP@0.5:0.95: INT8 (emulation)" in page
    assert "cd" * 32 in page and "ab" * 32 in page
    assert "1 row(s) below 99.9% of FP32&#x27;s box mAP@0.5:0.95: board: rknnlite (emulated board)" in (
        render_accuracy_html(_record(int8=0.5), 0.999))  # the board row at 99.8 %
    assert "every row holds 99%" in render_accuracy_html(_record(int8=0.5), 0.99)


def test_every_string_from_the_record_is_escaped() -> None:
    page = render_accuracy_html(_record(board=f"board: {HOSTILE}"))
    assert "<script>" not in page and "\x1b" not in page and "\u202e" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[32mSAME\\u202e" in page
    assert "EMULATED: not an NPU" not in page.split("<table>")[1]  # only a row the run called emulated is flagged


def _written(tmp_path: Path, record: AccuracyRecord) -> Path:
    write_accuracy(tmp_path / "accuracy.json", record)
    return tmp_path / "accuracy.json"


def test_a_recorded_table_is_shown_again_and_written_as_html(tmp_path) -> None:
    path = _written(tmp_path, _record(int8=0.5))
    proc = run_rkdet("accuracy", str(path), "--html", str(tmp_path / "acc.html"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "board: rknnlite (emulated board)" in proc.stdout and "(reference)" in proc.stdout
    assert _cells((tmp_path / "acc.html").read_text())[3][0].startswith("board: rknnlite (emulated board)")
    proc = run_rkdet("accuracy", str(_written(tmp_path, _record())), "--require", "99.9")
    assert proc.returncode == 1 and "FAIL" in proc.stdout  # the INT8 row at 96 %: the exit rule of a measurement
    proc = run_rkdet("accuracy", str(_written(tmp_path, _record(int8=0.5))), "--require", "99.9")
    assert proc.returncode == 1  # the board row at 99.8 %


@pytest.mark.parametrize(("damage", "says"), [
    (lambda d: d["rows"][2].update(value=0.9, delta=0.4), "rows[2].ratio: expected value / FP32's value"),
    (lambda d: d["rows"][1]["lines"][0].update(passed=True), "rows[1].lines[0].passed: expected false"),
    (lambda d: d["rows"][2].update(variant="board: " + "A" * 500), "rows[2].variant: expected at most 120 characters"),
    (lambda d: d.update(rows=[]), "rows: expected at least the FP32 row"),
])
def test_a_crafted_record_is_one_line_exit_2_and_no_page(tmp_path, damage, says) -> None:
    path = _written(tmp_path, _record())
    doc = json.loads(path.read_text())
    damage(doc)
    path.write_text(json.dumps(doc))
    proc = run_rkdet("accuracy", str(path), "--html", str(tmp_path / "acc.html"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"rkdet: {path}: {says}" + proc.stderr.split(says, 1)[1].rstrip()]
    assert "re-run rkdet accuracy" in proc.stderr and not (tmp_path / "acc.html").exists()


def test_a_record_with_measuring_flags_or_a_build_without_labels_is_refused(tmp_path) -> None:
    path = _written(tmp_path, _record())
    proc = run_rkdet("accuracy", str(path), "--labels", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"rkdet: {path}: an accuracy.json is shown as recorded; --labels measures a build: pass the build folder instead"]
    proc = run_rkdet("accuracy", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"rkdet: {tmp_path}: measuring a build needs its ground truth: pass --labels (docs/ACCURACY.md)"]
