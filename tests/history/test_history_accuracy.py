"""`rkdet history import --accuracy FILE` and `rkdet history accuracy`: accuracy.json records (written by the
one writer, rkdet.records.accuracy) as one row per variant (build fingerprint, variant, metric, value, the
labels' hash), the change against the previous build on the same labels, importing twice adds nothing,
and a crafted record or a damaged row is one line, exit 2, nothing recorded."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rkdet.accuracy.metrics import Score
from rkdet.accuracy.table import rows as table_rows
from rkdet.records.accuracy import AccuracyRecord, write_accuracy

REPO = Path(__file__).resolve().parents[2]
LABELS = "5a" * 32
OTHER_LABELS = "6b" * 32


def rkdet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, check=False)


def _record(path: Path, fingerprint: str, fp32: float, int8: float, *, labels: str = LABELS,
            board: str = "board: rknnlite (emulated board)") -> Path:
    scores = [("FP32", "model.onnx", Score("top-1", fp32, {"top-5": 1.0}, 8)),
              ("INT8 (emulation)", "model.int8emu.onnx", Score("top-1", int8, {"top-5": 1.0}, 8)),
              (board, "results/x/result", Score("top-1", int8, {"top-5": 1.0}, 8))]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_accuracy(path, AccuracyRecord(f"colour-{fingerprint[:2]}-rk3588", fingerprint, "labels.csv", 8,
                                        tuple(table_rows(scores)), (), labels))
    return path


def _accuracy_rows(results: Path) -> list[dict]:
    proc = rkdet("history", "accuracy", "--results", str(results), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "rkdet.history.accuracy/1"
    return doc["accuracy"]


def test_two_records_give_one_row_per_variant_and_the_change_between_builds(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    a = _record(tmp_path / "a" / "accuracy.json", "aa" * 32, 0.75, 0.625)
    b = _record(tmp_path / "b" / "accuracy.json", "bb" * 32, 0.75, 0.5)
    other = _record(tmp_path / "c" / "accuracy.json", "cc" * 32, 0.5, 0.5, labels=OTHER_LABELS)
    proc = rkdet("history", "import", "--results", str(results), "--accuracy", str(a), "--accuracy", str(b),
                 "--accuracy", str(other))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "recorded 9 accuracy rows of 3 accuracy.json (0 already there)" in proc.stdout
    again = rkdet("history", "import", "--results", str(results), "--accuracy", str(b))
    assert again.returncode == 0 and "recorded 0 accuracy rows of 1 accuracy.json (3 already there)" in again.stdout

    rows = _accuracy_rows(results)
    seen = [(r["labels_sha256"], r["variant"], r["build"], r["metric"], r["value"], r["change_vs_previous_build"])
            for r in rows]
    assert seen[:6] == [  # labels 5a…: FP32 first, then each variant, builds oldest first
        (LABELS, "FP32", "aa" * 32, "top-1", 0.75, None), (LABELS, "FP32", "bb" * 32, "top-1", 0.75, 0.0),
        (LABELS, "INT8 (emulation)", "aa" * 32, "top-1", 0.625, None),
        (LABELS, "INT8 (emulation)", "bb" * 32, "top-1", 0.5, -0.125),
        (LABELS, "board: rknnlite (emulated board)", "aa" * 32, "top-1", 0.625, None),
        (LABELS, "board: rknnlite (emulated board)", "bb" * 32, "top-1", 0.5, -0.125)]
    # another labelled set is never compared with these: its rows have no previous build
    assert [(r["labels_sha256"], r["change_vs_previous_build"]) for r in rows[6:]] == [(OTHER_LABELS, None)] * 3
    assert {r["build_name"] for r in rows} == {"colour-aa-rk3588", "colour-bb-rk3588", "colour-cc-rk3588"}
    assert len(_accuracy_rows(results)) == 9  # the second import added nothing

    proc = rkdet("history", "accuracy", "--results", str(results), "--build", "bbbb")
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = " ".join(proc.stdout.split())
    assert "3 accuracy rows" in said and "50.00%" in said and "-12.50 points" in said and "colour-aa" not in said
    filtered = rkdet("history", "accuracy", "--results", str(results), "--labels", "6b6b", "--json")
    assert [r["build"] for r in json.loads(filtered.stdout)["accuracy"]] == ["cc" * 32] * 3


def test_a_hostile_but_valid_name_is_shown_escaped(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    path = _record(tmp_path / "accuracy.json", "aa" * 32, 0.5, 0.5, board="board: \x1b[2J[red]x[/red]\u202e")
    assert rkdet("history", "import", "--results", str(results), "--accuracy", str(path)).returncode == 0
    proc = rkdet("history", "accuracy", "--results", str(results))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout and "\\x1b[2J[red]x[/red]\\u202e" in proc.stdout


@pytest.mark.parametrize(("damage", "says"), [
    (lambda d: d["rows"][1].update(value=0.9), "rows[1].delta: expected value - FP32's value"),
    (lambda d: d["rows"][2].update(ratio=2.0), "rows[2].ratio: expected value / FP32's value"),
    (lambda d: d["rows"][0].update(value=float("inf")), "rows[0].value: expected a finite number"),
    (lambda d: d.update(build="x" * 300), "build: expected at most 255 characters"),
    (lambda d: d.update(fingerprint="ab" * 31 + "ZZ"), "fingerprint: expected 64 lowercase hex digits"),
    (lambda d: (d.update(schema="rkdet.accuracy/1"), d.pop("labels_sha256")),
     "records no labels' hash (schema rkdet.accuracy/1)"),
])
def test_a_crafted_record_is_refused_and_nothing_is_recorded(tmp_path: Path, damage, says) -> None:
    results = tmp_path / "results"
    results.mkdir()
    good = _record(tmp_path / "good" / "accuracy.json", "aa" * 32, 0.75, 0.625)
    bad = _record(tmp_path / "bad" / "accuracy.json", "bb" * 32, 0.75, 0.5)
    doc = json.loads(bad.read_text())
    damage(doc)
    bad.write_text(json.dumps(doc))
    proc = rkdet("history", "import", "--results", str(results), "--accuracy", str(good), "--accuracy", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"rkdet: {bad}: ") and says in line
    assert not (results / "rkdet.db").exists()  # every record is checked before the database is touched


def test_a_damaged_accuracy_row_in_the_database_is_one_line(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    path = _record(tmp_path / "accuracy.json", "aa" * 32, 0.75, 0.625)
    assert rkdet("history", "import", "--results", str(results), "--accuracy", str(path)).returncode == 0
    raw = sqlite3.connect(results / "rkdet.db", isolation_level=None)
    raw.execute("UPDATE accuracy SET value = 7.5 WHERE position = 1")
    raw.close()
    proc = rkdet("history", "accuracy", "--results", str(results))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"rkdet: {results / 'rkdet.db'}: accuracy row 2 is not what rkdet writes; the database is damaged, move it "
        "away (accuracy rows come back with `rkdet history import --accuracy FILE`)"]
