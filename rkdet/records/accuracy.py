"""`accuracy.json` (schema `rkdet.accuracy/2`): what `rkdet accuracy` measured, its one writer and reader.

Why a record: the table is evidence (a release note, an audit) and later tools read it back (the HTML
report, `rkdet history`), so it is one typed shape, written through the one atomic writer, and read as
input from anyone: every string and list bounded, every number finite, and the table's own arithmetic
checked (FP32 the reference, each delta, ratio and quality line what its value says), so a crafted file
is one line naming the file and the field (exit 2), never a table that says what was not measured.
`rkdet.accuracy/1` (before the labels' hash) is still read, with `labels_sha256` None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.records import fields as f
from rkdet.records.io import read_json_object, write_json

SCHEMA = "rkdet.accuracy/2"
OLD_SCHEMAS = ("rkdet.accuracy/1",)
FILE = "accuracy.json"
LINES = (0.99, 0.999)  # MLPerf Inference's quality targets, as fractions of the FP32 accuracy
REFERENCE = "FP32"  # the first row: what every delta and ratio is against
BOARD_PREFIX = "board: "  # a board's row: "board: <backend>" from its result set's run.json
EMULATED_BOARD = " (emulated board)"  # ... and this when the run says it was emulated (never an NPU's row)

MAX_RECORD = 1 << 20  # bytes of one accuracy.json (a table of a few rows)
MAX_ROWS = 64
MAX_OTHERS = 16  # side metrics of one row
MAX_NOTES = 32
MAX_SAMPLES = 100_000  # rkdet.accuracy.labels.MAX_SAMPLES: images in one labelled set
# characters of each string field: a name is shown in a table cell, a detail or note in a paragraph
LIMITS = {"build": 255, "labels": 255, "variant": 120, "metric": 60, "detail": 1000, "note": 1000, "other": 60}
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SLACK = 1e-9  # float rounding between the writer's arithmetic and a reader's


@dataclass(frozen=True)
class AccuracyRow:
    """One variant: its metric value (0..1), the delta and ratio to FP32, and each MLPerf line it holds."""

    variant: str
    detail: str
    metric: str
    value: float
    delta: float
    ratio: float
    lines: tuple[tuple[float, bool], ...]  # (0.99, True), (0.999, False)
    others: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.variant, "detail": self.detail, "metric": self.metric, "value": self.value,
                "delta": self.delta, "ratio": self.ratio,
                "lines": [{"fraction_of_fp32": line, "passed": ok} for line, ok in self.lines], "others": self.others}

    @classmethod
    def read(cls, value: Any, where: f.Where) -> AccuracyRow:
        doc = f.obj(value, where)
        lines = f.items(doc, "lines", where, _line, required=True) or ()
        others = f.mapping(doc, "others", where) or {}
        if len(others) > MAX_OTHERS:
            raise where.at("others").fail(f"at most {MAX_OTHERS} side metrics", f"{len(others)} of them")
        side = {}
        for k, v in others.items():
            _bounded(k, where.at("others"), "other")
            side[k] = float(_magnitude(v, where.at("others").at(k)))
        value, delta, ratio = (float(f.number(doc, k, where, required=True) or 0) for k in ("value", "delta", "ratio"))
        if not 0 <= value <= 1:
            raise where.at("value").fail("a fraction from 0 to 1", value)
        return cls(_text(doc, "variant", where, required=True), _text(doc, "detail", where),
                   _text(doc, "metric", where, required=True), value, delta, ratio, tuple(lines), side)


def _line(value: Any, where: f.Where) -> tuple[float, bool]:
    doc = f.obj(value, where)
    line = float(f.number(doc, "fraction_of_fp32", where, required=True) or 0)
    if line not in LINES:
        raise where.at("fraction_of_fp32").fail(" or ".join(map(str, LINES)), line)
    return line, bool(f.flag(doc, "passed", where, required=True))


def _magnitude(value: Any, where: f.Where) -> float:
    number = f.a_number(value, where)
    if abs(number) > 1e12:
        raise where.fail("a number of at most 1e12", number)
    return number


def _bounded(value: str, where: f.Where, kind: str) -> str:
    if len(value) > LIMITS[kind]:
        raise where.fail(f"at most {LIMITS[kind]} characters", f"{len(value)} characters")
    return value


def _text(doc: Any, key: str, where: f.Where, *, required: bool = False) -> str:
    return _bounded(f.text(doc, key, where, required=required) or "", where.at(key), key)


def _hex(doc: Any, key: str, where: f.Where, *, required: bool) -> str | None:
    value = f.text(doc, key, where, required=required)
    if value is not None and not _HEX64.fullmatch(value):
        raise where.at(key).fail("64 lowercase hex digits", value)
    return value


@dataclass(frozen=True)
class AccuracyRecord:
    """The measured table of one build against one labelled set."""

    build: str  # the build folder's name
    fingerprint: str
    labels: str  # the labels file or folder's name (no machine path)
    samples: int
    rows: tuple[AccuracyRow, ...]
    notes: tuple[str, ...] = ()
    labels_sha256: str | None = None  # rkdet.accuracy.labels.labels_digest: None in a rkdet.accuracy/1 record

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "build": self.build, "fingerprint": self.fingerprint, "labels": self.labels,
                "labels_sha256": self.labels_sha256, "samples": self.samples, "rows": [r.to_json() for r in self.rows],
                "notes": list(self.notes)}


def write_accuracy(path: Path, record: AccuracyRecord) -> None:
    write_json(path, record.to_json())


def _checked_table(rows: tuple[AccuracyRow, ...], where: f.Where) -> None:
    """The table's own arithmetic (rkdet.accuracy.table.rows): FP32 first, each delta and ratio against it,
    each line passed exactly when the ratio reaches it."""
    if not rows:
        raise where.at("rows").fail("at least the FP32 row", "an empty list")
    if len(rows) > MAX_ROWS:
        raise where.at("rows").fail(f"at most {MAX_ROWS} rows", f"{len(rows)} rows")
    if rows[0].variant != REFERENCE:
        raise where.at("rows").at(0).at("variant").fail(f"{REFERENCE!r} (the reference row comes first)",
                                                        rows[0].variant)
    reference = rows[0].value
    for i, row in enumerate(rows):
        at = where.at("rows").at(i)
        ratio = row.value / reference if reference > 0 else (1.0 if row.value == reference else 0.0)
        if abs(row.delta - (row.value - reference)) > _SLACK:
            raise at.at("delta").fail(f"value - FP32's value ({row.value - reference:.12g})", row.delta)
        if abs(row.ratio - ratio) > _SLACK * max(1.0, ratio):
            raise at.at("ratio").fail(f"value / FP32's value ({ratio:.12g})", row.ratio)
        if [line for line, _ in row.lines] != list(LINES):
            raise at.at("lines").fail(f"one entry for each of {', '.join(map(str, LINES))}, in that order",
                                      f"{len(row.lines)} entries")
        for k, (line, ok) in enumerate(row.lines):
            if ok != (row.ratio >= line):
                raise at.at("lines").at(k).at("passed").fail(f"{str(row.ratio >= line).lower()} (ratio {row.ratio:.6g} "
                                                             f"against {line})", str(ok).lower())


def read_accuracy(path: Path) -> AccuracyRecord:
    """accuracy.json, read as input from anyone (bounded, checked); one line naming the field otherwise."""
    where = f.Where(str(path), advice="re-run rkdet accuracy")
    doc = f.obj(read_json_object(path, limit=MAX_RECORD), where)
    schema = doc.get("schema")
    if schema != SCHEMA and schema not in OLD_SCHEMAS:
        raise where.at("schema").fail(SCHEMA, schema)
    samples = int(f.integer(doc, "samples", where, required=True) or 0)
    if not 1 <= samples <= MAX_SAMPLES:
        raise where.at("samples").fail(f"a count from 1 to {MAX_SAMPLES}", samples)
    raw_rows = doc.get("rows")
    if isinstance(raw_rows, list) and len(raw_rows) > MAX_ROWS:
        raise where.at("rows").fail(f"at most {MAX_ROWS} rows", f"{len(raw_rows)} rows")
    rows = tuple(f.items(doc, "rows", where, AccuracyRow.read, required=True) or ())
    _checked_table(rows, where)
    raw_notes = doc.get("notes")
    if isinstance(raw_notes, list) and len(raw_notes) > MAX_NOTES:
        raise where.at("notes").fail(f"at most {MAX_NOTES} notes", f"{len(raw_notes)} notes")
    notes = tuple(_bounded(n, where.at("notes").at(i), "note")
                  for i, n in enumerate(f.items(doc, "notes", where, f.a_str) or ()))
    return AccuracyRecord(_text(doc, "build", where, required=True), _hex(doc, "fingerprint", where, required=True) or "",
                          _text(doc, "labels", where), samples, rows, notes,
                          _hex(doc, "labels_sha256", where, required=schema == SCHEMA))
