"""After a run: read the job's log (pin and restore reports), confirm the restore, pull the result set.

Why its own module: what a finished (or interrupted, or killed) job left is read the same way by
deploy, `--resume` and a fleet scheduler; a log cut short (full disk, killed job) is completed by
running restore.sh again over the channel, and the one error explaining an unusable run is chosen
here (`raise_for_job`), after the facts have been recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable

from rkdet.boardinfo import lock as board_lock
from rkdet.boardinfo import scripts as board_scripts
from rkdet.deploy.layout import RemoteLayout
from rkdet.deploy.pulled import pull_noted
from rkdet.boardinfo.remote_scripts import run_board_script
from rkdet.link.shell import FILES_S, QUICK_S
from rkdet.link.ssh import BoardConnection
from rkdet.link.transfer import TransferStats
from rkdet.errors import BoardError, RkdetError
from rkdet.snapshots import Snapshot, SnapshotError, read_snapshots


@dataclass
class Collected:
    """What the job left, as read from the board (and pulled)."""

    log_text: str
    records: list[dict[str, Any]]
    pin: board_scripts.PinReport | None
    restore: board_scripts.RestoreReport | None
    warnings: list[str]
    result_exists: bool
    pulled: TransferStats = field(default_factory=TransferStats)
    refused: RkdetError | None = None  # a pull refused (raised after the job's own errors)
    lock: board_lock.JobLock | None = None  # the board lock as the job's records tell it

    @property
    def restored(self) -> bool | None:
        return None if self.restore is None else self.restore.ok


@dataclass(frozen=True)
class JobLog:
    """A job's log as read from the board, once: its text and records, a session's step exit statuses
    (run-steps.sh's records by step index; empty for a job of one runner), and each runner's own output
    (`outputs`, by step; `None`: the one runner of a plain run). THE reading of a job's log: deploy, a
    session and `--resume` all take what they need from it.

    The log holds only the board scripts' lines (a runner writes to its own file, `RemoteLayout.runner_log`),
    so its records are never pushed out of the capped read by what a runner prints; a runner's output is
    capped on its own, and cannot pass for a record."""

    text: str
    records: list[dict[str, Any]]
    steps: dict[int, int | None]
    outputs: dict[int | None, str] = field(default_factory=dict)

    def for_step(self, step: int | None) -> JobLog:
        """The log as one run saw it, its runner's output in its place: a session's step `step` (its own
        runner's lines, never another step's; every record outside the steps), or the whole log (`None`: a
        job of one runner). The records are the log's alone."""
        text = self.text if step is None else board_scripts.step_lines(self.text, step)
        records = self.records if step is None else board_scripts.parse_records(text)
        said = self.outputs.get(step, "")
        return JobLog(board_scripts.with_runner_output(text, said, step), records, self.steps,
                      {step: said} if said else {})


def read_job_log(conn: BoardConnection, logfile: str, outputs: Mapping[int | None, str] | None = None) -> JobLog:
    """The job's log (`logfile`: a run's, or a session's shared one) read once, capped from its end (the end
    holds restore's result), with its records and each step's exit status; and each runner's output file
    (`outputs`: board paths by step, `None` for a plain run's one runner), each capped from its end alike
    (a file a runner never wrote, as an older job's runner that wrote into the log: empty)."""
    cap = str(conn.limits.output_bytes)
    text = conn.run(["tail", "-c", cap, logfile], check=False, timeout=FILES_S).out
    records = board_scripts.parse_records(text)
    said = {step: conn.run(["tail", "-c", cap, path], check=False, timeout=FILES_S).out
            for step, path in (outputs or {}).items()}
    return JobLog(text, records, board_scripts.step_exits(records), said)


def examine_job_log(conn: BoardConnection, job_log: JobLog, layout: RemoteLayout, pinned: bool,
                    job_env: dict[str, str], sudo: bool, scrub: Callable[[Any], Any], folder: Path,
                    lock_names: set[str] | None = None, step: int | None = None) -> Collected:
    """The job's log (kept as job.log, scrubbed) and pin/restore reports; an incomplete restore report
    is confirmed by running restore.sh again. Warnings: pin's and the knobs pin could not set.
    The board lock's holders seen in the log join `lock_names` (kept out of job.log) before it is
    written; a pinned job that never got the lock raises the refusal naming the holder. `step`: this run is
    that step of a session's job (run-steps.sh): the session's pin and restore records with its own
    runner's lines, never another step's."""
    mine = job_log.for_step(step)
    log_text, records = mine.text, list(mine.records)
    lock = board_lock.job_lock(records, conn.target.label)
    if lock_names is not None:
        lock_names |= board_lock.private_names(lock.holders())
    (folder / "job.log").write_text(scrub(log_text))
    refused = board_lock.refusal(records, lock, conn.target.label) if pinned else None
    if refused is not None:
        raise refused
    pin = board_scripts.parse_pin(records) if pinned else None
    restore = board_scripts.parse_restore(records) if pinned else None
    warnings = list(pin.warnings) if pin else []
    if lock.taken_over is not None:
        warnings.append("took over a stale board lock left by a killed run (pin kept its saved state, if any, "
                        "and restore put those values back)")
    if restore is not None and restore.status == "incomplete":
        restore, note, again = confirm_restore(conn, layout, job_env, sudo)
        warnings.append(note)
        records += again
    if pin is not None:
        for knob in pin.by_status("failed"):
            warnings.append(f"pin: {knob.knob} wanted {knob.wanted} but reads {knob.actual}"
                            + (f" ({knob.reason})" if knob.reason else ""))
    return Collected(log_text, records, pin, restore, warnings, result_exists=False, lock=lock)


def pull_result(conn: BoardConnection, layout: RemoteLayout, dest: Path, collected: Collected,
                progress: bool) -> None:
    """Pull the result set (if the runner wrote one) into `dest`, with its clock warnings; a refused
    pull is kept in `collected.refused`, to be raised after the job's own errors."""
    # a result set (run.json), or cells (cells.json, a result set per core mask: docs/FORMATS.md)
    collected.result_exists = conn.run(["sh", "-c", 'test -e "$1/run.json" || test -e "$1/cells.json"', "sh",
                                        layout.result], check=False, timeout=QUICK_S).rc == 0
    if collected.result_exists:
        try:
            collected.pulled = pull_noted(conn, layout.result, dest, collected.warnings, progress=progress)
            cells = not (dest / "run.json").exists()
            for snapshots in sorted(dest.glob("core-*/snapshots.jsonl")) if cells else [dest / "snapshots.jsonl"]:
                collected.warnings += clock_changes(snapshots, conn.target.label)
        except RkdetError as err:
            collected.refused = err


def confirm_restore(conn: BoardConnection, layout: RemoteLayout, job_env: dict[str, str],
                    sudo: bool) -> tuple[board_scripts.RestoreReport, str, list[dict[str, Any]]]:
    """The job log lacks restore's result (its disk filled up, or the job was killed): run restore.sh
    again over the SSH channel, which needs no disk. It is idempotent: "nothing to restore" means
    the job's restore had finished; otherwise it finishes the job's work now."""
    env = {k: v for k, v in job_env.items() if k in ("RKDET_STATE_DIR", "RKDET_WORK_DIR")}
    rc, records = run_board_script(conn, "restore", layout.scripts, env, sudo)
    report = board_scripts.parse_restore(records)
    free = free_kb(conn, layout.workdir)
    why = f"the board's work dir is full ({free} KiB free)" if free is not None and free < 1024 else "cut off"
    what = ("its restore had finished" if report.nothing_to_restore else
            "restored now" if report.ok else f"restore failed ({report.reason or report.status})")
    return report, f"the job's log is incomplete ({why}); ran restore.sh again: {what}", records


def free_kb(conn: BoardConnection, path: str) -> int | None:
    """KiB free on the board's file system holding `path` (None when df does not say)."""
    res = conn.run(["df", "-Pk", path], check=False, timeout=QUICK_S)
    lines = res.out.strip().splitlines()
    fields = lines[-1].split() if res.rc == 0 and len(lines) >= 2 else []
    return int(fields[3]) if len(fields) >= 4 and fields[3].isdigit() else None


def raise_for_job(label: str, collected: Collected, interrupted: bool, code: int | None, sudo: bool) -> None:
    """The one error that explains a run that did not produce a result set worth judging."""
    pin, restore, log_text = collected.pin, collected.restore, collected.log_text
    if pin is not None and restore is not None and not restore.ok:
        raise BoardError(f"{label}: the board was NOT restored ({restore.reason or restore.status}); "
                         f"run `rkdet board restore --board {label}`")
    if interrupted:
        raise KeyboardInterrupt
    if pin is not None and pin.exit_code not in (0, 1):
        try:
            pin.raise_for_status(label)
        except RkdetError as err:
            if "permission denied" in str(err) and not sudo:
                raise type(err)(f"{err}; deploy with --sudo if this login has passwordless sudo, as root "
                                f"(--user root), or with --no-pin (unpinned, and the results say so)") from None
            raise
    said = [ln for ln in log_text.splitlines() if ln.strip() and not ln.startswith("{")]  # not JSON records
    if not collected.result_exists:
        tail = ([ln for ln in said if ln.startswith("rkdet-run")] or said or ["no output"])[-1][:200]
        raise BoardError(f"{label}: the runner produced no results (exit {code}): {tail}")
    if code not in (0, 1):
        tail = [ln for ln in said if ln.startswith("rkdet-run")] or said
        how = f"exited {code}" if code is not None else "failed (no exit status: killed, or no disk to write it)"
        raise BoardError(f"{label}: rkdet-run {how}: {(tail or ['?'])[-1][:200]}")


def clock_changes(snapshots: Path, board: str) -> list[str]:
    """One warning per clock that moved away from its value at the start of the run (a thermal cap,
    a governor someone changed): pin checked the clocks once, the runner's snapshots saw the rest.
    A malformed snapshots.jsonl is the board's fault: BoardError naming the board and the line."""
    try:
        shots = read_snapshots(snapshots)
    except (SnapshotError, OSError) as err:
        raise BoardError(f"{board}: the board's result snapshots.jsonl is malformed ({err}); "
                         "the run's results cannot be trusted (a broken or hostile board?)") from None

    def clocks(shot: Snapshot) -> dict[str, tuple[int | None, str]]:
        found = {f"cpufreq/{name}": (v.cur, "kHz") for name, v in shot.cpu.items()}
        found.update({f"devfreq/{name}": (v.cur, "Hz") for name, v in shot.devfreq.items()})
        return found

    if len(shots) < 2:
        return []
    start = clocks(shots[0])
    warnings: list[str] = []
    for name, (first, unit) in sorted(start.items()):
        for shot in shots[1:]:
            now = clocks(shot).get(name, (first, unit))[0]
            if now != first:
                hottest = max((t for t in shot.thermal.values() if t is not None), default=None)
                where = f"run {shot.run}" if shot.run is not None else shot.at
                warnings.append(f"{name}: clock moved during the run, {first} -> {now} {unit} by {where}"
                                + (f" (hottest zone {hottest / 1000:g} C)" if hottest is not None else "")
                                + "; latency and results after that point ran at another clock")
                break
    return warnings
