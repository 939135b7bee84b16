"""Host side of the board scripts: where they are, what to push, and what their output means.

The scripts in ``board_scripts/`` are the only shell code that runs on a board. They print JSON
Lines (one record per line, each with ``record`` and ``script`` keys) and exit with the codes in
their header comments. This module turns that output into typed reports, builds the quoted remote
command line, and runs a script locally against a fake root (tests, the emulator).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.errors import InputError
from rkdet.link.shell import remote_command
from rkdet.records.probe import ScriptReport, records_of, script_result

SCRIPT_NAMES = ("probe", "pin", "restore", "run-pinned", "run-steps")
# Everything deploy must push, helpers first (the entry points source them from their own dir).
SCRIPT_FILES = ("lib.sh", "knobs.sh", "lock.sh", "probe.sh", "pin.sh", "restore.sh", "run-pinned.sh",
                "run-steps.sh")
# Settings pin.sh (and run-pinned.sh) read from the environment; documented in pin.sh.
PIN_SETTINGS = (
    "RKDET_CPU_GOVERNOR", "RKDET_CPU_FREQ", "RKDET_NPU_FREQ", "RKDET_GPU_FREQ", "RKDET_DDR_FREQ",
    "RKDET_COMPACTION", "RKDET_THP", "RKDET_CPUIDLE_DEEP", "RKDET_PIN_STRICT", "RKDET_KILL_GRACE",
)
# run-pinned.sh's board lock (lock.sh): how long to wait for it, and who this job is in its holder record.
LOCK_SETTINGS = ("RKDET_LOCK_TIMEOUT", "RKDET_LOCK_HOLDER", "RKDET_LOCK_BUILD", "RKDET_LOCK_RUN")
BOARD_ENV = ("RKDET_ROOT", "RKDET_STATE_DIR", "RKDET_WORK_DIR", "RKDET_PYTHON") + PIN_SETTINGS + LOCK_SETTINGS
DEFAULT_STATE_DIR = "/run/rkdet"


def board_scripts_dir() -> Path:
    """Where the board scripts are: inside the installed package (a wheel packages the repository's
    ``board_scripts/`` as ``rkdet/board_scripts/`` at build time), else the source checkout's copy."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "board_scripts", package.parent / "board_scripts"):
        if (candidate / "pin.sh").is_file():
            return candidate
    raise InputError(f"board scripts not found in {package / 'board_scripts'} or {package.parent / 'board_scripts'}; "
                     "reinstall rkdet from its wheel, or run it from a source checkout")


def script_path(name: str) -> Path:
    """Path of one entry-point script by name ("probe", "pin", "restore", "run-pinned")."""
    if name not in SCRIPT_NAMES:
        raise InputError(f"unknown board script {name!r}; known: {', '.join(SCRIPT_NAMES)}")
    return board_scripts_dir() / f"{name}.sh"


def deploy_files() -> list[Path]:
    """Every file deploy must push to the board's script directory, in a stable order."""
    base = board_scripts_dir()
    missing = [f for f in SCRIPT_FILES if not (base / f).is_file()]
    if missing:
        raise InputError(f"{base}: missing {', '.join(missing)}; the checkout is incomplete")
    return [base / f for f in SCRIPT_FILES]


def check_board_env(env: Mapping[str, object]) -> dict[str, str]:
    """Validate setting names (typos would be silently ignored by the scripts) and stringify."""
    unknown = sorted(set(env) - set(BOARD_ENV))
    if unknown:
        raise InputError(f"unknown board setting(s) {', '.join(unknown)}; known: {', '.join(BOARD_ENV)}")
    return {k: str(v) for k, v in env.items() if v is not None}


def board_command(name: str, scripts_dir: str, env: Mapping[str, object] | None = None,
                  args: Sequence[str] = (), shell: str = "sh") -> str:
    """The remote command line running one script, every argument shell-quoted.

    ``env`` entries become ``NAME=value`` assignments in front (via ``env``, so any login shell
    works); ``args`` follow the script (run-pinned.sh takes the command to run).
    """
    if name not in SCRIPT_NAMES:
        raise InputError(f"unknown board script {name!r}; known: {', '.join(SCRIPT_NAMES)}")
    assigns = [f"{k}={v}" for k, v in check_board_env(env or {}).items()]
    parts = (["env", *assigns] if assigns else []) + shlex.split(shell)
    parts += [f"{scripts_dir.rstrip('/')}/{name}.sh", *(["--"] if name == "run-pinned" and args else []), *args]
    return remote_command(parts)


