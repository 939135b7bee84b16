"""`accuracy.json` (schema `rkdet.accuracy/1`): what `rkdet accuracy` measured, its one writer and reader.

Why a record: the table is evidence (a release note, an audit) and a later tool (history, a dashboard)
reads it back; so it is one typed shape, written through the one atomic writer, read strictly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.records import fields as f
from rkdet.records.io import read_json_object, write_json

SCHEMA = "rkdet.accuracy/1"
FILE = "accuracy.json"


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
        lines = f.items(doc, "lines", where, lambda v, w: (float(f.number(f.obj(v, w), "fraction_of_fp32", w,
                                                                            required=True) or 0),
                                                           bool(f.flag(f.obj(v, w), "passed", w, required=True))),
                        required=True) or ()
        others = f.mapping(doc, "others", where) or {}
        value, delta, ratio = (float(f.number(doc, k, where, required=True) or 0) for k in ("value", "delta", "ratio"))
        return cls(f.text(doc, "variant", where, required=True) or "", f.text(doc, "detail", where) or "",
                   f.text(doc, "metric", where, required=True) or "", value, delta, ratio, tuple(lines),
                   {str(k): float(f.a_number(v, where.at("others").at(str(k)))) for k, v in others.items()})


@dataclass(frozen=True)
class AccuracyRecord:
    """The measured table of one build against one labelled set."""

    build: str  # the build folder's name
    fingerprint: str
    labels: str  # the labels file or folder's name (no machine path)
    samples: int
    rows: tuple[AccuracyRow, ...]
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "build": self.build, "fingerprint": self.fingerprint, "labels": self.labels,
                "samples": self.samples, "rows": [r.to_json() for r in self.rows], "notes": list(self.notes)}


def write_accuracy(path: Path, record: AccuracyRecord) -> None:
    write_json(path, record.to_json())


def read_accuracy(path: Path) -> AccuracyRecord:
    where = f.Where(str(path), advice="re-run rkdet accuracy")
    doc = f.obj(read_json_object(path), where)
    if doc.get("schema") != SCHEMA:
        raise where.at("schema").fail(SCHEMA, doc.get("schema"))
    return AccuracyRecord(f.text(doc, "build", where, required=True) or "", f.text(doc, "fingerprint", where) or "",
                          f.text(doc, "labels", where) or "", int(f.integer(doc, "samples", where, required=True) or 0),
                          tuple(f.items(doc, "rows", where, AccuracyRow.read, required=True) or ()),
                          tuple(f.items(doc, "notes", where, f.a_str) or ()))
