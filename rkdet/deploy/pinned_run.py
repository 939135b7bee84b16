"""The run on the board as one detached job: start it pinned, follow it, stop it (a busy board is refused
by run-pinned.sh's board lock, read by lock.py).

Why its own module: a run is `run-pinned.sh -- rkdet-run ...` started detached (jobs.py), so the
board is restored from run-pinned's trap even when this host disappears; deploy, `--resume` and a
fleet scheduler start, follow and stop it the same way. Following it is `jobs.wait` (the one polling
loop) asking, in the same round trip as the liveness check, how many index records the runner wrote.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterator, Sequence

from rkdet.backends.registry import backend
from rkdet.link import jobs
from rkdet.link.jobs import DetachedJob
from rkdet.deploy.layout import RemoteLayout
from rkdet.boardinfo.remote_scripts import SESSION_ENV
from rkdet.deploy.settings import RunSettings
from rkdet.link.shell import QUICK_S, CommandRunner
from rkdet.log import Log, ProgressThrottle



# a command's stdout and stderr into the file $1, in the same process (sh execs it: its pid is the runner's).
# A blank line first: the file's first page (block) is taken while the work dir still has room, so a disk filled
# during the run still takes the runner's last words (its ENOSPC message), as the job's log (written to since
# pin) does; a blank line is no line of the runner's.
_OUTPUT_TO = 'o=$1; shift; echo > "$o"; exec "$@" >> "$o" 2>&1'


def output_to(path: str, argv: Sequence[str]) -> list[str]:
    """`argv` writing its output to the board file `path` instead of the job's log: the log keeps only the
    board scripts' records, which a chatty runner can then never push out of the log's capped read."""
    return ["sh", "-c", _OUTPUT_TO, "sh", path, *argv]


def pinned_command(program: str, scripts_dir: str, settings: RunSettings, model: str, inputs: str, out: str, *,
                   core_mask: str, warmup: int, snapshot_every: int, affinity: bool = True,
                   extra: Sequence[str] = (), output: str | None = None) -> list[str]:
    """THE recipe "run the on-board program pinned" (deploy's runs and the bisection's): the backend's
    runner command (rkdet.backends) for one run of `model`, inside run-pinned.sh when `settings.pin`
    (pin, run, restore: also on a dropped link). `extra`: the model's identity and the cell flags; `output`:
    a board file for the runner's own output (`output_to`), else it goes where the job's output goes."""
    desc = backend(settings.backend)
    args = desc.runner_args(model, inputs, out, repeats=settings.repeats, warmup=warmup, core_mask=core_mask,
                            snapshot_every=snapshot_every)
    args += desc.setting_args(settings.runner_settings)
    if affinity and settings.cpu_affinity:
        args += ["--cpu-affinity", ",".join(map(str, settings.cpu_affinity))]
    argv = desc.runner_command(program, [*args, *extra])
    if output is not None:
        argv = output_to(output, argv)
    if settings.pin:
        argv = ["sh", f"{scripts_dir}/run-pinned.sh", "--", *argv]
    return argv


def pinned_env(settings: RunSettings, workdir: str, state_dir: str) -> dict[str, str]:
    """THE run's environment (deploy's and the bisection's): the backend's runner environment, the pin
    settings, where pin keeps state, the work dir, a test fault of the emulated runtime."""
    env = {**backend(settings.backend).runner_env, **settings.pin_env}
    env["RKDET_STATE_DIR"] = state_dir
    env["RKDET_WORK_DIR"] = workdir
    if settings.fault:
        env["RKDET_EMU_FAULT"] = settings.fault
    return env


def runner_argv(layout: RemoteLayout, settings: RunSettings, extra: Sequence[str] = ()) -> list[str]:
    """rkdet-run's command line for this run (the recipe, `pinned_command`), its output in `layout.runner_log`;
    `extra`: the model's identity and the cell flags (`stack.model_expectations`, `cells.cell_args`)."""
    return pinned_command(layout.runner, layout.scripts, settings, layout.model(settings.backend), layout.inputs,
                          layout.result, core_mask=settings.core_mask, warmup=settings.warmup,
                          snapshot_every=settings.snapshot_every, extra=extra, output=layout.runner_log)


def job_env(settings: RunSettings, layout: RemoteLayout, state_dir: str) -> dict[str, str]:
    """The job's environment: pin settings, where pin keeps state, the work dir, a test fault."""
    return pinned_env(settings, layout.workdir, state_dir)


def start(conn: CommandRunner, layout: RemoteLayout, settings: RunSettings, env: dict[str, str],
          start_timeout: float = 35.0, extra: Sequence[str] = ()) -> DetachedJob:
    """Create the run folder and start the (pinned) runner detached."""
    conn.run(["mkdir", "-p", layout.run_dir], timeout=QUICK_S)
    return jobs.start(conn, runner_argv(layout, settings, extra), layout.pidfile, layout.logfile, sudo=settings.sudo,
                      env=env, keep_env=SESSION_ENV if settings.sudo else (), timeout=start_timeout)


