"""Several runs of one build on one board in ONE pinned session: `rkdet deploy --backends A,B` and a fleet
board's cells (`PinnedSession`).

Why one session and not one deploy after another: the lite2-vs-C cell asks whether what ships equals what
was proven, so both runners must see the same board state. Two deploys pin, restore and pin again (the
second run starts from clocks the restore just put back, and between them another job may take the board);
here the board lock is taken, the clocks pinned and compaction set once, every run goes as one step of one
detached job (`run-pinned.sh -- run-steps.sh A … B …`), and the board is restored once by run-pinned's trap,
also when a later step fails, the link drops or the user interrupts.

The steps keep what a deploy is: each run is a `Deployment` with its own settings (backend, core mask,
runner settings), run folder, deploy.json, result set and verdict, so `rkdet diff`, history and the pair
cell read them unchanged. Order: every step's preflight first (a backend that cannot run is refused, one
line naming it, before anything of the build is pushed), then the union of their files pushed once, then
the one job, then each step collected and judged in turn. Every deploy.json says the session
(`SessionRecord`: its id, every run and backend, this run's place) and every pin.json holds the same pin
and restore records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rkdet.deploy import collect, pinned_run
from rkdet.deploy.deploy_state import DeployStatus, remove_partial
from rkdet.deploy.flow import DeployOutcome, Deployment, Prepared, new_run_id
from rkdet.deploy.settings import RunSettings
from rkdet.errors import BoardError, InputError, RkdetError
from rkdet.link.shell import FILES_S
from rkdet.link.transfer import TransferStats
from rkdet.log import Log
from rkdet.records.deploy_record import SessionRecord

# the settings every step of a session must share: they are the one job's (lock, pin, sudo, work dir, test fault)
SHARED_SETTINGS = ("pin", "pin_env", "sudo", "workdir", "state_dir", "lock_timeout", "fault", "keep")


@dataclass
class StepResult:
    """One run of a session: its outcome, or the error that ended it (the other runs still ran)."""

    deployment: Deployment
    outcome: DeployOutcome | None
    error: BaseException | None = None

    @property
    def folder(self) -> Path:
        return self.deployment.folder

    @property
    def backend(self) -> str:
        return self.deployment.settings.backend


def check_shared(steps: Sequence[RunSettings]) -> None:
    """The steps of one job share its lock, pin, sudo, work dir and test fault (one line naming the setting)."""
    lead = steps[0]
    for other in steps[1:]:
        for name in SHARED_SETTINGS:
            if getattr(other, name) != getattr(lead, name):
                raise InputError(f"one pinned session runs {lead.backend} and {other.backend} under one {name}; "
                                 f"they differ ({getattr(lead, name)!r} vs {getattr(other, name)!r})")


def merged_env(steps: Sequence[tuple[str, dict[str, str]]]) -> dict[str, str]:
    """The one job's environment: every step's (the pin settings are shared; a backend's runner env is its
    own); two backends that need different values of one variable cannot share a job (one line)."""
    env: dict[str, str] = {}
    owner: dict[str, str] = {}
    for backend, own in steps:
        for key, value in own.items():
            if key in env and env[key] != value:
                raise InputError(f"one pinned session: {owner[key]} and {backend} need different {key} on the board; "
                                 "deploy them one at a time (--backend)")
            env[key], owner[key] = value, backend
    return env


class PinnedSession:
    """The runs of `deployments` (one build, one board, one connection) in one pinned session."""

    def __init__(self, deployments: Sequence[Deployment], log: Log = lambda msg: None) -> None:
        if not deployments:
            raise ValueError("a session runs at least one deployment")
        first = deployments[0]
        assert all(d.conn is first.conn for d in deployments), "one session, one connection"
        assert all(d.info.fingerprint == first.info.fingerprint for d in deployments), "one session, one build"
        check_shared([d.settings for d in deployments])
        self.deployments = list(deployments)
        self.conn = first.conn
        self.log = log
        self.id = ""

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(d.settings.backend for d in self.deployments)

    def run(self) -> list[StepResult]:
        """Preflight every run, push once, pin once, run each in turn, restore once, collect and judge each.
        A refusal before the job starts raises (no run folder left); after it, each run's error is its
        StepResult's. KeyboardInterrupt (re-raised) only after the board was restored and every run collected."""
        ds = self.deployments
        self.id = new_run_id()
        run_ids = [d.open_run() for d in ds]
        pinned = ds[0].settings.pin
        ready: list[Prepared] = []
        transfers: list[TransferStats] = []
        try:
            probe = None
            for i, d in enumerate(ds):
                record = SessionRecord(id=self.id, runs=tuple(run_ids), backends=self.backends, index=i, pinned=pinned)
                try:
                    ready.append(d.preflight(run_ids[i], record, probe))
                except RkdetError as err:  # the backend named, before anything of the build was pushed
                    kind = BoardError if isinstance(err, BoardError) else InputError
                    raise kind(f"{d.settings.backend} cannot run in this session: {err}",
                               exit_code=err.exit_code) from None
                probe = ready[-1].probe
            env = merged_env([(d.settings.backend, r.env) for d, r in zip(ds, ready)])
            self.log(f"one pinned session {self.id} for {', '.join(self.backends)}: pushing the build once")
            pushed: set[str] = set()
            transfers = [d.push_files(r, pushed) for d, r in zip(ds, ready)]
        except BaseException:  # every run still "preflight": no folder kept (nothing ran)
            for d in ds:
                remove_partial(d.folder)
            raise
        for d, r, sent in zip(ds, ready, transfers):  # every push done: now each run is "running"
            d.mark_running(r, sent)
        layouts = [r.layout for r in ready]
        try:
            job = pinned_run.start_steps(self.conn, layouts, [d.settings for d in ds],
                                         [d.runner_extra(r.fit) for d, r in zip(ds, ready)], env,
                                         self.conn.timeouts.connect + 25)
        except BoardError as err:
            for d in ds:
                d.state.advance(DeployStatus.FAILED, error=str(err))
                d.state.save()
            raise
        for d in ds:
            d.state.update(job_pid=job.pid)
            d.state.save()
        interrupted = False
        try:
            total = sum(d.settings.repeats * d.fed_count for d in ds)
            timeout = sum(d.settings.timeout for d in ds) + ds[0].settings.lock_timeout
            pinned_run.wait(self.conn, job, layouts[0], timeout, total, ds[0].progress, self.log,
                            results=[x.result for x in layouts])
        except KeyboardInterrupt:
            interrupted = True
            self.log("interrupted: stopping the session's run on the board (it restores the board)")
            pinned_run.stop(self.conn, job, self.log)
        except BoardError:
            for d in ds:
                d.disconnected()
            raise
        try:  # read once: every step's records and exit status
            job_log = collect.read_job_log(self.conn, layouts[0].logfile,
                                           {i: x.runner_log for i, x in enumerate(layouts)})
        except BoardError:
            for d in ds:
                d.disconnected()
            raise
        results: list[StepResult] = []
        for i, (d, r) in enumerate(zip(ds, ready)):
            try:
                results.append(StepResult(d, d.conclude(r.layout, job_log, job_log.steps.get(i), interrupted,
                                                        transfers[i], r.fit, step=i)))
            except (RkdetError, KeyboardInterrupt) as err:
                results.append(StepResult(d, None, err))
        if not ds[0].settings.keep and not interrupted:  # the job's own files; a kept run folder stays
            self.conn.run(["sh", "-c", 'rm -f "$1/job.pid" "$1/job.pid.rc" "$1/job.log"; rmdir "$1" 2>/dev/null; :',
                           "sh", layouts[0].session_dir], check=False, timeout=FILES_S)
        if interrupted:
            raise KeyboardInterrupt
        return results


__all__ = ["PinnedSession", "SHARED_SETTINGS", "StepResult", "check_shared", "merged_env"]
