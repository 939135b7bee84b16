"""The one door from a fleet run into the single-board deploy, and each board's cell loop.

Why one module: every call into the single-board deploy (`open_connection`, probe, `Deployment`, the settings rule of
`rkdet deploy`) is here, so a change of the single-board API is one edit; and `run_board` is the one
function that runs a board's cells.

The core-mask cells of one backend are ONE runner's run (every mask as a cell of one runner, as
`rkdet deploy --core-mask 0,1,2,0_1_2`) into the ordinary results tree `<out>/<board>/<fingerprint16>/<run-id>/`,
recorded in `<out>/rkdet.db` like `rkdet deploy` records it (one run per cell); its result is then split into the
cells. A board's runners (one per backend; one per mask for a runner that takes one mask a run) are the steps of
ONE pinned session (`rkdet.deploy.session`: one lock, one pin, one restore, the build pushed once), each step its
own run folder, so the backend axis compares runs made under one pinned state. A board with one runner is a
session of one step, so every fleet run folder is alike: deploy.json's `session`, run-steps.sh's clocks records
in pin.json, the history's `runs.session`.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rkdet.backends.registry import backend as descriptor
from rkdet.records.build import BuildRecord
from rkdet.deploy.settings import resolve_build
from rkdet.link.connect import ConnectionOptions, open_connection

if TYPE_CHECKING:  # pragma: no cover
    from rkdet.link.ssh import BoardConnection
from rkdet.boardinfo.preflight import same_npu
from rkdet.deploy.request import DeployRequest
from rkdet.deploy.settings import RunOverrides, RunSettings
from rkdet.config import DeploySettings
from rkdet.errors import InputError, RkdetError
from rkdet.fleets.sources.inventory import FleetBoard
from rkdet.fleets.run.matrix import plan
from rkdet.fleets.run.records import (BOARD_FAILED, BOARD_OK, COMPLETE, FAILED, NOT_RUN, SKIPPED, BoardResult, BoardState,
                                    MatrixCell, CellResult)
from rkdet.history.ingest import RunRecord
from rkdet.records.verdict import AnyVerdict, CellVerdict, NotApplicable
from rkdet.snapshots import SnapshotError, read_snapshots
from rkdet.log import Log



@dataclass(frozen=True)
class BuildChoice:
    """A build folder and the settings (run, board, tolerances) its boards run it with."""

    folder: Path
    platform: str
    fingerprint: str
    settings: DeploySettings
    caveat: str | None = None  # --allow-failed-build: the build failed its gates at convert (rkdet.records.gates)
    record: BuildRecord | None = None  # the build loaded once (rkdet.records.build), handed to every board's deploy


@dataclass(frozen=True)
class DeployCommon:
    """The single-board deploy request every board of the fleet gets (a board's own inventory vars win
    for user, port, key, known_hosts, sudo and work dir: `connection_for`, `run_for`) and a board's budget."""

    request: DeployRequest  # its run.timeout is each cell's run (a session of N cells: N times it)
    board_timeout: float = 7200.0  # a board's whole budget (its sessions); the sessions left then fail

    @property
    def out(self) -> Path:
        return self.request.out

    def connection_for(self, board: FleetBoard) -> ConnectionOptions:
        """The connection flags with the board's own values (its source's) first."""
        return self.request.connection.for_board(
            board.address, user=board.user, port=board.port,
            identity=Path(board.key_file) if board.key_file else None,
            known_hosts=Path(board.known_hosts) if board.known_hosts else None, proxy_jump=board.proxy_jump)

    def run_for(self, board: FleetBoard) -> RunOverrides:
        """The run flags with the board's own sudo and work dir first."""
        run = self.request.run
        return replace(run, sudo=run.sudo if board.sudo is None else board.sudo,
                       workdir=board.workdir or run.workdir)


def load_builds(config_path: Path | None, builds: tuple[Path, ...], allow_failed_build: bool = False
                ) -> list[BuildChoice]:
    """The builds of a fleet run (one per NPU family), checked before any board is touched (exit 2); a build
    that failed a gate at convert is refused unless `allow_failed_build`."""
    chosen: list[BuildChoice] = []
    for given in builds or (None,):
        record, settings = resolve_build(config_path, given)  # a wrong --build: exit 2 naming it, before its settings
        folder, info = record.folder, record.info
        caveat = info.refuse_failed("fleet deploy", allow_failed_build)
        platform, fingerprint = info.platform, info.fingerprint
        for other in chosen:
            if same_npu(platform, other.platform):
                raise InputError(f"--build {folder}: {other.folder} is already the build for {other.platform}; "
                                 "give one build per NPU family")
        chosen.append(BuildChoice(folder, platform, fingerprint, settings, caveat, record))
    return chosen


