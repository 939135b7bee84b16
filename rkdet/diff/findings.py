"""The findings of a comparison as one tree of typed records, which every presenter renders (diffoscope's
one difference tree).

`findings(c)` decides *what* is reported once -- which (set, against) sections, per input the outputs
with their worst measured variant and slices, decision deltas as records, where the first difference
is, the board-state findings, the minimum tolerance that would pass, the two verdicts, the failures,
and per set its source and measured analysis -- and the presenters (`terminal.py`, `html.py` with its
plots, `report.py` for report.json) take only this tree and decide *how* it looks.
Strings in the tree are raw data (names from the result set): each presenter escapes for its medium.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.decode import Layout
from rkdet.decode.tasks import DecisionFinding, decision_finding
from rkdet.diff.compare import Comparison, Failure, InputAnalysis, OutputAnalysis, SetAnalysis, Verdict
from rkdet.diff.metrics import NumericStats
from rkdet.records.run_info import RunInfo
from rkdet.tolerance import Tolerance

SCHEMA = "rkdet.diff/3"


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
class Requirement:
    """Polygraphy's "minimum required tolerance" of one output in one section: the smallest bound of each
    kind that alone would have accepted every measured difference of that output (every input, run and
    slice). Element-wise bounds are alternatives (an element passes when any accepts it), so each of
    max_abs / max_ulp / max_lsb suffices on its own; min_cosine and max_rel_l2 must hold as well when set.
    `max_abs` inf: no finite max_abs passes (a NaN against a number); `max_lsb`/`min_cosine`/`max_rel_l2`
    None: not measurable for some difference (no quantization step known, an all-zero reference)."""

    output: str
    max_abs: float
    max_ulp: int
    max_lsb: float | None
    min_cosine: float | None
    max_rel_l2: float | None

    def line(self) -> str:
        """`would pass with max_abs ≥ X / max_ulp ≥ N / min_cosine ≤ C` (the cosine bound is a floor:
        a declared min_cosine at or below C passes)."""
        # a bound of 0 is "not checked", so a zero measured distance (-0.0 against +0.0) needs any positive one
        parts = [("max_abs > 0" if self.max_abs == 0 else f"max_abs ≥ {self.max_abs:.3g}")
                 if math.isfinite(self.max_abs) else "no finite max_abs",
                 f"max_ulp ≥ {max(1, self.max_ulp)}"]
        if self.max_lsb is not None:  # an element passes within (max_lsb + ½) steps
            parts.append(f"max_lsb ≥ {max(1, math.ceil(self.max_lsb - 0.5))}")
        parts.append(f"min_cosine ≤ {self.min_cosine:.6f}" if self.min_cosine is not None
                     else "min_cosine not measurable")
        return "would pass with " + " / ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "max_abs": self.max_abs, "max_ulp": self.max_ulp, "max_lsb": self.max_lsb,
                "min_cosine": self.min_cosine, "max_rel_l2": self.max_rel_l2, "line": self.line()}


def requirement(output: str, measured: list[NumericStats]) -> Requirement:
    """The minimum tolerance that accepts every one of `measured` (an output's differences and their slices)."""
    lsbs = [s.max_lsb for s in measured]
    cosines = [s.cosine for s in measured]
    rels = [s.rel_l2 for s in measured]
    return Requirement(output, max(s.max_abs for s in measured), max(s.max_ulp for s in measured),
                       None if None in lsbs else max(x for x in lsbs if x is not None),
                       None if None in cosines else min(x for x in cosines if x is not None),
                       None if None in rels else max(x for x in rels if x is not None))


@dataclass(frozen=True)
class Section:
    """One (set, reference) view: set A against B, or a set against its own run 0."""

    set: str
    against: str  # "B" | "run 0"
    inputs: list[InputFinding]
    requirements: list[Requirement] = field(default_factory=list)  # one per output that differs anywhere


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
class SetFinding:
    """One compared set: where it came from and what was measured in it (the engine's analysis records)."""

    role: str  # "A" | "B"
    path: Path
    kind: str  # result-set | npy | npz
    note: str | None
    run_info: RunInfo
    records: int
    runs: int
    first_divergence: dict[str, Any] | None
    first_difference: dict[str, Any] | None
    correlation: list[str]
    snapshots: list[dict[str, Any]]
    inputs: list[InputAnalysis]

    @classmethod
    def of(cls, s: SetAnalysis) -> SetFinding:
        return cls(s.role, s.source.path, s.source.kind, s.source.note, s.source.run_info, s.records, s.runs,
                   s.first_divergence, s.first_difference, list(s.correlation), s.snapshots, list(s.inputs.values()))


@dataclass(frozen=True)
class Findings:
    """The whole comparison as every presenter sees it."""

    verdict: str
    exit_code: int
    mode: str
    tolerance: str  # its description
    notes: list[str]
    sections: list[Section]
    locations: list[Location]
    board_state: list[tuple[str, str]]  # (set, sentence)
    bounds: Tolerance  # the tolerance itself
    repeatable: Verdict
    agrees: Verdict | None  # only with a reference B
    layout: Layout
    caveat: str | None  # the reference build failed its gates at convert
    failures: list[Failure]
    abs_hist: list[int]  # differing elements per HIST_EDGES bin, once per distinct output
    sets: list[SetFinding]  # A, then B when given
    overlay: dict[str, Any] | None  # the detection overlay for the HTML plot

    @property
    def a(self) -> SetFinding:
        return self.sets[0]

    @property
    def b(self) -> SetFinding | None:
        return self.sets[1] if len(self.sets) > 1 else None

    @property
    def first_failure(self) -> Failure | None:
        """The failure that names the verdict: the earliest run of set A, else of B."""
        return min(self.failures, key=lambda x: (x.set, x.first_run)) if self.failures else None


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
    return [Section(s.role, against, [_input(ia, attr) for ia in s.inputs.values()], _requirements(s, attr))
            for s, attr, against in plans]


def _requirements(s: SetAnalysis, attr: str) -> list[Requirement]:
    """Per output name (in first-seen order), over every input: what the tolerance would need to accept."""
    measured: dict[str, list[NumericStats]] = {}
    for ia in s.inputs.values():
        for oa in ia.outputs.values():
            for v in oa.variants.values():
                stats = getattr(v, attr)
                if stats is not None:
                    measured.setdefault(oa.name, []).extend([stats, *getattr(v, "slices_" + attr).values()])
    return [requirement(name, stats) for name, stats in measured.items()]


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
                    board, c.tolerance, c.repeatable, c.agrees, c.layout, c.caveat, list(c.failures), list(c.abs_hist),
                    [SetFinding.of(s) for s in (c.a, c.b) if s is not None], c.overlay)


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
