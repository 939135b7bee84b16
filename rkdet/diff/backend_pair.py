"""A backend-pair cell: the same build run through two backends on one board, e.g. what was proven (lite2)
against what ships (the C API): SAME bitwise, or which output differs and which runtime setting explains it.

Why its own verdict and not `rkdet diff A B`: the two runs are meant to be one program, so any difference is
a finding, and the useful answer names the setting the two runners chose differently (want_float, input
layout, pass-through: rkdet-run-c records them all; lite2's are rkdet.onboard.backend_table.IMPLICIT_OPTIONS)
or, when one backend did not run the model at all, what its runtime said (an op only one of them runs).
Backend names are data here (from run.json), never compared with literals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.diff.resultset import ResultSetDir
from rkdet.errors import RkdetError
from rkdet.records.deploy_record import read_deploy_record
from rkdet.records.io import MAX_RUN_RECORD, read_json_object
from rkdet.onboard.backend_table import IMPLICIT_OPTIONS, PAIR_SETTINGS

PAIR_SCHEMA = "rkdet.backend-pair/3"  # /2: `session`; /3: its `same_clocks` judges the pinned settings only, `moved`, `cur_changes`


@dataclass(frozen=True)
class SettingDiff:
    """A runtime setting the two runners chose differently."""

    key: str
    a: Any
    b: Any

    def text(self, a: str, b: str) -> str:
        return f"{self.key} {b}={self.b} vs {a}={self.a}"


@dataclass(frozen=True)
class OutputDiff:
    """One output of one input whose first run differs between the backends."""

    input: str
    output: str
    how: str  # "dtype float32 vs int8", "shape ...", "bytes", "missing"


#: what a clocks record holds of a node that the pin sets (run-steps.sh: governor, min, max); `cur` is what the
#: node runs at right now, which a governor may move within them, pinned or not
PINNED_SETTINGS = ("governor", "min", "max")


@dataclass(frozen=True)
class SharedSession:
    """The two runs ran as steps of one session (deploy.json `session`, rkdet/deploy/session.py): one board lock,
    one pin, one restore, so both run folders hold the same job's records; they are read once, from A's pin.json.

    `same_pin`: that job pinned once and restored (one pin result, ok or partial, and a restore whose last
    result is ok); None when the session was not pinned. `same_clocks`: every node's pinned settings (governor,
    min, max) read the same before and after every run (None: not recorded); `moved` names each that did not.
    `cur_changes`: how many times a node's current frequency differed from its previous reading: a governor's
    ordinary work when the clocks were not pinned, said as a count and never as a failure."""

    id: str
    pinned: bool
    same_pin: bool | None
    same_clocks: bool | None = None
    moved: tuple[str, ...] = ()  # "devfreq/fdab0000.npu max": a pinned setting that read differently
    cur_changes: int | None = None

    def text(self) -> str:
        cur = ("" if not self.cur_changes
               else f"; cur moved {self.cur_changes} time(s)" + (" (the governor's own choice: not pinned)"
                                                                if not self.pinned else " within the pinned range"))
        if not self.pinned:
            settings = {True: "; governor/min/max the same before and after each run",
                        False: f"; governor/min/max changed between runs ({_names(self.moved)})", None: ""}
            return f"one session {self.id} (not pinned: --no-pin): clocks were not pinned{settings[self.same_clocks]}{cur}"
        clocks = {True: "; the pinned clocks (governor/min/max) the same before and after each run",
                  False: f"; the pinned clocks MOVED between runs ({_names(self.moved)})", None: ""}[self.same_clocks]
        return (f"one pinned session {self.id}: "
                + ("pinned once, restored once, the same pin state" if self.same_pin
                   else "pin.json does NOT show one pin and its restore") + clocks + cur)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "pinned": self.pinned, "same_pin": self.same_pin, "same_clocks": self.same_clocks,
                "moved": list(self.moved), "cur_changes": self.cur_changes}


def _names(moved: tuple[str, ...]) -> str:
    return ", ".join(moved[:6]) + (f" and {len(moved) - 6} more" if len(moved) > 6 else "")


def shared_session(run_a: Path, run_b: Path) -> SharedSession | None:
    """The session two run folders shared (each's deploy.json names the same session and the other run);
    None when they ran as separate deploys, or a record is missing or unreadable."""
    try:
        da, db = read_deploy_record(run_a / "deploy.json"), read_deploy_record(run_b / "deploy.json")
    except (OSError, RkdetError):
        return None
    sa, sb = da.session, db.session
    if sa is None or sb is None or sa.id != sb.id or db.run_id not in sa.runs or da.run_id not in sb.runs:
        return None
    pinned = sa.pinned and sb.pinned
    try:  # one job's records: A's pin.json holds the same ones as B's (rkdet/deploy/session.py)
        records = _records(read_json_object(run_a / "pin.json", limit=MAX_RUN_RECORD))
    except (OSError, RkdetError):
        records = []
    same_pin = _pinned_and_restored(records) if pinned else None
    clocks = [r["clocks"] for r in records if (r.get("script"), r.get("record")) == ("run-steps", "clocks")
              and isinstance(r.get("clocks"), dict)]
    if len(clocks) < 2:
        return SharedSession(sa.id, pinned, same_pin)
    moved = _moved(clocks)
    return SharedSession(sa.id, pinned, same_pin, not moved, moved, _cur_changes(clocks))


def _records(doc: dict[str, Any]) -> list[dict[str, Any]]:
    records = doc.get("records")
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def _pinned_and_restored(records: list[dict[str, Any]]) -> bool:
    """One pin (its result ok, or partial: some knob did not read back, said as a deploy warning) and a restore
    whose last result is ok (an incomplete one confirmed by restore.sh run again)."""
    def results(script: str) -> list[Any]:
        return [r.get("status") for r in records if (r.get("script"), r.get("record")) == (script, "result")]
    pins, restores = results("pin"), results("restore")
    return len(pins) == 1 and pins[0] in ("ok", "partial") and bool(restores) and restores[-1] == "ok"


def _moved(clocks: list[dict[str, Any]]) -> tuple[str, ...]:
    """Each "node setting" of PINNED_SETTINGS that does not read the same in every clocks record (a node that
    appears or disappears counts as all of its settings)."""
    nodes = sorted({str(n) for c in clocks for n in c})
    moved = []
    for node in nodes:
        readings = [c.get(node) if isinstance(c.get(node), dict) else {} for c in clocks]
        moved += [f"{node} {k}" for k in PINNED_SETTINGS
                  if any(node not in c for c in clocks) or len({repr(r.get(k)) for r in readings}) > 1]
    return tuple(moved)


def _cur_changes(clocks: list[dict[str, Any]]) -> int:
    """How many times a node's `cur` differed from its previous reading, over every node."""
    changes = 0
    for node in {str(n) for c in clocks for n in c}:
        curs = [c[node].get("cur") for c in clocks if isinstance(c.get(node), dict)]
        changes += sum(1 for x, y in zip(curs, curs[1:]) if x != y)
    return changes


@dataclass(frozen=True)
class BackendPair:
    """The cell's verdict: `same` (bitwise on every output of every input) or what differs and why."""

    a: str
    b: str
    same: bool
    outputs: tuple[OutputDiff, ...] = ()
    settings: tuple[SettingDiff, ...] = ()
    refused: str | None = None  # a backend that ran nothing: "NAME: what its runtime said"
    compared: int = 0  # inputs compared
    session: SharedSession | None = None  # the pinned session both ran in (None: separate deploys)

    def lines(self) -> list[str]:
        """The terminal's lines: the verdict, then each differing output named with the settings that differ,
        then the session both ran in."""
        head = f"{self.b} vs {self.a}"
        tail = [f"  {self.session.text()}"] if self.session else []
        if self.refused:
            return [f"{head}: DIFFERENT: {self.refused}; {self.a} ran the model", *tail]
        if self.same:
            return [f"{head}: SAME (bitwise): every output of {self.compared} input(s) bit-identical", *tail]
        why = ", ".join(s.text(self.a, self.b) for s in self.settings) or "no runtime setting differs (the runtimes compute differently)"
        names = sorted({d.output for d in self.outputs})
        out = [f"{head}: DIFFERENT: {len(names)} output(s) ({', '.join(names)}); setting(s): {why}"]
        out += [f"  input {d.input} output {d.output}: {d.how}" for d in self.outputs[:20]]
        return out + tail

    def to_json(self) -> dict[str, Any]:
        return {"schema": PAIR_SCHEMA, "a": self.a, "b": self.b, "same": self.same, "compared": self.compared,
                "refused": self.refused,
                "outputs": [{"input": d.input, "output": d.output, "how": d.how} for d in self.outputs],
                "settings": [{"key": s.key, "a": s.a, "b": s.b} for s in self.settings],
                "session": self.session.to_json() if self.session else None}


def effective_settings(backend: str, recorded: dict[str, Any] | None) -> dict[str, Any]:
    """What a runner chose: its backend's implicit settings, overridden by what its run.json records."""
    found = dict(IMPLICIT_OPTIONS.get(backend, {}))
    found.update({k: v for k, v in (recorded or {}).items() if k in PAIR_SETTINGS})
    return found


def _first_runs(source: ResultSetDir) -> dict[str, dict[str, tuple[str, str, tuple[int, ...]]]]:
    """input -> output -> (hash, dtype, shape) of each input's first run."""
    firsts: dict[str, dict[str, tuple[str, str, tuple[int, ...]]]] = {}
    for rec in source.records():
        if rec.input not in firsts:
            firsts[rec.input] = {o.name: (o.hash, o.dtype, o.shape) for o in rec.outputs}
    return firsts


def compare_backends(a: Path, b: Path) -> BackendPair:
    """The cell over two result sets of one build: `a` (e.g. lite2's), `b` (e.g. rkdet-run-c's); result sets
    in deploy's run folders (`<run>/result`) also say the pinned session they shared."""
    sa, sb = ResultSetDir(a), ResultSetDir(b)
    na, nb = sa.run_info.backend or "A", sb.run_info.backend or "B"
    opts_a = effective_settings(na, dict(sa.run_info.backend_options or {}))
    opts_b = effective_settings(nb, dict(sb.run_info.backend_options or {}))
    settings = tuple(SettingDiff(k, opts_a[k], opts_b[k]) for k in PAIR_SETTINGS
                     if k in opts_a and k in opts_b and str(opts_a[k]) != str(opts_b[k]))
    fa, fb = _first_runs(sa), _first_runs(sb)
    diffs: list[OutputDiff] = []
    for name in sorted(set(fa) | set(fb)):
        outs_a, outs_b = fa.get(name, {}), fb.get(name, {})
        for output in list(outs_a) + [o for o in outs_b if o not in outs_a]:
            x, y = outs_a.get(output), outs_b.get(output)
            if x is None or y is None:
                diffs.append(OutputDiff(name, output, f"missing in {na if x is None else nb}"))
            elif x[1] != y[1]:
                diffs.append(OutputDiff(name, output, f"dtype {x[1]} vs {y[1]}"))
            elif x[2] != y[2]:
                diffs.append(OutputDiff(name, output, f"shape {list(x[2])} vs {list(y[2])}"))
            elif x[0] != y[0]:
                diffs.append(OutputDiff(name, output, "values differ bitwise"))
    return BackendPair(na, nb, not diffs, tuple(diffs), settings, compared=len(set(fa) & set(fb)),
                       session=shared_session(a.parent, b.parent))


def refused_pair(a: str, b: str, said: str, session: SharedSession | None = None) -> BackendPair:
    """The cell when backend `b` ran nothing (its runtime refused the model): what it said."""
    return BackendPair(a, b, False, refused=f"{b} ran nothing: {said}", session=session)


__all__ = ["BackendPair", "OutputDiff", "PAIR_SCHEMA", "PINNED_SETTINGS", "SettingDiff", "SharedSession", "compare_backends",
           "effective_settings", "refused_pair", "shared_session"]
