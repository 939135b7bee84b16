"""The findings of a comparison as one tree of typed records, which both presenters render.

The terminal table and the HTML report used to walk the Comparison separately (and choose the
worst variant, the differing runs and the decision wording each in its own way). Now `findings(c)`
decides *what* is reported once -- which (set, against) sections, per input the outputs with their
worst measured variant and slices, decision deltas as records, where the first difference is, the
board-state findings -- and `terminal.py` / `html.py` only decide *how* it looks.
Strings in the tree are raw data (names from the result set): each presenter escapes for its medium.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.decode.tasks import DecisionFinding, decision_finding
from rkdet.diff.compare import Comparison, InputAnalysis, OutputAnalysis, SetAnalysis
from rkdet.diff.metrics import NumericStats

SCHEMA = "rkdet.diff/2"


def run_ranges(runs: list[int]) -> list[list[int]]:
    """Compress sorted run numbers into inclusive [first, last] ranges."""
    out: list[list[int]] = []
    for r in sorted(runs):
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return out


Decision = DecisionFinding  # what a difference did to the decision: its task's typed finding (rkdet/decode/tasks/)


@dataclass(frozen=True)
class SliceFinding:
    name: str
    stats: NumericStats


@dataclass(frozen=True)
class OutputFinding:
    """One output of one input: its distinct contents, the runs that differ, the worst measured variant."""

    name: str
    role: str
    distinct: int
    differing_runs: list[int]
    worst: NumericStats | None  # None: every run identical to the reference
    slices: list[SliceFinding] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "same" if self.worst is None else ("within" if self.worst.within else "OUT")


@dataclass(frozen=True)
class InputFinding:
    name: str
    distinct: int  # distinct whole results
    runs: int
    outputs: list[OutputFinding]
    decisions: list[Decision]  # one per distinct result that changed against this section's reference

    @property
    def identical(self) -> bool:
        return all(o.worst is None for o in self.outputs)


@dataclass(frozen=True)
class Section:
    """One (set, reference) view: set A against B, or a set against its own run 0."""

    set: str
    against: str  # "B" | "run 0"
    inputs: list[InputFinding]


@dataclass(frozen=True)
class Location:
    """Where a set first differs (against B) or first diverges (run-to-run)."""

    set: str
    what: str  # "first difference vs B" | "first divergence"
    run: int
    input: str
    output: str
    index: int | None
    position: str
    reference: Any
    candidate: Any
    max_ulp: int


@dataclass(frozen=True)
class Findings:
    verdict: str
    exit_code: int
    mode: str
    tolerance: str
    notes: list[str]
    sections: list[Section]
    locations: list[Location]
    board_state: list[tuple[str, str]]  # (set, sentence)


def _worst(oa: OutputAnalysis, attr: str) -> tuple[NumericStats, dict[str, NumericStats]] | None:
    measured = [v for v in oa.variants.values() if getattr(v, attr) is not None]
    if not measured:
        return None
    v = max(measured, key=lambda v: (not getattr(v, attr).within, getattr(v, attr).max_ulp))
    return getattr(v, attr), getattr(v, "slices_" + attr)


def _input(ia: InputAnalysis, attr: str) -> InputFinding:
    dec_attr = "decision_vs_reference" if attr == "vs_reference" else "decision_vs_first"
    outputs = []
    for oa in ia.outputs.values():
        worst = _worst(oa, attr)
        differing = sorted(r for v in oa.variants.values() if getattr(v, attr) is not None for r in v.runs)
        outputs.append(OutputFinding(oa.name, oa.role, len(oa.variants), differing, worst[0] if worst else None,
                                     [SliceFinding(k, s) for k, s in worst[1].items()] if worst else []))
    decisions = [decision_finding(getattr(g, dec_attr)) for g in ia.groups.values() if getattr(g, dec_attr)]
    return InputFinding(ia.name, len(ia.groups), ia.runs, outputs, decisions)


def _sections(c: Comparison) -> list[Section]:
    plans: list[tuple[SetAnalysis, str, str]] = []
    if c.b is not None:
        plans.append((c.a, "vs_reference", "B"))
    plans += [(s, "vs_first", "run 0") for s in (c.a, c.b) if s is not None and (s.runs > 1 or c.b is None)]
    return [Section(s.role, against, [_input(ia, attr) for ia in s.inputs.values()]) for s, attr, against in plans]


def findings(c: Comparison) -> Findings:
    """The one tree both presenters render."""
    locations, board = [], []
    for s in (c.a, c.b):
        if s is None:
            continue
        for point, what in ((s.first_difference, "first difference vs B"), (s.first_divergence, "first divergence")):
            if point:
                locations.append(Location(s.role, what, point["run"], point["input"], point["output"], point["index"],
                                          str(point["position"]), point["reference"], point["candidate"],
                                          point["max_ulp"]))
        board += [(s.role, f) for f in s.correlation]
    return Findings(c.verdict, c.exit_code, c.mode, c.tolerance.describe(), list(c.notes), _sections(c), locations,
                    board)


def shown_path(path: str | Path, base: Path | None) -> str:
    """A result set's path as a report written into `base` shows it: relative to that folder, so a
    published run folder (report.json, report.html) names no workstation path; as given otherwise."""
    if base is None:
        return str(path)
    try:
        return os.path.relpath(Path(path).resolve(), Path(base).resolve())
    except ValueError:  # another drive (not on POSIX)
        return str(path)


def report_base(path: Path) -> Path | None:
    """The folder a report file's paths are shown relative to; None for /dev/stdout, a FIFO or a device."""
    path = Path(path)
    return path.resolve().parent if not path.exists() or path.is_file() else None