def build_for(builds: list[BuildChoice], soc: str | None) -> BuildChoice | None:
    """The build a board of this SoC runs (None: no build for it)."""
    if soc is None:
        return builds[0] if len(builds) == 1 else None
    return next((b for b in builds if same_npu(soc, b.platform)), None)


@contextmanager
def board_connection(board: FleetBoard, common: DeployCommon) -> Iterator[Any]:
    """One SSH connection for all of a board's cells (the board's inventory values first: user, port, key,
    known_hosts)."""
    with open_connection(common.connection_for(board)) as conn:
        yield conn


def probe_soc(conn: BoardConnection, board: FleetBoard, common: DeployCommon) -> str | None:
    """The SoC the board's probe names (nothing on the board changes)."""
    from rkdet.boardinfo.remote_scripts import probe_board, state_dir_for
    from rkdet.deploy.stage import push_scripts

    run = common.run_for(board)
    sudo = bool(run.sudo)
    wd = conn.abspath(run.workdir) if run.workdir else conn.default_workdir()
    push_scripts(conn, f"{wd}/scripts")
    env = {"RKDET_WORK_DIR": wd, "RKDET_STATE_DIR": state_dir_for(conn, wd, sudo, run.state_dir)}
    return probe_board(conn, f"{wd}/scripts", env, sudo).soc


def _cell_settings(board: FleetBoard, build: BuildChoice, cells: list[MatrixCell], common: DeployCommon,
                   timeout: float) -> RunSettings:
    """One session step's settings: one backend, its cells' core masks (several masks: cells of one runner)."""
    backend = cells[0].backend
    assert all(c.backend == backend for c in cells), "one runner runs one backend"
    return RunSettings.from_config(build.settings, replace(
        common.run_for(board), core_mask=",".join(c.core_mask for c in cells), backend=backend, timeout=timeout))


def _deployment(conn: BoardConnection, build: BuildChoice, settings: RunSettings, common: DeployCommon,
                log: Log) -> Any:
    """A single-board `Deployment` whose judging takes a slot of JUDGE_SLOTS (one board judges at a time)."""
    from rkdet.deploy.flow import Deployment

    class FleetDeployment(Deployment):
        def _judge(self, *args: Any, **kwargs: Any) -> Any:  # the diff of the pulled results against golden
            with JUDGE_SLOTS:
                return super()._judge(*args, **kwargs)

    return FleetDeployment(conn, build.record or build.folder, common.out, settings, log=log, progress=False,
                           allow_failed_build=common.request.allow_failed_build)


def deploy_session(conn: BoardConnection, board: FleetBoard, build: BuildChoice, groups: list[list[MatrixCell]],
                   common: DeployCommon, log: Log) -> list[CellResult]:
    """A board's cells, of one runner or several (backends, or one core mask a run), in ONE pinned session
    (rkdet.deploy.session: every runner preflighted before any push, the build pushed once, one lock, one pin,
    the runners one after the other, one restore): one run folder per runner, split into its cells. A step
    that failed fails its own cells; one refused before the session ran fails the board (raised)."""
    from rkdet.deploy.session import PinnedSession

    per_cell = common.request.run.timeout  # --timeout is each cell's run: a step of N cells gets N times it
    deployments = [_deployment(conn, build, _cell_settings(board, build, g, common, per_cell * len(g)), common, log)
                   for g in groups]
    started = time.monotonic()
    steps = PinnedSession(deployments, log).run()
    seconds = (time.monotonic() - started) / sum(len(g) for g in groups)  # the session's time, shared evenly
    results: list[CellResult] = []
    for group, step in zip(groups, steps):
        if step.outcome is not None:
            results += cell_results(step.outcome, group, common, seconds, log)
        else:
            why = _one_line(step.error) if step.error is not None else "the session's run did not finish"
            results += [CellResult(c, FAILED, reason=why, folder=str(step.folder), seconds=seconds) for c in group]
    return results


