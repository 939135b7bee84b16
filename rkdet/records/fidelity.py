"""`fidelity.json`, typed: convert's fidelity gates on the golden inputs, one reader and one writer.

Why: convert wrote the report as a dict and `rkdet convert --search` rebuilt its gates with
`GateResult(**g)` from whatever a kept variant's file held (a crafted or damaged file was a TypeError
far from it). Here the gate result is one record (`GateResult`, also what convert's gates produce),
the file has one bounded strict reader (records/io.py: one line naming the file and field, exit 2)
and one writer (sorted keys, atomic). The free-form sections (`layout`, `slices`, `decision`) are kept
as read: their format is docs/FORMATS.md "fidelity.json".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.errors import InputError
from rkdet.records import fields as f
from rkdet.records.io import read_json_object, write_json

SCHEMA = "rkdet.fidelity/2"
FILE = "fidelity.json"
ADVICE = "re-run rkdet convert"


def _real(doc: Mapping[str, Any], key: str, where: f.Where) -> float | None:
    """A measured value or threshold: a number (NaN allowed: a cosine of two zero outputs) or null."""
    value = doc.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise where.at(key).fail("a number or null", value)
    return value


@dataclass(frozen=True)
class GateResult:
    """One gate on one subject: its measured value, threshold and verdict (None: not judged)."""

    gate: str  # decision | cosine | score_collapse | score_recall | saturation
    subject: str
    value: float | None
    threshold: float | None
    passed: bool | None
    binding: bool  # False: reported only (a decision gate covers this output)
    note: str = ""

    @property
    def failed(self) -> bool:
        return self.binding and self.passed is False

    @classmethod
    def read(cls, value: Any, where: f.Where) -> GateResult:
        doc = f.obj(value, where)
        return cls(f.text(doc, "gate", where, required=True) or "", f.text(doc, "subject", where, required=True) or "",
                   _real(doc, "value", where), _real(doc, "threshold", where), f.flag(doc, "passed", where),
                   bool(f.flag(doc, "binding", where, required=True)), f.text(doc, "note", where) or "")

    def to_json(self) -> dict[str, Any]:
        return {"gate": self.gate, "subject": self.subject, "value": self.value, "threshold": self.threshold,
                "passed": self.passed, "binding": self.binding, "note": self.note}


@dataclass(frozen=True)
class FidelityRecord:
    """A build's `fidelity.json` (schema rkdet.fidelity/2)."""

    layout: Mapping[str, Any]
    gates: tuple[GateResult, ...] = ()
    slices: Mapping[str, Any] = field(default_factory=dict)
    decision: Mapping[str, Any] = field(default_factory=dict)
    schema: str | None = SCHEMA

    @classmethod
    def from_json(cls, doc: Any, where: str | Path) -> FidelityRecord:
        at = f.Where(str(where), advice=ADVICE)
        doc = f.obj(doc, at)
        return cls(f.mapping(doc, "layout", at) or {}, f.items(doc, "gates", at, GateResult.read) or (),
                   f.mapping(doc, "slices", at) or {}, f.mapping(doc, "decision", at) or {}, f.text(doc, "schema", at))

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "layout": self.layout, "gates": [g.to_json() for g in self.gates],
                "slices": self.slices, "decision": self.decision}


def read_fidelity(path: str | Path) -> FidelityRecord:
    """THE reader of a fidelity.json (bounded, strict). FileNotFoundError passes for the caller's message."""
    path = Path(path)
    try:
        doc = read_json_object(path)
    except InputError as exc:
        raise InputError(f"{exc}; {ADVICE}") from None
    return FidelityRecord.from_json(doc, path)


def write_fidelity(path: str | Path, record: FidelityRecord) -> None:
    """THE writer of a fidelity.json (sorted keys, two-space indent, atomic: records/io.py)."""
    write_json(path, record.to_json())


__all__ = ["FILE", "FidelityRecord", "GateResult", "SCHEMA", "read_fidelity", "write_fidelity"]
