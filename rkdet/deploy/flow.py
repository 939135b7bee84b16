"""`rkdet deploy`: from a converted build to a verdict about a board, in one command.

Order matters, and each step is recorded in `deploy.json` so a dropped connection can `--resume`:
preflight (probe; nothing changes on the board), push (verified by sha256, unchanged files skipped),
pin + run + restore as ONE detached board-side job (`run-pinned.sh` restores from a trap on exit,
Ctrl-C, SIGTERM and hang-up, so the board is put back even when this host disappears), then pull
the result set (distinct outputs only) and diff it run-to-run and against the golden reference.

`Deployment` only composes the one-board steps, each in its own module so a fleet scheduler or a
bisection reuses them: build.py (the manifest), settings.py (RunSettings), layout.py (board paths),
remote_scripts.py (probe), preflight.py (fit), stage.py (push), pinned_run.py (start, follow, stop),
collect.py (log, restore, pull), judge.py (verdict), deploy_state.py (deploy.json).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rkdet.deploy import collect, pinned_run, stage
from rkdet.deploy.cells import cell_args
from rkdet.boardinfo import lock as board_lock
from rkdet.records.build import BuildRecord, load_build
from rkdet.deploy.deploy_state import (DeployState, DeployStatus, load_record, public_settings, refuse_session_step,
                                       remove_partial)
from rkdet.records.deploy_record import (BoardLockRecord, DeployRecord, PulledRecord, SessionRecord,
                                         TransferRecord)
from rkdet.link.jobs import DetachedJob, attach, exit_code
from rkdet.deploy.judge import judge
from rkdet.deploy.layout import RemoteLayout
from rkdet.boardinfo.preflight import BoardFit, check_board
from rkdet.backends.registry import backend as descriptor
from rkdet.backends.capi_build import arch_of_soc, built_runner, check_board_runtime
from rkdet import socs
from rkdet.boardinfo.remote_scripts import is_emulated_runtime, probe_board, state_dir_for
from rkdet.deploy.settings import AUTO_WARNING, RunSettings
from rkdet.link.shell import FILES_S
from rkdet.link.ssh import BoardConnection
from rkdet.boardinfo.stack import BoardStack, model_expectations
from rkdet.link.transfer import TransferStats
from rkdet.errors import BoardError, InputError, RkdetError
from rkdet.records.probe import ProbeReport, parse_probe, read_probe, write_probe
from rkdet.log import Log
from rkdet.records.io import SHARED, write_json
from rkdet.records.ids import new_run_id
from rkdet.records.run_info import RunInfo



@dataclass
class DeployOutcome:
    """What deploy did and found; `exit_code` is the command's."""

    folder: Path
    exit_code: int
    verdict: str
    emulated: bool
    transfer: TransferStats
    restored: bool | None
    warnings: list[str] = field(default_factory=list)
    record: DeployRecord | None = None  # deploy.json with its private part (what `--json` prints)
    verdict_lines: list[str] = field(default_factory=list)  # "repeatable: …", "agrees with the reference: …"


@dataclass(frozen=True)
class Prepared:
    """What preflight found and chose for one run: where it lives on the board, its job's environment, the
    board's fit, whether the runtime is the emulator's double, the native runner to push, the probe."""

    layout: RemoteLayout
    env: dict[str, str]
    fit: BoardFit
    emulated: bool
    native: Path | None
    probe: ProbeReport
    scripts: TransferStats = field(default_factory=TransferStats)  # the board scripts preflight pushed


def board_label(conn_label: str) -> str:
    """A folder-safe name for the board (`user@host:port` -> `host_port`)."""
    host = conn_label.split("@")[-1]
    label = re.sub(r"[^A-Za-z0-9._-]", "_", host)
    return "_" if label.strip(".") == "" else label  # never "." or "..": the label is a folder under --out


