"""Baselines and drift: "the same output every day", checked by hash.

For each (board, build, cell) the first accepted run (complete, every input one output set) is the
baseline; every later run is compared with it by the output hashes of each input. A board drifted
when a later run differs; the report names the first run that differed and what changed on the board
between the run before it and that run (kernel, rknpu driver, librknnrt, clocks at run start), from
what the runs recorded (unknown stays unknown). No output bytes are re-read: hashes suffice.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from rkdet.history.ingest import BoardState, RunRecord

STATE_FIELDS = (("kernel", "kernel"), ("driver", "rknpu driver"), ("runtime", "librknnrt"), ("model", "board model"))


@dataclass(frozen=True)
class Change:
    """One thing that differs between two runs of a board."""

    what: str  # "librknnrt", "kernel", "clock devfreq/fdab0000.npu", ...
    before: str | None
    after: str | None


@dataclass(frozen=True)
class OutputChange:
    input: str
    output: str
    baseline: str | None  # hash, None when the baseline had no such output
    now: str | None


@dataclass(frozen=True)
class Drift:
    """A (board, build, cell) whose outputs moved from its baseline."""

    board: str  # board key
    label: str
    build: str
    cell: str
    baseline: RunRecord
    since: RunRecord  # the first run that differed
    previous: RunRecord  # the run just before it (the baseline or a later run that matched)
    changes: tuple[Change, ...]  # previous -> since, on the board
    outputs: tuple[OutputChange, ...]  # since vs baseline
    differing_runs: int
    later_runs: int
    latest_matches: bool


def _signature(run: RunRecord) -> dict[tuple[str, int], tuple[str, str]]:
    return {(o.input, o.position): (o.name, o.hash) for o in run.outputs}


def matches(run: RunRecord, baseline: RunRecord) -> bool:
    """Same output hashes for every input, and one output set per input."""
    return run.deterministic and _signature(run) == _signature(baseline)


def output_changes(run: RunRecord, baseline: RunRecord) -> tuple[OutputChange, ...]:
    a, b = _signature(baseline), _signature(run)
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            name = (b.get(key) or a.get(key) or ("?", ""))[0]
            out.append(OutputChange(key[0], name, (a.get(key) or (None, None))[1], (b.get(key) or (None, None))[1]))
    if not out and not run.deterministic:
        worst = max(run.outputs, key=lambda o: o.distinct, default=None)
        if worst is not None:
            out.append(OutputChange(worst.input, worst.name, None, f"{worst.distinct} distinct output sets in the run"))
    return tuple(out)


def state_changes(before: BoardState, after: BoardState) -> tuple[Change, ...]:
    changes = [Change(label, getattr(before, attr), getattr(after, attr))
               for attr, label in STATE_FIELDS if getattr(before, attr) != getattr(after, attr)]
    a, b = dict(before.clocks), dict(after.clocks)
    changes += [Change(f"clock {name}", a.get(name), b.get(name))
                for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]
    return tuple(changes)


def baseline_of(runs: list[RunRecord]) -> RunRecord | None:
    """The first accepted run of one (board, build, cell), runs in time order."""
    return next((r for r in runs if r.accepted), None)


def cell_key(run: RunRecord) -> tuple[str, str, str, str]:
    return (run.board.key, run.build, run.core_mask, run.backend)


def find_drift(runs: list[RunRecord]) -> list[Drift]:
    """Every (board, build, cell) with a later run that differs from its baseline (runs as `load_runs` orders them)."""
    found = []
    for _, group in groupby(runs, key=cell_key):
        cell_runs = list(group)
        base = baseline_of(cell_runs)
        if base is None:
            continue
        at = next(i for i, r in enumerate(cell_runs) if r is base)
        later = cell_runs[at + 1:]
        differing = [i for i, r in enumerate(later) if not matches(r, base)]
        if not differing:
            continue
        since = later[differing[0]]
        previous = cell_runs[at + differing[0]]  # the run just before `since`
        found.append(Drift(board=base.board.key, label=base.board.label, build=base.build, cell=base.cell,
                           baseline=base, since=since, previous=previous,
                           changes=state_changes(previous.state, since.state),
                           outputs=output_changes(since, base), differing_runs=len(differing),
                           later_runs=len(later), latest_matches=matches(later[-1], base)))
    return found


def verdict_against_baseline(runs: list[RunRecord]) -> dict[str, str]:
    """run key (`RunRecord.key`) -> "baseline" | "same" | "differs" | "no baseline", for listing runs."""
    out: dict[str, str] = {}
    for _, group in groupby(runs, key=cell_key):
        cell_runs = list(group)
        base = baseline_of(cell_runs)
        seen_base = False
        for r in cell_runs:
            if r is base:
                seen_base = True
                out[r.key] = "baseline"
            elif base is None or not seen_base:
                out[r.key] = "no baseline"
            else:
                out[r.key] = "same" if matches(r, base) else "differs"
    return out