def cell_results(outcome: Any, cells: list[MatrixCell], common: DeployCommon, seconds: float,
                 log: Log) -> list[CellResult]:
    """A finished deploy's run recorded in history (one run per cell) and split into a CellResult per cell."""
    for warning in outcome.warnings:
        log(f"warning: {warning}")
    record = outcome.record
    folder = str(outcome.folder)
    if record is None or record.status != "complete":
        why = str((record.error if record else None) or outcome.verdict)
        return [CellResult(c, FAILED, reason=why, folder=folder, deploy_exit=outcome.exit_code,
                           verdict=outcome.verdict, seconds=seconds) for c in cells]
    runs = {r.core_mask: r for r in record_runs(common.out, outcome.folder, log)}
    top = record.agrees
    not_applicable = top.reason if isinstance(top, NotApplicable) else None
    if len(cells) == 1:
        result = CellResult(cells[0], COMPLETE, folder=folder, deploy_exit=outcome.exit_code, verdict=outcome.verdict,
                            seconds=seconds, repeatable=_ok(record.repeatable), agrees=_ok(record.agrees),
                            agrees_not_applicable=not_applicable)
        result.run = next(iter(runs.values()), None)
        return [result]
    judged = record.cells
    split = [_split(cell, judged.cell(cell.core_mask) if judged else None, runs.get(cell.core_mask), folder, seconds)
             for cell in cells]
    for result in split:
        if result.status == COMPLETE and not_applicable is not None:
            result.agrees_not_applicable = not_applicable
    return split


def _ok(verdict: AnyVerdict | None) -> bool | None:
    """A verdict's `ok` (deploy.json `repeatable`/`agrees`): True, False or None (unknown / not applicable)."""
    return None if verdict is None else verdict.ok


def _split(cell: MatrixCell, judged: CellVerdict | None, run: RunRecord | None, folder: str,
           seconds: float) -> CellResult:
    """One cell of a multi-mask session, from deploy.json's `cells` (its own verdicts) and its history record."""
    if judged is None:
        return CellResult(cell, FAILED, reason="the session's cells.json does not name this cell", folder=folder,
                          seconds=seconds)
    status, reason = judged.status, judged.reason or ""
    if status == SKIPPED:
        return CellResult(cell, SKIPPED, reason=reason or "skipped by the board's runner", folder=folder)
    if status != COMPLETE or judged.repeatable is None:
        return CellResult(cell, FAILED, reason=f"the cell {status}" + (f": {reason}" if reason else ""),
                          folder=folder, seconds=seconds)
    rep_ok = judged.repeatable.ok
    agrees_ok = judged.agrees.ok if judged.agrees is not None else None
    # the cell judged alone, as its own single-mask deploy would be (the cells' agreement is the classes' job)
    exit_code = 0 if rep_ok is True and agrees_ok is not False else 1
    result = CellResult(cell, COMPLETE, folder=folder, deploy_exit=exit_code, verdict=judged.verdict or "",
                        repeatable=rep_ok, agrees=agrees_ok, seconds=seconds)
    result.run = run
    return result


# Judging a run (loading every output and its reference, the numeric comparison, the report's plots) is
# CPU-bound (one core under the GIL) and holds ~50 MB per board while it runs: one board at a time
# costs no wall time and keeps a 16-board fleet's memory that of one judge (bench/results/fleet.md).
JUDGE_SLOTS = threading.BoundedSemaphore(1)
_DB_LOCK = threading.Lock()  # one writer per process (the database itself also queues other processes)


def record_runs(results: Path, folder: Path, log: Log) -> list[RunRecord]:
    """Read the run's per-input output hashes (one record per cell) and add them to `<results>/rkdet.db`;
    the records are returned even when the database refuses them (a warning, as for `rkdet deploy`)."""
    from rkdet.history.db import connect
    from rkdet.history.db import record_runs as db_record
    from rkdet.history.ingest import read_runs

    try:
        runs = read_runs(results, folder)
    except (RkdetError, OSError, ValueError) as err:
        log(f"warning: run folder unreadable for the history ({err})")
        return []
    try:
        with _DB_LOCK:
            conn = connect(results)
            try:
                db_record(conn, runs)
            finally:
                conn.close()
    except (RkdetError, OSError, ValueError, sqlite3.Error) as err:
        log(f"warning: run not recorded in {results}/rkdet.db ({err}); `rkdet history import --results {results}` "
            "can add it later")
    return runs


def _board_state(soc: str | None, cells: list[CellResult]) -> BoardState:
    runs = [c for c in cells if c.run is not None]
    if not runs:
        return BoardState(soc=soc)
    first = runs[0].run
    assert first is not None
    hottest: dict[str, float] = {}
    for c in runs:
        try:
            assert c.run is not None
            shots = read_snapshots(Path(c.folder or "") / "result" / c.run.result_set / "snapshots.jsonl")
        except (SnapshotError, OSError):
            continue
        for shot in shots:
            for zone, mc in shot.thermal.items():
                if mc is not None:
                    hottest[zone] = max(hottest.get(zone, mc), mc)
    return BoardState(soc=soc or first.board.soc, kernel=first.state.kernel, driver=first.state.driver,
                      runtime=first.state.runtime, model=first.state.model, key=first.board.key,
                      clocks=first.state.clocks, max_temp_mc=tuple(sorted(hottest.items())))


