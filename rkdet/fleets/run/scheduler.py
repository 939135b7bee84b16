"""Run a job per board, `forks` at a time: canary boards first, `--max-fail-percent`, Ctrl-C.

Why threads, not processes: a board's deploy is waiting on SSH nearly all the time (paramiko and
hashlib release the GIL), and one process holds one copy of numpy, paramiko and the diff for all
boards (bench/results/fleet.md: 16 boards in one process). A board that fails never stalls the
others: each job has its own timeouts (SSH connect/answer timeouts, the run's timeout, the board's
budget) and its own failure, caught in the job.

- canary: the first `canary` boards run alone first; if every one of them fails, no other board is
  started (a broken build fails once, not fifty times). A canary that runs but disagrees is no reason
  to stop: that is a finding.
- max_fail_percent: once more than that share of all boards has failed, no new board is started;
  the running ones finish (and restore their boards).
- Ctrl-C (KeyboardInterrupt, in the main thread): no new board or cell is started; the running cells
  finish, so each pinned board is restored by its own run; then the boards not run are reported.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from rkdet.fleets.run.records import BOARD_FAILED, BOARD_NOT_STARTED, BoardResult
from rkdet.log import Log

Job = Callable[[BoardResult, threading.Event], BoardResult]


@dataclass
class Schedule:
    forks: int = 8
    canary: int = 1
    max_fail_percent: float = 100.0


M_ARENA_MAX = -8  # glibc's mallopt parameter


def limit_malloc_arenas(arenas: int = 1) -> bool:
    """Cap glibc's malloc arenas before the board threads start.

    Why: glibc gives each thread an arena of its own and an arena keeps the memory of its peak, so
    16 board threads, each judging its run once (~50 MB of arrays, one after another), held 16 peaks:
    921 MB at 16 boards, 176 MB with one shared arena (bench/results/fleet.md). Best effort: a libc
    without mallopt (musl) is left as it is."""
    try:
        return bool(ctypes.CDLL(None).mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        return False


def _exceeded(results: list[BoardResult], limit: float) -> bool:
    failed = sum(r.status == BOARD_FAILED for r in results)
    return failed * 100.0 > limit * len(results)


def run_all(results: list[BoardResult], job: Job, schedule: Schedule, log: Log) -> bool:
    """Run `job` on each board's record (filled in place); True when interrupted by Ctrl-C."""
    limit_malloc_arenas()
    stop = threading.Event()
    canaries = results[:schedule.canary] if len(results) > schedule.canary > 0 else []
    for r in canaries:
        r.canary = True
    interrupted = False
    with ThreadPoolExecutor(max_workers=max(1, schedule.forks), thread_name_prefix="rkdet-board") as pool:
        for batch, after in ((canaries, "canary"), ([r for r in results if not r.canary], None)):
            if not batch:
                continue
            if after is None and canaries and all(r.status == BOARD_FAILED for r in canaries):
                reason = ("the canary board failed: " if len(canaries) == 1 else "every canary board failed: ") + \
                    "; ".join(f"{r.board.name}: {r.reason}" for r in canaries)
                log(f"not starting the other {len(batch)} board(s): {reason}")
                for r in batch:
                    r.reason = reason[:600]
                break
            interrupted = _run_batch(pool, batch, results, job, schedule, stop, log) or interrupted
            if interrupted:
                break
    for r in results:
        if r.status == BOARD_NOT_STARTED and not r.reason:
            r.reason = "interrupted (Ctrl-C) before it started" if interrupted else "not started"
    return interrupted


def _run_batch(pool: ThreadPoolExecutor, batch: list[BoardResult], everyone: list[BoardResult], job: Job,
               schedule: Schedule, stop: threading.Event, log: Log) -> bool:
    pending = list(batch)
    running: dict[Future[BoardResult], BoardResult] = {}
    interrupted = False
    stopped_for_failures = False
    while pending or running:
        while pending and len(running) < schedule.forks and not stop.is_set():
            if _exceeded(everyone, schedule.max_fail_percent):
                if not stopped_for_failures:
                    failed = sum(r.status == BOARD_FAILED for r in everyone)
                    log(f"{failed} of {len(everyone)} boards failed (over --max-fail-percent "
                        f"{schedule.max_fail_percent:g}): starting no more boards; {len(running)} running finish")
                    stopped_for_failures = True
                for r in pending:
                    r.reason = (f"not started: more than {schedule.max_fail_percent:g}% of the boards had failed "
                                "(--max-fail-percent)")
                pending = []
                break
            r = pending.pop(0)
            running[pool.submit(job, r, stop)] = r
        if not running:
            break
        try:
            done, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
        except KeyboardInterrupt:
            if not stop.is_set():
                stop.set()
                interrupted = True
                log(f"interrupted: starting nothing new; waiting for {len(running)} running board(s) to finish "
                    "their cell and restore")
                pending = []
            continue
        for f in done:
            r = running.pop(f)
            exc = f.exception()
            if exc is not None:  # the job catches a board's failures; this is a bug, said as the board's failure
                r.status, r.reason = BOARD_FAILED, f"{type(exc).__name__}: {exc}"
    return interrupted
