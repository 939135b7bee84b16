"""Run a toolkit worker in a hermetic subprocess: fixed env, locale, TZ, cwd, seeds, no ASLR, one CPU.

Measured on rknn-toolkit2 2.5.0 (docs/RKNN_FORMAT.md): plain identical builds differ in bytes (host
pointers in per-task tables, uninitialised buffer tails). With ASLR off (`setarch -R`),
`PYTHONHASHSEED=0` and an identical environment and cwd, 24 of 26 builds were byte-identical: the
essentials are those three; `MALLOC_PERTURB_` is kept because it makes uninitialised tails a
recognisable pattern, `taskset -c 0` and one-thread BLAS because they cost nothing and remove a source
of scheduling variance. It is not a guarantee, which is why builds are compared by fingerprint.
The work folder's path is part of the environment, so it is derived from the build's input
fingerprint, and locked while in use.
"""

from __future__ import annotations

import fcntl
import os
import platform
import shutil
import stat
import subprocess
import tempfile
import time
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from rkdet.convert import toolkit_progress
from rkdet.errors import ConversionError

HERMETIC_ENV = {
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
    "MALLOC_PERTURB_": "165",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "",
}
# Passed through when set, because they change how numeric libraries pick kernels (recorded too).
PASS_THROUGH = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "SOURCE_DATE_EPOCH")


@dataclass(frozen=True)
class HermeticRun:
    """What the worker process returned, and the environment it ran in (for the manifest)."""

    returncode: int
    log: str
    env: dict[str, str]
    argv_prefix: tuple[str, ...]


BUILD_CPU_VAR = "RKDET_BUILD_CPU"


def build_cpu() -> int:
    """The one CPU a build runs on: `RKDET_BUILD_CPU` when set (one of the CPUs this process may use), else
    the lowest of them (a cpuset may exclude CPU 0). Which CPU does not change the build (docs/RKNN_FORMAT.md:
    `taskset` does not help byte identity, and it is recorded, never fingerprinted); naming another one lets
    builds that run at the same time use different cores instead of queueing on the lowest."""
    allowed = sorted(os.sched_getaffinity(0))
    chosen = os.environ.get(BUILD_CPU_VAR, "").strip()
    if not chosen:
        return allowed[0]
    if not chosen.isdigit() or int(chosen) not in allowed:
        raise ConversionError(f"{BUILD_CPU_VAR}={chosen!r} is not a CPU this process may run on; "
                              f"use one of {','.join(map(str, allowed))} or unset it")
    return int(chosen)


def _wrappers() -> tuple[str, ...]:
    """`setarch <arch> -R taskset -c <build_cpu()>` where available (recorded either way)."""
    prefix: list[str] = []
    if shutil.which("setarch"):
        prefix += ["setarch", platform.machine(), "-R"]
    if shutil.which("taskset"):
        prefix += ["taskset", "-c", str(build_cpu())]
    return tuple(prefix)


def hermetic_env(home: Path, python: str) -> dict[str, str]:
    env = dict(HERMETIC_ENV)
    env["PATH"] = f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin"
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home)
    for key in PASS_THROUGH:
        if key in os.environ:
            env[key] = os.environ[key]
    return env


@contextmanager
def work_folder(key: str) -> Iterator[Path]:
    """An empty, locked folder at a path that depends only on `key` (a digest of the build's inputs)."""
    base = Path(tempfile.gettempdir()) / f"rkdet-hermetic-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ConversionError(f"{base}: hermetic build folder is not a private directory of this user; "
                              "remove it (another user may have created it)")
    folder = base / key[:24]
    sweep_stale_locks(base)
    with open(base / f"{key[:24]}.lock", "w") as lock:  # "w": every use refreshes its mtime (see the sweep)
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            (folder / "home").mkdir()
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


STALE_LOCK_S = 3600  # a lock file nobody opened for this long has no holder and no waiter


def sweep_stale_locks(base: Path, now: float | None = None) -> int:
    """Remove the lock files of earlier builds, so converts do not leave one empty file each. Only a file
    no one has opened for STALE_LOCK_S (each opener truncates it, refreshing its mtime, before it waits)
    and that can be locked without waiting is removed, while locked: a waiter always holds a fresh file."""
    now = time.time() if now is None else now
    removed = 0
    for path in base.glob("*.lock"):
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < STALE_LOCK_S:
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held, again = os.fstat(fd), os.lstat(path)
            if (held.st_dev, held.st_ino) == (again.st_dev, again.st_ino) and now - again.st_mtime >= STALE_LOCK_S:
                os.unlink(path)
                removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