def run_board(result: BoardResult, builds: list[BuildChoice], cells: list[MatrixCell], common: DeployCommon,
              stop: threading.Event, log: Log, clock: Callable[[], float] = time.monotonic) -> BoardResult:
    """Every cell of the matrix on one board in ONE pinned session: the core-mask cells of a backend are cells
    of one runner, the runners (backends) steps of the session one after the other (the board pinned once and
    restored once); a board that cannot be reached or fails preflight is `failed` with its reason. Nothing
    starts when `stop` is set (Ctrl-C) or the board's time budget (`clock`'s seconds) is spent: the budget
    decides whether the session starts, never cuts it short (each step is bounded by --timeout per cell)."""
    board = result.board
    started = clock()
    deadline = started + common.board_timeout
    result.status = BOARD_OK
    soc: str | None = None
    try:
        with board_connection(board, common) as conn:
            # the source's SoC (rkdet_soc, a labgrid soc tag) saves a probe; each session's preflight probes
            # anyway and refuses a board whose NPU is not the build's
            soc = board.soc.lower() if board.soc else probe_soc(conn, board, common)
            build = build_for(builds, soc)
            if build is None:
                raise InputError(f"board is {soc or 'of an unknown SoC'}; no --build targets it "
                                 f"(given: {', '.join(b.platform for b in builds)})")
            result.build, result.fingerprint = str(build.folder), build.fingerprint
            runnable: list[MatrixCell] = []
            for planned in plan(cells, soc):
                if planned.skip:
                    log(f"{planned.cell.name}: skipped: {planned.skip}")
                    result.cells.append(CellResult(planned.cell, SKIPPED, reason=planned.skip))
                else:
                    runnable.append(planned.cell)
            groups = sessions(runnable)
            if groups and (stop.is_set() or clock() >= deadline):
                why = "interrupted before this cell" if stop.is_set() else \
                    f"the board's time budget ({common.board_timeout:g} s) was spent"
                result.cells.extend(CellResult(cell, NOT_RUN, reason=why) for group in groups for cell in group)
            elif groups:
                names = ", ".join(c.name for group in groups for c in group)
                several = len(groups) > 1 or len(groups[0]) > 1
                log(f"{names}: deploy{' (one pinned session)' if several else ''}")
                # every runner (backend, or one mask a run) a step of ONE pinned session; one runner: one step
                done = deploy_session(conn, board, build, groups, common, log)
                result.cells.extend(done)
                for cell in done:
                    log(f"{cell.cell.name}: {cell.verdict or cell.reason}")
    except (RkdetError, OSError, EOFError) as err:  # unreachable, preflight, dropped: this board only
        result.status, result.reason = BOARD_FAILED, _one_line(err)
    except Exception as err:  # noqa: BLE001 - a board's surprise must not stop the others; said, with its type
        result.status, result.reason = BOARD_FAILED, f"{type(err).__name__}: {_one_line(err)}"
    ran = {c.cell for c in result.cells}
    for cell in cells:  # the cells a failed board never reached
        if cell not in ran:
            result.cells.append(CellResult(cell, FAILED if result.status == BOARD_FAILED else NOT_RUN,
                                           reason=result.reason or "not reached"))
    result.cells.sort(key=lambda c: cells.index(c.cell))
    if result.status == BOARD_OK and any(c.status in (FAILED, NOT_RUN) for c in result.cells):
        result.status = BOARD_FAILED
        result.reason = next(f"{c.cell.name}: {c.reason}" for c in result.cells if c.status in (FAILED, NOT_RUN))
    result.state = _board_state(soc, result.cells)
    result.seconds = clock() - started
    return result


def sessions(cells: list[MatrixCell]) -> list[list[MatrixCell]]:
    """The runner runs that make up `cells` (the steps of a board's one pinned session): one per backend (its
    core masks cells of one runner), and one per mask for a backend whose runner takes one mask a run
    (descriptor `one_mask_per_run`)."""
    groups: dict[tuple[str, str], list[MatrixCell]] = {}
    for cell in cells:
        own = cell.core_mask if descriptor(cell.backend).one_mask_per_run else ""
        groups.setdefault((cell.backend, own), []).append(cell)
    return list(groups.values())


def _one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return " ".join(text.split())[:600]
