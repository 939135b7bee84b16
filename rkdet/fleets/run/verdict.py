"""One fleet run: every board's cells (scheduler + board_run), then the determinism classes, the
first differences, drift from the history, the verdict and exit code, and the files in
`<out>/fleet/<fleet-run-id>/` (fleet.json, report.html, optionally JUnit XML).

Exit codes: 0 one class and every board within tolerance of the reference; 1 more than one class or
a board outside tolerance (its own deploy said 1: not repeatable, or not agreeing with the golden
reference); 3 any board could not be run (the others complete and are reported; 3 wins over 1);
130 interrupted (running boards finished and restored first); 2 bad input (before any board).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from pathlib import Path

from rkdet.errors import EXIT_BOARD, EXIT_DIFFERENT, EXIT_INTERRUPTED, EXIT_OK
from rkdet.fleets.sources.inventory import FleetBoard
from rkdet.fleets.run.one_board import BuildChoice, DeployCommon, run_board
from rkdet.fleets.run.classes import declared_decisions, find_classes, first_differences
from rkdet.fleets.run.records import (BOARD_OK, COMPLETE, BoardResult, MatrixCell, DeterminismClass, DriftNote, FleetResult,
                                        BuildRef, FleetSettings)
from rkdet.fleets.run.scheduler import Schedule, run_all
from rkdet.history.ingest import RunRecord
from rkdet.records.io import write_atomic
from rkdet.records.ids import new_run_id



@dataclass(frozen=True)
class FleetFiles:
    folder: Path
    json: Path
    html: Path
    junit: Path | None


def run_fleet(boards: list[FleetBoard], builds: list[BuildChoice], cells: list[MatrixCell], common: DeployCommon,
              schedule: Schedule, log: Callable[[str, str], None]) -> tuple[FleetResult, Path]:
    """Deploy to every board and judge the fleet; returns the result and the fleet run's folder."""
    run_id = new_run_id(random_bytes=3)  # a fleet run id: records.ids's one definition
    folder = common.out / "fleet" / run_id
    folder.mkdir(parents=True, exist_ok=False)
    started_unix, started = time.time(), time.monotonic()
    results = [BoardResult(board=b) for b in boards]

    def job(result: BoardResult, stop) -> BoardResult:  # type: ignore[no-untyped-def]
        return run_board(result, builds, cells, common, stop, lambda msg: log(result.board.name, msg))

    interrupted = run_all(results, job, schedule, lambda msg: log("", msg))
    for b in results:  # each board's ordinary run folder, relative to the fleet run's folder
        for c in b.cells:
            if c.folder:
                c.folder = os.path.relpath(c.folder, folder)
    classes = find_classes(results)
    differences = first_differences(results, classes, folder, builds[0].settings.tolerances,
                                    declared_decisions(builds[0].folder))  # the app's rules, when declared
    drift = drift_notes(common.out, results)
    run = common.request.run
    code, verdict = judge(results, classes, cells, interrupted)
    fleet = FleetResult(fleet_run_id=run_id, started_unix=started_unix, seconds=time.monotonic() - started,
                        cells=cells, boards=results, classes=classes, differences=differences, drift=drift,
                        exit_code=code, verdict=verdict, interrupted=interrupted,
                        settings=FleetSettings(
                            builds=tuple(BuildRef(str(b.folder), b.platform, b.fingerprint) for b in builds),
                            repeats=run.repeats, warmup=run.warmup, forks=schedule.forks, canary=schedule.canary,
                            max_fail_percent=schedule.max_fail_percent, timeout=run.timeout,
                            board_timeout=common.board_timeout, lock_timeout=run.lock_timeout, pin=not run.no_pin))
    return fleet, folder


