"""Determinism classes: which board × cell results are bit-identical for every input, and where two
classes first differ.

Why hashes: every completed run's result index already holds each output's sha256, read into its
history record (`rkdet.history.ingest.RunRecord.outputs`: per input, the first inference's output
hashes and how many distinct output sets the input gave), so grouping reads no output bytes. Only
the first difference of each pair of classes is located with `rkdet.diff` (one member of each: the
element, both values, and whether the decision — detections / top-1 — differs).

A cell that did not repeat itself (an input with more than one distinct output set) is a class of
its own: it is not bit-identical to anything, itself included.
"""

from __future__ import annotations

import string
from itertools import combinations
from pathlib import Path
from typing import Any

from rkdet.diff.api import compare, declared_decisions
from rkdet.errors import RkdetError
from rkdet.fleets.run.records import BoardResult, CellResult, DeterminismClass, Difference, Member
from rkdet.history.ingest import RunRecord
from rkdet.tolerance import Tolerance

MAX_PAIRS = 28  # first differences located (8 classes: every pair); beyond it the majority's pairs first


def signature(run: RunRecord) -> tuple[tuple[str, int, str, str], ...]:
    return tuple((o.input, o.position, o.name, o.hash) for o in run.outputs)


def _name(i: int) -> str:
    letters = string.ascii_uppercase
    return letters[i] if i < len(letters) else f"{letters[i // len(letters) - 1]}{letters[i % len(letters)]}"


def find_classes(boards: list[BoardResult]) -> list[DeterminismClass]:
    """Group every completed board × cell by its per-input output hashes (across builds too: a build per
    NPU family may well give the same bits); the largest class is `A`. Sets each cell's `klass`."""
    groups: dict[tuple, list[tuple[BoardResult, CellResult]]] = {}
    for b in boards:
        for c in b.cells:
            if c.run is None:
                continue
            key = signature(c.run) if c.run.deterministic else ("unrepeatable", b.board.name, c.cell)
            groups.setdefault(key, []).append((b, c))
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))  # stable: first seen first among equals
    classes = []
    for i, (_, members) in enumerate(ordered):
        name = _name(i)
        for _, c in members:
            c.klass = name
        classes.append(DeterminismClass(name, [Member(b.board.name, c.cell.name) for b, c in members],
                                        repeatable=all(c.run is not None and c.run.deterministic for _, c in members),
                                        fingerprints=tuple(sorted({c.run.build for _, c in members if c.run}))))
    return classes


def _representative(boards: list[BoardResult], klass: str) -> CellResult:
    return next(c for b in boards for c in b.cells if c.klass == klass)


__all__ = ["declared_decisions", "find_classes", "first_differences", "signature"]


def first_differences(boards: list[BoardResult], classes: list[DeterminismClass], fleet_dir: Path,
                      tolerance: Tolerance, declared: dict[str, Any] | None = None) -> list[Difference]:
    """For each pair of classes (up to MAX_PAIRS, those with the majority class first): where one member
    of the second first differs from one member of the first, by rkdet.diff (`declared`: the build's
    declared decision rules, so "decision differs" is the app's)."""
    pairs = list(combinations([k.name for k in classes], 2))[:MAX_PAIRS]
    out = []
    for a, b in pairs:
        ra, rb = _representative(boards, a), _representative(boards, b)
        out.append(_difference(a, b, _result_set(fleet_dir, ra), _result_set(fleet_dir, rb), tolerance, declared))
    return out


def _result_set(fleet_dir: Path, cell: CellResult) -> Path:
    """The cell's result set: its run folder, or `result/core-<mask>/` of a session of several cells."""
    folder = fleet_dir / (cell.folder or "")
    return folder / "result" / cell.run.result_set if cell.run is not None and cell.run.result_set else folder


def _difference(a: str, b: str, folder_a: Path, folder_b: Path, tolerance: Tolerance,
                declared: dict[str, Any] | None = None) -> Difference:
    try:
        c = compare(folder_b, folder_a, tolerance, declared=declared)
    except RkdetError as err:
        return Difference(a, b, None, None, None, None, None, None, None, None, 0, None,
                          note=f"not comparable: {err}")
    agrees = c.agrees
    first = c.a.first_difference
    if first is None:  # same first runs: the class split comes from a run that did not repeat
        div = c.a.first_divergence
        note = (f"{b} does not repeat itself (first divergence: run {div['run']} input {div['input']} output "
                f"{div['output']})" if div else "no element-level difference")
        return Difference(a, b, None, None, None, None, None, None, None, None, 0,
                          None if agrees is None or agrees.decisions_changed is None else agrees.decisions_changed > 0, note=note)
    return Difference(a, b, first["input"], first["output"], first["index"], first["position"],
                      _plain(first["reference"]), _plain(first["candidate"]), first.get("max_ulp"),
                      _plain(first.get("max_abs")), agrees.outputs_differing if agrees else 0,
                      None if agrees is None or agrees.decisions_changed is None else agrees.decisions_changed > 0)


def _plain(value: object) -> object:
    """numpy scalars as JSON numbers."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value