# ---- output parsing ---------------------------------------------------------------------------


def parse_records(text: str | bytes) -> list[dict[str, Any]]:
    """The JSON records in a script's output, in order.

    Lines that are not records (a child's own output under run-pinned.sh) are skipped, and so is
    a final line without its newline (the run was cut off mid-write).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = text.split("\n")
    records = []
    for line in lines[:-1]:  # the last element is "" or an unterminated line
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "record" in obj and "script" in obj:
            records.append(obj)
    return records


@dataclass(frozen=True)
class KnobResult:
    """One knob after pin (set / skipped / failed) or one file after restore (restored / failed)."""

    knob: str
    status: str
    cls: str = ""
    wanted: str | None = None
    actual: str | None = None
    reason: str | None = None
    warning: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> KnobResult:
        known = {"record", "script", "knob", "status", "class", "wanted", "actual", "reason", "warning"}
        return cls(knob=str(rec.get("knob", "")), status=str(rec.get("status", "")), cls=str(rec.get("class", "")),
                   wanted=rec.get("wanted"), actual=rec.get("actual"), reason=rec.get("reason"),
                   warning=rec.get("warning"), detail={k: v for k, v in rec.items() if k not in known})


@dataclass(frozen=True)
class PinReport(ScriptReport):
    """pin.sh's answer: per-knob results and whether a state was saved or an older one kept."""

    knobs: tuple[KnobResult, ...] = ()
    state: str | None = None  # "saved" | "kept" | None (refused before saving)
    rolled_back: bool = False

    def by_status(self, status: str) -> list[KnobResult]:
        return [k for k in self.knobs if k.status == status]

    @property
    def warnings(self) -> list[str]:
        return [f"{k.knob}: {k.warning}" for k in self.knobs if k.warning]

    def knob(self, knob: str) -> KnobResult | None:
        return next((k for k in self.knobs if k.knob == knob), None)

    def of_class(self, cls: str) -> list[KnobResult]:
        return [k for k in self.knobs if k.cls == cls]


@dataclass(frozen=True)
class RestoreReport(ScriptReport):
    """restore.sh's answer: one result per saved file."""

    knobs: tuple[KnobResult, ...] = ()

    @property
    def nothing_to_restore(self) -> bool:
        return self.ok and not self.knobs and "nothing to restore" in (self.note or "")


def parse_pin(records: Sequence[Mapping[str, Any]]) -> PinReport:
    """Typed view of pin.sh's records (pass run-pinned output through as is)."""
    own = records_of(records, "pin")
    status, code, reason, note = script_result(own)
    states = [r.get("status") for r in own if r.get("record") == "state"]
    return PinReport(script="pin", status=status, exit_code=code, reason=reason, note=note,
                     knobs=tuple(KnobResult.from_record(r) for r in own if r.get("record") == "knob"),
                     state=states[-1] if states else None,
                     rolled_back=any(r.get("script") == "pin-rollback" for r in records))


def parse_restore(records: Sequence[Mapping[str, Any]]) -> RestoreReport:
    """Typed view of restore.sh's records."""
    own = records_of(records, "restore")
    status, code, reason, note = script_result(own)
    return RestoreReport(script="restore", status=status, exit_code=code, reason=reason, note=note,
                         knobs=tuple(KnobResult.from_record(r) for r in own if r.get("record") == "knob"))


STEP_SCRIPT = "run-steps"  # several runners in one pinned job (a session of backends): its records


def step_exits(records: Sequence[Mapping[str, Any]]) -> dict[int, int | None]:
    """run-steps.sh's steps by index: the exit status of each step that ended, None for one that started
    and never said it ended (stopped, or the log was cut); a step that never started is absent."""
    found: dict[int, int | None] = {}
    for rec in records_of(records, STEP_SCRIPT):
        index = rec.get("index")
        if rec.get("record") != "step" or not isinstance(index, int) or isinstance(index, bool) or index < 0:
            continue
        code = rec.get("exit")
        if rec.get("status") == "exited" and isinstance(code, int) and not isinstance(code, bool):
            found[index] = code
        else:
            found.setdefault(index, None)
    return found