def judge(boards: list[BoardResult], classes: list[DeterminismClass], cells: list[MatrixCell],
          interrupted: bool) -> tuple[int, str]:
    """The exit code and the verdict line: how many classes, which cells depart from the majority."""
    not_run = [b for b in boards if b.status != BOARD_OK]
    outside = [(b, c) for b in boards for c in b.cells if c.status == COMPLETE and c.deploy_exit != EXIT_OK]
    done = sum(c.status == COMPLETE for b in boards for c in b.cells)
    parts = [f"{len(classes)} determinism class{'es' if len(classes) != 1 else ''} over {done} board×cell "
             f"result{'s' if done != 1 else ''} of {len(boards)} board{'s' if len(boards) != 1 else ''}"]
    if len(classes) > 1:
        majority = classes[0]
        departing = [f"{m.board} {m.cell} ({k.name})" for k in classes[1:] for m in k.members]
        shown = ", ".join(departing[:6]) + (f" and {len(departing) - 6} more" if len(departing) > 6 else "")
        parts.append(f"majority {majority.name} ({len(majority.members)}); departing: {shown}")
    if outside:
        parts.append(f"{len(outside)} outside tolerance or not repeatable: " +
                     ", ".join(f"{b.board.name} {c.cell.name}" for b, c in outside[:6]))
    if not_run:
        parts.append(f"{len(not_run)} board{'s' if len(not_run) != 1 else ''} not run: " +
                     ", ".join(f"{b.board.name} ({b.reason[:80] or b.status})" for b in not_run[:6]))
    if interrupted:
        return EXIT_INTERRUPTED, "INTERRUPTED: " + "; ".join(parts)
    if not_run:
        return EXIT_BOARD, "NOT ALL BOARDS RAN: " + "; ".join(parts)
    if len(classes) > 1 or outside:
        return EXIT_DIFFERENT, "FLEET DIFFERS: " + "; ".join(parts)
    if not classes:
        return EXIT_BOARD, "NO RESULTS: " + "; ".join(parts)
    return EXIT_OK, "FLEET AGREES: " + "; ".join(parts)


def drift_notes(results_root: Path, boards: list[BoardResult]) -> list[DriftNote]:
    """This run's board × cells whose outputs moved from their history baseline (`rkdet history drift`)."""
    from rkdet.history.db import connect, load_runs
    from rkdet.history.drift import cell_key, find_drift, matches

    ours: dict[tuple[str, str, str, str], RunRecord] = {}
    names: dict[str, str] = {}
    for b in boards:
        for c in b.cells:
            if c.run is not None:
                ours[cell_key(c.run)] = c.run
                names[c.run.board.key] = b.board.name
    if not ours:
        return []
    try:
        conn = connect(results_root)
        try:
            runs = load_runs(conn)
        finally:
            conn.close()
    except Exception:  # noqa: BLE001 - the database is evidence on the side; its trouble was warned about
        return []
    notes = []
    for d in find_drift(runs):
        key = (d.board, d.build, d.baseline.core_mask, d.baseline.backend)
        mine = ours.get(key)
        if mine is None or matches(mine, d.baseline):
            continue
        first = d.outputs[0] if d.outputs else None
        notes.append(DriftNote(board=names.get(d.board, d.label), cell=d.cell, since_run=d.since.run_id,
                               baseline_run=d.baseline.run_id,
                               changes=tuple(f"{c.what}: {c.before or 'unknown'} -> {c.after or 'unknown'}"
                                             for c in d.changes),
                               first_output=f"input {first.input} output {first.output}" if first else None))
    return notes


def _relative_builds(doc: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Build folders relative to the fleet run's folder, as deploy.json has them: a published folder
    names no workstation path."""
    def rel(path: str | None) -> str | None:
        return os.path.relpath(path, folder) if path else path

    for build in doc["settings"].get("builds", []):
        build["folder"] = rel(build["folder"])
    for board in doc["boards"]:
        board["build"] = rel(board["build"])
    return doc


def write_files(fleet: FleetResult, folder: Path, html_path: Path | None, junit_path: Path | None) -> FleetFiles:
    from rkdet.fleets.run.html import render_html
    from rkdet.fleets.run.junit import render_junit

    doc = _relative_builds(fleet.to_json(), folder)
    write_atomic(folder / "fleet.json", (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    page = render_html(fleet)
    write_atomic(folder / "report.html", page.encode())
    if html_path is not None and html_path.resolve() != (folder / "report.html").resolve():
        write_atomic(html_path, page.encode())
    if junit_path is not None:
        write_atomic(junit_path, render_junit(fleet))
    return FleetFiles(folder, folder / "fleet.json", folder / "report.html", junit_path)
