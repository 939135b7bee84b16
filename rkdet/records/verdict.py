"""The verdicts as deploy.json keeps them: typed records from the diff to the last reader.

Why here: the diff states the verdicts (`rkdet.diff.compare.Verdict`, `rkdet.deploy.cells.CellsJudgement`),
deploy records them in deploy.json, and the fleet and `rkdet history` read them back; those rooms may not
import each other, so the records and their strict readers live in records (stdlib only). A reader asks a
record (`record.agrees.ok`), never a key of a JSON object.

deploy.json's `repeatable` and `agrees` are one of three shapes, told apart by their keys:
* `VerdictRecord`: one result set judged (the diff's whole verdict: distance, reason, caveat);
* `VerdictSummary`: several core-mask cells judged together (`{"ok"}`, and for `repeatable` `"cells"`);
* `NotApplicable`: `agrees` of a build without a reference (an imported .rknn): ok null, never a pass.
deploy.json's `cells` is a `CellsRecord`: per cell its own two verdicts (`VerdictRecord`s).
Every reader refuses an unknown or mistyped field with a ValueError naming it (the caller adds the file).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Union

NOT_APPLICABLE = "not applicable"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return _is_int(v) or isinstance(v, float)


_KINDS: dict[str, tuple[str, Any]] = {
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "int": ("an integer", _is_int),
    "float": ("a number", _is_number),
    "str": ("text", lambda v: isinstance(v, str)),
    "tuple[str, ...]": ("a list of strings", lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v)),
}


def _short(value: Any) -> str:
    text = repr(value)
    return text[:60] + ("..." if len(text) > 60 else "")


def _check(obj: Any) -> None:
    """Every field holds its declared type (None where the type allows it)."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        declared = str(f.type)
        if value is None:
            if "None" in declared:
                continue
            raise ValueError(f"field {f.name!r} is null, not {_KINDS[declared.split(' | ')[0]][0]}")
        what, ok = _KINDS.get(declared.split(" | ")[0], ("?", lambda v: True))
        if not ok(value):
            raise ValueError(f"field {f.name!r} is {_short(value)}, not {what}")


@dataclass(frozen=True)
class VerdictRecord:
    """One named verdict on one result set with the distance behind it (rkdet.diff's `Verdict`)."""

    ok: bool
    reference: str | None
    tolerance: str
    outputs_differing: int
    outputs_outside: int
    decisions_changed: int | None  # None: no decoder ran (unknown, not zero)
    decisions_judged: bool
    max_abs: float  # inf: a NaN against a number
    max_ulp: int
    max_lsb: float | None
    min_cosine: float | None
    reason: str
    caveat: str | None  # the reference build failed its gates at convert
    # agrees: why it was judged numerically, not bitwise (the reference made on another CPU class); None: as declared.
    # Added without a schema bump: a record written before reads as None.
    cross_cpu: str | None = None

    def __post_init__(self) -> None:
        _check(self)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class VerdictSummary:
    """A verdict over several core-mask cells (each cell's own is in `CellsRecord`)."""

    ok: bool
    cells: tuple[str, ...] | None = None  # repeatable: the cells judged

    def __post_init__(self) -> None:
        _check(self)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok} if self.cells is None else {"ok": self.ok, "cells": list(self.cells)}


@dataclass(frozen=True)
class NotApplicable:
    """`agrees` of a build that has no reference (an imported .rknn): typed as such, never a pass."""

    reason: str

    def __post_init__(self) -> None:
        _check(self)

    @property
    def ok(self) -> None:
        return None

    def to_json(self) -> dict[str, Any]:
        return {"ok": None, "applicable": False, "verdict": NOT_APPLICABLE, "reason": self.reason}


AnyVerdict = Union[VerdictRecord, VerdictSummary, NotApplicable]


@dataclass(frozen=True)
class CellVerdict:
    """One core-mask cell of a multi-mask run: its status and, when it ran, its own two verdicts."""

    cell: str
    core_mask: str
    status: str
    reason: str | None
    verdict: str | None
    repeatable: VerdictRecord | None
    agrees: VerdictRecord | None
    same_as_first: bool | None  # bit-identical to the first complete cell (None: it is the first, or did not run)

    def __post_init__(self) -> None:
        _check(self)
        for name in ("repeatable", "agrees"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), VerdictRecord):
                raise ValueError(f"field {name!r} is not a verdict record")

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell, "core_mask": self.core_mask, "status": self.status, "reason": self.reason,
                "verdict": self.verdict,
                "repeatable": self.repeatable.to_json() if self.repeatable is not None else None,
                "agrees": self.agrees.to_json() if self.agrees is not None else None,
                "same_as_first": self.same_as_first}