class Deployment:
    """One deploy to one board: created fresh, or re-attached with `resume`."""

    def __init__(self, conn: BoardConnection, build: BuildRecord | Path, results_root: Path, settings: RunSettings,
                 log: Log = lambda msg: None, progress: bool = False, allow_failed_build: bool = False) -> None:
        self.conn = conn
        # the build loaded once (by the CLI: rkdet.records.build); a folder is loaded here
        self.build_record = build if isinstance(build, BuildRecord) else load_build(build)
        self.build = self.build_record.folder
        self.info = self.build_record.info
        # a build that failed a gate at convert: refused, or (allowed) every verdict line says so
        self.caveat = self.info.refuse_failed("deploy", allow_failed_build)
        self.settings = settings
        self.log = log
        self.progress = progress
        self.label = board_label(conn.target.label)
        self.results = results_root / self.label / self.info.short
        self.state = DeployState(Path(), conn.target.label, self.label, conn.target.user)
        self.probe_record: ProbeReport | None = None  # board.json as this process wrote it (a resumed run: read)

    @property
    def folder(self) -> Path:
        return self.state.folder

    @property
    def record(self) -> DeployRecord:
        assert self.state.record is not None, "the run's record is made in _prepare"
        return self.state.record

    def scrub(self, obj: Any) -> Any:
        return self.state.scrub(obj)

    # -- the whole flow --

    def run(self) -> DeployOutcome:
        """Preflight, push, start the pinned run, wait, pull, judge. Nothing on the board changes
        before preflight passed, and a run folder that never got past preflight is removed again."""
        run_id = self.open_run()
        try:
            ready = self.preflight(run_id)
            transfer = self.push(ready)
        except BaseException:
            remove_partial(self.folder)
            raise
        try:
            job = pinned_run.start(self.conn, ready.layout, self.settings, ready.env, self.conn.timeouts.connect + 25,
                                   self.runner_extra(ready.fit))
        except BoardError as err:
            self.state.advance(DeployStatus.FAILED, error=str(err))
            raise
        self.state.update(job_pid=job.pid)
        self.state.save()
        return self._finish(job, ready.layout, transfer, ready.fit)

    def open_run(self) -> str:
        """A new run id and its (empty) run folder under the results root."""
        while True:  # two runs of one session may start in the same second: a fresh id, never a shared folder
            run_id = new_run_id()
            try:
                (self.results / run_id).mkdir(parents=True, exist_ok=False)
            except FileExistsError:
                continue
            self.state.folder = self.results / run_id
            return run_id

    def runner_extra(self, fit: BoardFit) -> list[str]:
        """The runner's identity check (the build's fingerprint) and cell flags for this board."""
        return model_expectations(self.info, self.settings.backend) + cell_args(
            self.settings.core_mask, fit.soc, self.settings.contexts)

    def preflight(self, run_id: str, session: SessionRecord | None = None,
                  probe: ProbeReport | None = None) -> Prepared:
        """Preflight (probe and fit; nothing on the board changes but the board scripts): status "preflight".
        A session's run (`session`) is a step of its one job, and may reuse the session's `probe`."""
        s, conn = self.settings, self.conn
        workdir = conn.abspath(s.workdir) if s.workdir else conn.default_workdir()
        layout = RemoteLayout.for_run(workdir, self.info.fingerprint, run_id, s.backend)
        if session is not None:
            layout = layout.in_session(session.id, run_id)
        env = pinned_run.job_env(s, layout, state_dir_for(conn, workdir, s.sudo, s.state_dir))
        env.update(board_lock.holder_env(self.info.fingerprint, session.id if session else run_id, s.lock_timeout))
        full = s.to_json()
        self.state.start(DeployRecord(run_id=run_id, board=conn.target.label, build=str(self.build),
                                      fingerprint=self.info.fingerprint, platform=self.info.platform,
                                      remote=layout.to_json(), job_env=dict(env), settings=public_settings(s),
                                      run_settings=full, tolerances=s.tolerances.to_json(), session=session))
        self.state.advance(DeployStatus.PREFLIGHT)
        self.log(f"preflight on {conn.target.label}" + (f" ({s.backend})" if session else ""))
        scripts = TransferStats()
        if probe is None:
            scripts = stage.push_scripts(conn, layout.scripts)
            probe = probe_board(conn, layout.scripts, {"RKDET_WORK_DIR": workdir,
                                                       "RKDET_STATE_DIR": env["RKDET_STATE_DIR"]}, s.sudo)
        lock = board_lock.probe_lock(probe.records, conn.target.label)
        self.state.lock_names |= board_lock.private_names([lock.holder])
        self.probe_record = parse_probe(self.scrub(list(probe.records)))  # board.json: written, kept, not read back
        write_probe(self.folder / "board.json", self.probe_record)
        desc = descriptor(s.backend)
        emulated = desc.emulated_double and is_emulated_runtime(conn)
        fit = check_board(probe, self.info, host=conn.target.label, backend=s.backend, emulated=emulated,
                          need_kb=stage.need_kb(self.info, s.backend, self._own_inputs))
        if s.fault and not emulated:
            raise InputError("--emulator-fault is a test control of the emulated runtime; this board is not emulated")
        if s.emulate_npu is not None and not emulated:
            raise InputError("--emulator-npu is a test control of the emulated runtime (--backend rknnlite); "
                             "this board's runtime is not emulated")
        board_lock.check_before_push(lock, conn.target.label, s.lock_timeout, s.pin, self.log)
        if desc.takes_core_mask and "auto" in s.core_mask.split(","):
            self.log(AUTO_WARNING)
        native: Path | None = None
        if desc.one_mask_per_run and ("," in s.core_mask or s.contexts > 1):
            raise InputError(f"--backend {desc.name}: its runner runs one core mask and one context per run; "
                             f"pass one --core-mask (not {s.core_mask}) and no --contexts")
        if desc.native_runner:  # rkdet-run-c: the one `rkdet runner build` made for this board's architecture
            built = built_runner(arch_of_soc(socs.is_rknpu1(fit.soc)))
            self.log(f"runner {built.describe()}; the board runs {fit.runtime_version or 'a runtime of unknown version'}")
            unchecked = check_board_runtime(built, fit.runtime_version, conn.target.label)
            fit = replace(fit, warnings=(*fit.warnings, unchecked)) if unchecked else fit
            native = built.path
        return Prepared(layout, env, fit, emulated, native, probe, scripts)

    def push(self, ready: Prepared, pushed: set[str] | None = None) -> TransferStats:
        """The verified push (`push_files`), then status "running" (`mark_running`)."""
        transfer = self.push_files(ready, pushed)
        self.mark_running(ready, transfer)
        return transfer

    def push_files(self, ready: Prepared, pushed: set[str] | None = None) -> TransferStats:
        """The verified push of the runner, model and inputs (unchanged files skipped; in a session, `pushed`
        holds the board paths an earlier run of it sent, not asked about again); the status stays "preflight"."""
        s, fit = self.settings, ready.fit
        self.log(f"board {fit.soc}{' (EMULATED runtime)' if ready.emulated else ''}: pushing build {self.info.short}"
                 + (f" for {s.backend}" if self.record.session else ""))
        transfer = TransferStats()
        transfer.add(ready.scripts)
        transfer.add(stage.push_build(self.conn, self.info, ready.layout,
                                      descriptor(s.backend).stages_onnx(ready.emulated), self.progress,
                                      s.emulate_npu if ready.emulated else None, native_runner=ready.native,
                                      pushed=pushed, inputs=self._own_inputs))
        return transfer

    def mark_running(self, ready: Prepared, transfer: TransferStats) -> None:
        """Pushed: status "running", with what the push sent and the board's warnings."""
        self.state.advance(DeployStatus.RUNNING, emulated=ready.emulated,
                           warnings=tuple(self._with_caveat(list(ready.fit.warnings))),
                           transfer=TransferRecord(bytes_sent=transfer.bytes_sent, files_sent=transfer.files_sent,
                                                   files_skipped=transfer.files_skipped, method=transfer.method,
                                                   seconds=round(transfer.seconds, 3)))

    @property
    def fed_count(self) -> int:
        """How many inputs the runner runs per pass: the --inputs folder's tensors, else the golden inputs."""
        own = self._own_inputs
        return len(list(own.glob("*.npy"))) if own is not None and own.is_dir() else len(self.build_record.golden_inputs)

    @property
    def _own_inputs(self) -> Path | None:
        """`--inputs FOLDER`: the fed tensors run instead of the build's golden inputs."""
        return None if self.settings.inputs is None else Path(self.settings.inputs)

    def _no_reference(self) -> str | None:
        """Why `agrees` is not judged for this run: its inputs are not the build's golden inputs (`--inputs`)."""
        if self.settings.inputs is None:
            return None
        return (f"the inputs are {Path(self.settings.inputs).name}/ (--inputs), not the build's golden inputs: "
                "there is no reference output for them")

    def resume(self, folder: Path) -> DeployOutcome:
        """Re-attach to a run recorded in `folder/deploy.json` (+ its private record), wait, pull, judge.
        The run's own settings are restored whole (not today's flags), except how long to wait
        (`timeout`) and whether to keep the board's run folder (`keep`), which are this command's."""
        record = load_record(folder)
        refuse_session_step(folder, record)  # a session's step shares one job with the others: not resumed alone
        self.state = DeployState(folder, self.conn.target.label, self.label, self.conn.target.user, record)
        if record.fingerprint != self.info.fingerprint:
            raise InputError(f"{folder}: that run is of build {str(record.fingerprint)[:16]} but "
                             f"{self.build} is {self.info.short}; resume without --build, or pass "
                             f"the build it ran ({record.build})")
        where = f"{folder / 'deploy.json'}"
        # older records: the public subset (its fields an older record lacks are not restored)
        ran = dict(record.run_settings or {}) or {k: v for k, v in (record.to_json().get("settings") or {}).items()
                                                  if v is not None}
        if record.tolerances is not None and "tolerances" not in ran:
            ran = {**ran, "tolerances": record.tolerances}
        restored = RunSettings.from_json(ran, base=self.settings, where=where)  # checked before board work
        self.settings = replace(restored, timeout=self.settings.timeout, keep=self.settings.keep)
        layout = RemoteLayout.from_json(record.remote or {}, where=f"{where}: remote")
        job = attach(self.conn, layout.pidfile, layout.logfile, sudo=self.settings.sudo)
        fit = BoardFit(record.platform or "?", None, bool(record.emulated), tuple(record.warnings or ()))
        self.log(f"resuming run {record.run_id} on {self.conn.target.label}")
        return self._finish(job, layout, TransferStats(), fit)

    # -- after the start --

    def _finish(self, job: DetachedJob, layout: RemoteLayout, transfer: TransferStats, fit: BoardFit) -> DeployOutcome:
        """Wait, read the job's log, pull and judge; deploy.json always ends in a final status
        ("complete", "failed", "interrupted", or "disconnected" when --resume can pick it up)."""
        interrupted = False
        try:
            total = self.settings.repeats * self.fed_count
            code = pinned_run.wait(self.conn, job, layout, self.settings.timeout + self.settings.lock_timeout, total,
                                   self.progress, self.log)
        except KeyboardInterrupt:
            interrupted = True
            self.log("interrupted: stopping the run on the board (it restores the board)")
            pinned_run.stop(self.conn, job, self.log)
            code = exit_code(self.conn, job)
        except BoardError:
            self.state.advance(DeployStatus.DISCONNECTED)
            raise
        try:
            job_log = collect.read_job_log(self.conn, layout.logfile, {None: layout.runner_log})
        except BoardError:
            self.disconnected()
            raise
        return self.conclude(layout, job_log, code, interrupted, transfer, fit)

    def conclude(self, layout: RemoteLayout, job_log: collect.JobLog, code: int | None, interrupted: bool,
                 transfer: TransferStats, fit: BoardFit, step: int | None = None) -> DeployOutcome:
        """After the job ended: its log (`job_log`, read once: a session's is every step's), the pull and the
        judgement (`step`: this run's step of a session's job, whose exit status `code` is). deploy.json ends
        in a final status."""
        try:
            result_local, restored, warnings = self._collect(layout, job_log, code, interrupted, fit, step)
            return self._judge(result_local, transfer, restored, warnings)
        except RkdetError as err:
            self.state.advance(DeployStatus.FAILED if self._connected() else DeployStatus.DISCONNECTED,
                               error=str(err))
            raise
        finally:
            self.state.save()

    def disconnected(self) -> None:
        """The link broke while a session's job ran: `--resume` territory, recorded."""
        self.state.advance(DeployStatus.DISCONNECTED)
        self.state.save()

    def _connected(self) -> bool:
        try:
            return self.conn.transport.is_active()
        except BoardError:
            return False

    def _collect(self, layout: RemoteLayout, job_log: collect.JobLog, code: int | None, interrupted: bool,
                 fit: BoardFit, step: int | None = None) -> tuple[Path, bool | None, list[str]]:
        """The job's log and pin/restore reports, then the pulled result set (and its clock warnings).
        A refused pull is raised only after the job's own errors (a board left pinned comes first)."""
        s = self.settings
        got = collect.examine_job_log(self.conn, job_log, layout, s.pin, dict(self.record.job_env or {}), s.sudo,
                                      self.scrub, self.folder, self.state.lock_names, step=step)
        if got.lock is not None and got.lock.mine is not None:  # which lock the board had and the wait: no names
            self.state.update(board_lock=BoardLockRecord(method=got.lock.mine.method, waited_s=got.lock.waited_s,
                                                         took_over_stale=got.lock.taken_over is not None))
        if got.lock is not None and got.lock.taken_over is not None:
            self.log(f"took over a stale board lock left by {got.lock.taken_over.describe()} (its job is gone)")
        got.warnings[:0] = self._with_caveat(list(fit.warnings))
        write_json(self.folder / "pin.json", self.scrub({"schema": "rkdet.pin/1", "records": got.records}), SHARED)
        self.state.update(job_exit=code, restored=got.restored)
        result_local = self.folder / "result"
        collect.pull_result(self.conn, layout, result_local, got, self.progress)
        if not s.keep and not interrupted and got.refused is None:
            self.conn.run(["rm", "-rf", layout.run_dir], check=False, timeout=FILES_S)
        self.state.update(warnings=tuple(got.warnings),
                          pulled=PulledRecord(bytes=got.pulled.bytes_sent, files=got.pulled.files_sent))
        self.state.advance(DeployStatus.INTERRUPTED if interrupted else DeployStatus.COMPLETE)
        collect.raise_for_job(self.conn.target.label, got, interrupted, code, s.sudo)
        if got.refused is not None:
            raise got.refused
        return result_local, got.restored, got.warnings

    def _judge(self, result_local: Path, transfer: TransferStats, restored: bool | None,
               warnings: list[str]) -> DeployOutcome:
        j = judge(result_local, self.build_record, self.settings.tolerances, self.folder, self.conn.target.label,
                  no_reference=self._no_reference())
        if self.caveat:  # the diff marks its own lines from the build's manifest; a multi-cell summary too
            j = replace(j, verdict=_marked(j.verdict, self.caveat), lines=[_marked(x, self.caveat) for x in j.lines])
        stack = self._stack(j.run)
        self.state.update(verdict=j.verdict, diff_exit=j.diff_exit, reference=str(j.reference) if j.reference is not None else None,
                          repeatable=j.repeatable, agrees=j.agrees, stack=stack.to_json() if stack else None,
                          cells=j.cells, contexts=j.contexts)
        self.state.save()
        lines = ([stack.line()] if stack else []) + j.lines
        return DeployOutcome(self.folder, j.exit_code, j.verdict, j.emulated, transfer, restored, warnings, self.record,
                             lines)

    def _with_caveat(self, warnings: list[str]) -> list[str]:
        """deploy.json's warnings, the failed-build caveat first (once) when the build failed its gates."""
        return warnings if not self.caveat or self.caveat in warnings else [self.caveat, *warnings]

    def _stack(self, run: RunInfo | None) -> BoardStack | None:
        """The board's software stack: board.json (the probe, as stored) and what rkdet-run saw."""
        probe = self.probe_record
        if probe is None:  # a resumed run: board.json was written by the deploy that started it
            try:
                probe = read_probe(self.folder / "board.json")
            except (OSError, InputError):
                return None
        return BoardStack.from_evidence(probe, run, self.info.toolkit_version)


def _marked(line: str, caveat: str) -> str:
    """A verdict line carrying the failed-build caveat (once)."""
    return line if caveat in line else f"{line} [{caveat}]"