def step_lines(text: str, index: int) -> str:
    """The job log as step `index` saw it: every record and every line outside a step (pin, restore, the
    lock), and the lines its own command wrote; another step's output is left out (each backend's
    job.log and error tail name only its own runner)."""
    keep: list[str] = []
    current: int | None = None
    for line in text.splitlines(keepends=True):
        rec = parse_records(line)
        if rec and rec[0].get("script") == STEP_SCRIPT and rec[0].get("record") == "step":
            at = rec[0].get("index")
            current = at if rec[0].get("status") == "started" and isinstance(at, int) else None
            if at == index:
                keep.append(line)
            continue
        if (rec and rec[0].get("script") == STEP_SCRIPT) or current is None or current == index:
            keep.append(line)
    return "".join(keep)


def with_runner_output(text: str, output: str, index: int | None) -> str:
    """The job log with a runner's own output (its file on the board) where the runner ran: after the record of
    its start (run-steps.sh's step `index`, or run-pinned.sh's child for a plain run: `None`), else at the end."""
    if not output:
        return text
    if not output.endswith("\n"):
        output += "\n"
    lines = text.splitlines(keepends=True)
    for at, line in enumerate(lines):
        rec = parse_records(line)
        if rec and rec[0].get("status") == "started" and (
                (index is None and (rec[0].get("script"), rec[0].get("record")) == ("run-pinned", "child"))
                or (index is not None and rec[0].get("script") == STEP_SCRIPT and rec[0].get("record") == "step"
                    and rec[0].get("index") == index)):
            return "".join([*lines[:at + 1], output, *lines[at + 1:]])
    return text + ("" if not text or text.endswith("\n") else "\n") + output


# ---- running locally against a fake root ------------------------------------------------------


@dataclass(frozen=True)
class ScriptRun:
    """One local run of a board script: exit status, parsed records and the raw streams."""

    returncode: int
    records: list[dict[str, Any]]
    stdout: str
    stderr: str


def local_command(name: str, shell: str = "sh", args: Sequence[str] = (),
                  prefix: Sequence[str] = ()) -> list[str]:
    """argv running one script with a given shell ("dash", "busybox sh", "bash --posix")."""
    return [*prefix, *shlex.split(shell), str(script_path(name)), *args]


def script_env(root: os.PathLike[str] | str, state_dir: os.PathLike[str] | str,
               env: Mapping[str, object] | None = None) -> dict[str, str]:
    """A small, explicit environment: PATH, C locale, the root prefix and state dir, settings."""
    base = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "LC_ALL": "C",
            "RKDET_ROOT": str(root), "RKDET_STATE_DIR": str(state_dir)}
    extra = dict(env or {})
    # RKDET_* names are checked (a typo would be silently ignored); others pass, e.g. HOME.
    base.update(check_board_env({k: v for k, v in extra.items() if k.startswith("RKDET_")}))
    base.update({k: str(v) for k, v in extra.items() if not k.startswith("RKDET_") and v is not None})
    return base


def run_script_locally_full(name: str, root: os.PathLike[str] | str, state_dir: os.PathLike[str] | str,
                          shell: str = "sh", env: Mapping[str, object] | None = None,
                          args: Sequence[str] = (), prefix: Sequence[str] = (),
                          timeout: float = 120.0) -> ScriptRun:
    """Run a board script locally with ``RKDET_ROOT=root``; ``prefix`` wraps it (e.g. setpriv)."""
    proc = subprocess.run(local_command(name, shell, args, prefix), env=script_env(root, state_dir, env),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    out = proc.stdout.decode("utf-8", errors="replace")
    return ScriptRun(proc.returncode, parse_records(out), out, proc.stderr.decode("utf-8", errors="replace"))


def run_script_locally(name: str, root: os.PathLike[str] | str, state_dir: os.PathLike[str] | str,
                     shell: str = "sh", env: Mapping[str, object] | None = None,
                     args: Sequence[str] = ()) -> tuple[int, list[dict[str, Any]]]:
    """Run a board script locally against a fake root: (exit status, its JSON records)."""
    run = run_script_locally_full(name, root, state_dir, shell=shell, env=env, args=args)
    return run.returncode, run.records