@dataclass(frozen=True)
class CellsRecord:
    """deploy.json `cells`: every cell of a multi-mask run with its verdicts, and the verdicts over them."""

    cells: tuple[CellVerdict, ...]
    first: str | None
    repeatable: bool
    agrees: bool | None  # None: some cell has no agrees verdict (no reference)

    def __post_init__(self) -> None:
        _check(self)
        if not isinstance(self.cells, tuple) or not all(isinstance(c, CellVerdict) for c in self.cells):
            raise ValueError("field 'cells' is not a list of cell verdicts")

    def cell(self, core_mask: str) -> CellVerdict | None:
        """The cell judged for `core_mask`, if any."""
        return next((c for c in self.cells if c.core_mask == core_mask), None)

    def to_json(self) -> dict[str, Any]:
        return {"cells": [c.to_json() for c in self.cells], "first": self.first, "repeatable": self.repeatable,
                "agrees": self.agrees}


# ---- the strict readers (a ValueError names the field; deploy_record adds the file) ----


def _fields_of(cls: Any, doc: Any, what: str) -> dict[str, Any]:
    if not isinstance(doc, Mapping):
        raise ValueError(f"{what} is {_short(doc)}, not a JSON object")
    names = [f.name for f in fields(cls)]
    unknown = sorted(str(k) for k in doc if k not in names)
    if unknown:
        raise ValueError(f"{what}: field {unknown[0][:40]!r} is not one rkdet writes")
    required = [f.name for f in fields(cls) if f.default is dataclasses.MISSING]
    missing = [n for n in required if n not in doc]
    if missing:
        raise ValueError(f"{what}: field {missing[0]!r} is missing")
    return dict(doc)


def _built(cls: Any, values: dict[str, Any], what: str) -> Any:
    try:
        return cls(**values)
    except ValueError as err:
        raise ValueError(f"{what}: {err}") from None


def verdict_from_json(doc: Any, what: str = "verdict") -> AnyVerdict:
    """`repeatable`/`agrees` as deploy.json holds it: the record its keys name."""
    if isinstance(doc, Mapping) and "applicable" in doc:
        values = _fields_of(NotApplicable, {k: v for k, v in doc.items() if k not in ("ok", "applicable", "verdict")},
                            what)
        if doc.get("ok") is not None or doc.get("applicable") is not False or doc.get("verdict") != NOT_APPLICABLE:
            raise ValueError(f"{what}: a not-applicable verdict has ok null, applicable false, verdict "
                             f"{NOT_APPLICABLE!r}")
        return _built(NotApplicable, values, what)  # type: ignore[no-any-return]
    if isinstance(doc, Mapping) and "tolerance" in doc:
        return record_from_json(doc, what)
    values = _fields_of(VerdictSummary, doc, what)
    if isinstance(values.get("cells"), list):
        values["cells"] = tuple(values["cells"])
    return _built(VerdictSummary, values, what)  # type: ignore[no-any-return]


def record_from_json(doc: Any, what: str = "verdict") -> VerdictRecord:
    """One result set's whole verdict (every field present, null where the diff wrote null)."""
    return _built(VerdictRecord, _fields_of(VerdictRecord, doc, what), what)  # type: ignore[no-any-return]


def cells_from_json(doc: Any, what: str = "cells") -> CellsRecord:
    """deploy.json's `cells`."""
    values = _fields_of(CellsRecord, doc, what)
    listed = values.get("cells")
    if not isinstance(listed, list):
        raise ValueError(f"{what}: field 'cells' is {_short(listed)}, not a list")
    parts = []
    for i, item in enumerate(listed):
        where = f"{what}[{i}]"
        cell = _fields_of(CellVerdict, item, where)
        for name in ("repeatable", "agrees"):
            if cell.get(name) is not None:
                cell[name] = record_from_json(cell[name], f"{where}.{name}")
        parts.append(_built(CellVerdict, cell, where))
    values["cells"] = tuple(parts)
    return _built(CellsRecord, values, what)  # type: ignore[no-any-return]