def steps_argv(scripts_dir: str, pin: bool, steps: Sequence[Sequence[str]]) -> list[str]:
    """Several runner commands as ONE job: run-steps.sh runs them one after the other (count-prefixed, no
    separator word), inside one run-pinned.sh when `pin`: one lock, one pin, one restore for all of them."""
    argv = ["sh", f"{scripts_dir}/run-steps.sh"]
    for step in steps:
        argv += [str(len(step)), *step]
    return ["sh", f"{scripts_dir}/run-pinned.sh", "--", *argv] if pin else argv


def start_steps(conn: CommandRunner, layouts: Sequence[RemoteLayout], settings: Sequence[RunSettings],
                extras: Sequence[Sequence[str]], env: dict[str, str], start_timeout: float = 35.0) -> DetachedJob:
    """A session's runs (one per layout, each its own settings and runner) started as one detached
    (pinned) job: every run folder made first; the job's pid file and log are the session's (`layouts[0]`)."""
    first, lead = layouts[0], settings[0]
    assert all(x.pidfile == first.pidfile and x.logfile == first.logfile for x in layouts), "one job per session"
    conn.run(["mkdir", "-p", *[x.run_dir for x in layouts]], timeout=QUICK_S)
    steps = [runner_argv(x, replace(s, pin=False), e) for x, s, e in zip(layouts, settings, extras)]
    return jobs.start(conn, steps_argv(first.scripts, lead.pin, steps), first.pidfile, first.logfile,
                      sudo=lead.sudo, env=env, keep_env=SESSION_ENV if lead.sudo else (), timeout=start_timeout)


@contextmanager
def progress_bar(enabled: bool, total: int) -> Iterator[Callable[[int], None] | None]:
    """A live bar of inferences done on a terminal; None (plain log lines) otherwise."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("inference"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("run", total=total)
        yield lambda done: bar.update(task, completed=done)


POLL_MAX_S = 1.0  # the longest pause between two polls of a running job
# the runners' index records so far (one result set, or each of a session's)
_COUNT = 'n=0; for f do if [ -f "$f" ]; then n=$((n + $(wc -l < "$f"))); fi; done; echo "$n"'


def wait(conn: CommandRunner, job: DetachedJob, layout: RemoteLayout, timeout: float, total: int,
         progress: bool, log: Log, results: Sequence[str] = ()) -> int | None:
    """Follow the job until it ends (inferences done so far: a bar, or log lines); its exit code.
    `results`: a session's result sets (every step's inferences count), else `layout.result`."""
    last = -1
    throttle = ProgressThrottle(total)  # off a terminal: a line at most every 10 % or 10 s

    with progress_bar(progress, total) as advance:
        def count(out: str) -> None:
            nonlocal last
            done = int(out.strip()) if out.strip().isdigit() else 0
            if done != last:
                if advance is not None:
                    advance(done)
                elif throttle.due(done):
                    log(f"inference {done}/{total}")
                last = done

        # liveness and the count in one round trip per poll, every 0.2 s at first and at most every
        # POLL_MAX_S: each poll is an SSH session (sshd's fork, a shell) per board (bench/results/fleet.md)
        return jobs.wait(conn, job, timeout, poll=0.2, max_poll=POLL_MAX_S, on_report=count,
                         report=(_COUNT, *[f"{r}/index.jsonl" for r in results or [layout.result]]),
                         still_running=f"run still going after {timeout:g} s; it continues on the board: "
                                       "rkdet deploy --resume later")


# the run is over when its group is gone, or restore's result record is in its log
_DONE = ('kill -0 -"$1" 2>/dev/null || exit 0; '
         'grep -qF \'"record":"result","script":"restore"\' "$2" 2>/dev/null && exit 0; exit 1')


def stop(conn: CommandRunner, job: DetachedJob, log: Log, timeout: float = 120.0) -> None:
    """SIGTERM the job's process group, then wait until the board is restored (or the group is gone).

    Not `jobs.kill`: the group's leader (the detach wrapper) dies at once while run-pinned.sh is
    still restoring from its TERM trap, so its log is complete only when restore's result record
    is in it (run-pinned's kill-timer `sleep` may outlive it, so an empty group comes later); and
    never SIGKILL, which would cut the restore in half.
    """
    jobs.signal(conn, job, "TERM", timeout=QUICK_S)
    deadline = time.monotonic() + timeout
    while conn.run(["sh", "-c", _DONE, "sh", str(job.pid), job.logfile], check=False, sudo=job.sudo,
                   timeout=QUICK_S).rc != 0:
        if time.monotonic() > deadline:
            log(f"the board job {job.pid} still runs {timeout:g} s after SIGTERM; leaving it to finish")
            return
        time.sleep(0.2)
