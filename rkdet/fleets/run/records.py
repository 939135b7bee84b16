"""The typed records of one fleet run: cells, each board's cells, determinism classes, the fleet result.

`FleetResult.to_json()` is `fleet.json` (schema `rkdet.fleet/1`, docs/FORMATS.md); the run folders in
it are relative to the fleet run's folder, so it moves together with its results root (build folders
are as given on the command line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rkdet.fleets.sources.inventory import FleetBoard
from rkdet.history.ingest import RunRecord
from rkdet.textsafe import plain_value

SCHEMA = "rkdet.fleet/1"

# cell status: the single-board deploy completed (judged), was not run because the SoC lacks the cores
# or the backend makes the core mask moot, failed on the board, or was never started
COMPLETE, SKIPPED, FAILED, NOT_RUN = "complete", "skipped", "failed", "not-run"
# board status: every cell it was given ran (complete or skipped), it failed, or it was never started
BOARD_OK, BOARD_FAILED, BOARD_NOT_STARTED = "complete", "failed", "not-started"


@dataclass(frozen=True, order=True)
class MatrixCell:
    """One point of the matrix: an NPU core mask and a board runtime."""

    core_mask: str
    backend: str

    @property
    def name(self) -> str:  # the form the history database and `rkdet history` use
        return f"{self.core_mask}/{self.backend}"


@dataclass
class CellResult:
    """One board × cell: what the single-board deploy said, and the class its outputs fell in."""

    cell: MatrixCell
    status: str
    reason: str = ""  # skipped / failed / not-run: why
    folder: str | None = None  # the board's ordinary run folder, relative to the fleet run's folder
    deploy_exit: int | None = None  # the single-board deploy's code: 0 repeatable and agrees, 1 not
    verdict: str = ""  # the single-board deploy's verdict line
    repeatable: bool | None = None
    agrees: bool | None = None
    agrees_not_applicable: str | None = None  # why there is no agrees verdict (an imported .rknn: no reference)
    seconds: float = 0.0
    klass: str | None = None  # determinism class name ("A", "B", ...), complete cells only
    run: RunRecord | None = None  # the history record of the run (per-input output hashes); not in fleet.json

    @property
    def within(self) -> bool:
        return self.status == COMPLETE and self.deploy_exit == 0

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell.name, "core_mask": self.cell.core_mask, "backend": self.cell.backend,
                "status": self.status, "reason": self.reason or None, "run_folder": self.folder,
                "deploy_exit": self.deploy_exit, "verdict": self.verdict or None, "repeatable": self.repeatable,
                "agrees": self.agrees, **({"agrees_not_applicable": self.agrees_not_applicable}
                                          if self.agrees_not_applicable else {}),
                "seconds": round(self.seconds, 3), "class": self.klass,
                "run_id": self.run.run_id if self.run else None,
                "session": self.run.session if self.run else None}


@dataclass(frozen=True)
class BoardState:
    """What the board said about itself (probe and snapshots of its first completed cell)."""

    soc: str | None = None
    kernel: str | None = None
    driver: str | None = None
    runtime: str | None = None
    model: str | None = None
    key: str | None = None  # the history database's board key
    clocks: tuple[tuple[str, str], ...] = ()  # at run start ("devfreq/fdab0000.npu", "1000000000 Hz performance")
    max_temp_mc: tuple[tuple[str, float], ...] = ()  # hottest reading per thermal zone over its runs


@dataclass
class BoardResult:
    """One board of the fleet: where it came from, what it ran, and why not if it did not."""

    board: FleetBoard
    status: str = BOARD_NOT_STARTED
    reason: str = ""
    build: str | None = None  # the build folder it ran (as given)
    fingerprint: str | None = None
    canary: bool = False
    seconds: float = 0.0
    state: BoardState = field(default_factory=BoardState)
    cells: list[CellResult] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return self.status == BOARD_OK

    def to_json(self) -> dict[str, Any]:
        s = self.state
        return {"name": self.board.name, "address": self.board.address, "port": self.board.port,
                "source": self.board.source, "groups": list(self.board.groups), "status": self.status,
                "reason": self.reason or None, "canary": self.canary, "build": self.build,
                "fingerprint": self.fingerprint, "seconds": round(self.seconds, 3),
                "board": {"soc": s.soc or self.board.soc, "kernel": s.kernel, "driver": s.driver, "runtime": s.runtime,
                          "model": s.model, "key": s.key, "clocks": dict(s.clocks),
                          "max_temp_mc": dict(s.max_temp_mc)},
                "cells": [c.to_json() for c in self.cells]}


@dataclass(frozen=True)
class Difference:
    """Where two determinism classes first differ (from rkdet.diff on one member of each)."""

    a: str
    b: str  # class names; `b` is compared against `a`'s outputs
    input: str | None
    output: str | None
    index: int | None
    position: str | None
    value_a: Any
    value_b: Any
    max_ulp: int | None
    max_abs: float | None
    outputs_differing: int  # distinct (input, output) contents not bit-identical
    decision_differs: bool | None  # detections / top-1 differ (None: the decoder could not tell)
    note: str = ""  # why no element-level difference (e.g. a member is not repeatable)

    def line(self) -> str:
        if self.input is None:
            return f"{self.b} vs {self.a}: {self.note or 'no element-level difference'}"
        decided = {True: "the decision differs", False: "same decision", None: "decision unknown"}[self.decision_differs]
        return (f"{self.b} vs {self.a}: first difference input {self.input} output {self.output} element "
                f"{plain_value(self.position or self.index)}: {plain_value(self.value_a)} vs {plain_value(self.value_b)} "
                f"({plain_value(self.max_ulp)} ULP); "
                f"{self.outputs_differing} output(s) differ; {decided}")

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "input": self.input, "output": self.output, "index": self.index,
                "position": self.position, "value_a": self.value_a, "value_b": self.value_b,
                "max_ulp": self.max_ulp, "max_abs": self.max_abs, "outputs_differing": self.outputs_differing,
                "decision_differs": self.decision_differs, "note": self.note or None}


@dataclass(frozen=True)
class Member:
    board: str
    cell: str


@dataclass
class DeterminismClass:
    """Cells whose outputs are bit-identical for every input (same per-input output hashes)."""

    name: str
    members: list[Member]
    repeatable: bool  # every member gave one output set per input
    fingerprints: tuple[str, ...]  # the builds its members ran

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "size": len(self.members), "repeatable": self.repeatable,
                "fingerprints": list(self.fingerprints),
                "members": [{"board": m.board, "cell": m.cell} for m in self.members]}


@dataclass(frozen=True)
class DriftNote:
    """A board × cell of this fleet run whose outputs moved from its history baseline."""

    board: str
    cell: str
    since_run: str
    baseline_run: str
    changes: tuple[str, ...]  # "librknnrt: 2.3.0 -> 2.5.0"
    first_output: str | None

    def line(self) -> str:
        what = "; ".join(self.changes) or "nothing recorded changed on the board"
        return (f"{self.board} {self.cell}: outputs moved from baseline run {self.baseline_run} since run "
                f"{self.since_run} ({what})")

    def to_json(self) -> dict[str, Any]:
        return {"board": self.board, "cell": self.cell, "since_run": self.since_run, "baseline_run": self.baseline_run,
                "changes": list(self.changes), "first_output": self.first_output}


@dataclass(frozen=True)
class BuildRef:
    """One build a fleet run deployed, as fleet.json names it."""

    folder: str
    platform: str
    fingerprint: str

    def to_json(self) -> dict[str, Any]:
        return {"folder": self.folder, "platform": self.platform, "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class FleetSettings:
    """fleet.json `settings`: how the fleet run was made (the builds and the run/schedule flags)."""

    builds: tuple[BuildRef, ...] = ()
    repeats: int | None = None
    warmup: int | None = None
    forks: int | None = None
    canary: int | None = None
    max_fail_percent: float | None = None
    timeout: float | None = None
    board_timeout: float | None = None
    lock_timeout: int | None = None
    pin: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"builds": [b.to_json() for b in self.builds], "repeats": self.repeats, "warmup": self.warmup,
                "forks": self.forks, "canary": self.canary, "max_fail_percent": self.max_fail_percent,
                "timeout": self.timeout, "board_timeout": self.board_timeout, "lock_timeout": self.lock_timeout,
                "pin": self.pin}


@dataclass
class FleetResult:
    """Everything one `rkdet fleet deploy` found; `exit_code` is the command's."""

    fleet_run_id: str
    started_unix: float
    seconds: float
    cells: list[MatrixCell]
    boards: list[BoardResult]
    classes: list[DeterminismClass]
    differences: list[Difference]
    drift: list[DriftNote]
    exit_code: int
    verdict: str
    interrupted: bool = False
    settings: FleetSettings = field(default_factory=FleetSettings)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "fleet_run_id": self.fleet_run_id, "started_unix": self.started_unix,
                "seconds": round(self.seconds, 3), "exit_code": self.exit_code, "verdict": self.verdict,
                "interrupted": self.interrupted, "settings": self.settings.to_json(),
                "matrix": [c.name for c in self.cells], "boards": [b.to_json() for b in self.boards],
                "classes": [k.to_json() for k in self.classes],
                "differences": [d.to_json() for d in self.differences],
                "drift": [d.to_json() for d in self.drift]}