class DeadlineReached(ConversionError):
    """A watched build stopped at its deadline (the search's budget), not failed by the toolkit."""


@dataclass(frozen=True)
class BuildWatch:
    """How the host waits on a build: the toolkit's progress lines to `progress`, a stop at `deadline`
    (on `clock`'s scale: the search's injected clock), a look every `interval` seconds."""

    progress: Callable[[str], None] | None = None
    deadline: float | None = None
    clock: Callable[[], float] = time.monotonic
    interval: float = 2.0


class Worker:
    """A toolkit worker started early, in its hermetic folder: it imports the toolkit (torch, ~2 s)
    while the host still prepares the job, then builds when `go()` says the job file is complete.

    The worker blocks on one line from stdin (no polling, so its heap history does not depend on how
    long it waited); EOF without "go" makes it exit 2 without building. Its output goes to
    `worker.log` in the folder (a pipe could fill up and stall it).
    """

    def __init__(self, folder: Path, python: str, script: Path, job_file: str) -> None:
        self.env = hermetic_env(folder / "home", python)
        self.prefix = _wrappers()
        self.folder = folder
        self._log_path = folder / "worker.log"
        argv = [*self.prefix, python, str(script), job_file]
        self._log = open(self._log_path, "wb")
        try:
            self.proc = subprocess.Popen(argv, cwd=folder, env=self.env, stdin=subprocess.PIPE, stdout=self._log,
                                         stderr=subprocess.STDOUT)
        except OSError as exc:
            self._log.close()
            raise ConversionError(f"cannot start the toolkit worker ({python}): {exc.strerror}") from None

    def go(self, timeout: float = 3600, watch: BuildWatch | None = None) -> HermeticRun:
        """Tell the worker its job is written; wait for it; return its exit code and log. With `watch`, the
        toolkit's own progress is reported while it builds and the build is stopped at the watch's deadline."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # it already exited (e.g. the toolkit failed to import): its log says why
        try:
            returncode = self.proc.wait(timeout=timeout) if watch is None else self._watch(timeout, watch)
        except subprocess.TimeoutExpired:
            self.cancel()
            raise ConversionError(f"toolkit build timed out after {timeout:.0f} s") from None
        self._log.close()
        log = self._log_path.read_text(encoding="utf-8", errors="replace")
        return HermeticRun(returncode, log, self.env, self.prefix)

    def _watch(self, timeout: float, watch: BuildWatch) -> int:
        """Wait in short steps: report each new toolkit progress line, stop the build at the deadline."""
        waited, shown = 0.0, None
        while True:
            if watch.deadline is not None and watch.clock() >= watch.deadline:
                self.cancel()
                last = toolkit_progress.read(self._log_path)
                raise DeadlineReached("the search budget ran out during this build"
                                      + (f" ({last.line()})" if last else ""))
            try:
                return self.proc.wait(timeout=min(watch.interval, max(timeout - waited, 0.001)))
            except subprocess.TimeoutExpired:
                waited += watch.interval
                if waited >= timeout:
                    raise
            state = toolkit_progress.read(self._log_path)
            if state is not None and watch.progress is not None and state.line() != shown:
                shown = state.line()
                watch.progress(shown)

    def cancel(self) -> None:
        """Stop a worker whose job will never come (the host failed or was interrupted)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def run_worker(folder: Path, python: str, script: Path, job_file: str, timeout: float = 3600) -> HermeticRun:
    """Start a worker and let it build at once (the job file must already be written)."""
    return Worker(folder, python, script, job_file).go(timeout)


class ToolkitSession:
    """A locked hermetic folder with a worker already importing the toolkit in it; `close()` stops an
    unused worker and removes the folder (idempotent)."""

    def __init__(self, key: str, python: str, script: Path) -> None:
        self._stack = ExitStack()
        try:
            self.folder = self._stack.enter_context(work_folder(key))
            self.worker = Worker(self.folder, python, script, "job.json")
            self._stack.callback(self.worker.cancel)
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "ToolkitSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
