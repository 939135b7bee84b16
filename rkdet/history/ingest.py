"""Read one deploy run folder (results/<board>/<fingerprint16>/<run-id>/) into a `RunRecord`.

Everything here is untrusted (a board wrote board.json and the result set; a folder may be
crafted): every file is size-bounded before it is parsed, every field is type-checked, and
trouble is one line naming the file (exit 2). A field the folder does not record is None
("unknown"), never guessed. The result set is read with rkdet's own loader
(`rkdet.diff.resultset`), deploy.json, board.json and cells.json through their records (`rkdet.records`:
`read_deploy_record`, `read_probe`, `read_cells`), and "distinct output sets" is the runner's own definition
(`rkdet.onboard.resultset.Summary`), so history and `rkdet diff` cannot disagree about a run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.onboard.backend_table import DEFAULT_BACKEND
from rkdet.diff.resultset import ResultSetDir
from rkdet.errors import InputError, RkdetError
from rkdet.records.cell import read_cells
from rkdet.records.deploy_record import DeployRecord, DeployStatus, read_deploy_record
from rkdet.records.ids import check_run_id
from rkdet.records.io import MAX_RUN_RECORD, iter_jsonl
from rkdet.records.probe import ProbeReport, read_probe
from rkdet.onboard.resultset import Summary

MAX_INDEX_BYTES = 1 << 30  # index.jsonl: ~100k inferences x 8 inputs fit in a fraction of this
MAX_SNAPSHOT_BYTES = 64 << 20
MAX_INPUTS = 100_000
MAX_OUTPUTS = 1024
MAX_TEXT = 512
_HASH = re.compile(r"^[0-9a-f]{64}$")
_FINGERPRINT = re.compile(r"^[0-9a-f]{16,128}$")
_NAME = re.compile(r"^[^\x00-\x1f\x7f/\\]{1,256}$")


@dataclass(frozen=True)
class BoardIdentity:
    """Who the board is, stable across address changes. `key` is what runs are grouped by."""

    key: str
    soc: str | None
    serial: str | None  # probe.sh's identity record: the device-tree serial-number
    machine_id: str | None  # probe.sh's identity record: /etc/machine-id
    label: str  # the results folder name (deploy derives it from the address)
    identified_by: str  # "serial" | "machine-id" | "label"


@dataclass(frozen=True)
class BoardState:
    """What the board was running at that run; a change here is what drift reports point at."""

    kernel: str | None
    driver: str | None  # rknpu driver version (debugfs), when readable
    runtime: str | None  # librknnrt / librknn_runtime version string
    model: str | None  # device-tree model string
    clocks: tuple[tuple[str, str], ...]  # ("devfreq/fdab0000.npu", "1000000000 Hz performance"), at run start


@dataclass(frozen=True)
class OutputHash:
    """One output of an input's first inference in the run, and how many distinct output sets that input gave."""

    input: str
    position: int
    name: str
    hash: str
    distinct: int


@dataclass(frozen=True)
class RunRecord:
    """One completed deploy run, as the history database stores it."""

    folder: str  # relative to the results folder, "/"-separated (with result_set, the idempotent key)
    run_id: str
    board: BoardIdentity
    state: BoardState
    build: str  # the build fingerprint (full)
    core_mask: str
    backend: str
    started_unix: float | None
    status: str  # the result set's run.json status
    accepted: bool  # complete and every input gave one output set: may be a baseline
    deterministic: bool
    emulated: bool | None
    inferences: int
    outputs: tuple[OutputHash, ...]
    result_set: str = ""  # the cell's result set under result/ ("core-0_1_2"); "" = result/ itself (one set)
    session: str | None = None  # the pinned session it was one step of (deploy.json `session.id`); None: alone

    @property
    def cell(self) -> str:
        return f"{self.core_mask}/{self.backend}"

    @property
    def key(self) -> str:
        """The run's unique name: its folder, plus "#<cell>" for one cell of a multi-cell run folder."""
        return f"{self.folder}#{self.result_set}" if self.result_set else self.folder


def _bounded_size(path: Path, limit: int) -> None:
    """A run folder's file is a plain file (never a symlink) of at most `limit` bytes: checked before a
    reader opens it; the reading itself is `rkdet.records.io`'s (bounded lines and documents)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise InputError(f"{path}: missing; the run folder is incomplete") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    if not path.is_file() or path.is_symlink():
        raise InputError(f"{path}: not a regular file; a run folder holds plain files only")
    if st.st_size > limit:
        raise InputError(f"{path}: {st.st_size} bytes, more than the {limit >> 20} MiB a run file may have")




def _text(path: Path, key: str, value: Any, *, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise InputError(f"{path}: {key} must be text of 1 to {MAX_TEXT} characters")
    return value


def _deploy_record(path: Path) -> DeployRecord:
    """deploy.json through the one strict reader (rkdet/records/deploy_record.py), size-checked first."""
    _bounded_size(path, MAX_RUN_RECORD)
    try:
        return read_deploy_record(path)
    except FileNotFoundError:
        raise InputError(f"{path}: missing; the run folder is incomplete") from None


def _identity(board_json: Path, probe: ProbeReport, label: str) -> tuple[BoardIdentity, BoardState]:
    soc = _text(board_json, "soc", probe.soc)
    state = BoardState(kernel=_text(board_json, "kernel", probe.kernel),
                       driver=_text(board_json, "rknpu version", probe.rknpu_version),
                       runtime=_text(board_json, "runtime version", probe.runtime_version),
                       model=_text(board_json, "model", probe.model), clocks=())
    serial = _text(board_json, "serial", probe.serial)
    machine_id = _text(board_json, "machine_id", probe.machine_id)
    # what the board is, not where it is: the serial survives a reflash, the machine-id survives an address change
    if serial:
        key, how = f"{soc or 'unknown-soc'}:serial={serial}", "serial"
    elif machine_id:
        key, how = f"{soc or 'unknown-soc'}:machine-id={machine_id}", "machine-id"
    else:
        key, how = f"{soc or 'unknown-soc'}:label={label}", "label"
    return BoardIdentity(key=key, soc=soc, serial=serial, machine_id=machine_id, label=label, identified_by=how), state


def _clocks(snapshots: Path) -> tuple[tuple[str, str], ...]:
    """The clocks the runner saw at the start of the run (its "before" snapshot), flattened."""
    if not snapshots.exists():
        return ()
    _bounded_size(snapshots, MAX_SNAPSHOT_BYTES)  # each line is bounded by the one JSONL reader (records.io)
    first = next((rec for _, rec in iter_jsonl(snapshots) if rec.get("at") == "before"), None)
    if first is None:
        return ()
    found: dict[str, str] = {}
    for group, unit, field_name in (("cpu", "kHz", "cur_khz"), ("devfreq", "Hz", "cur_hz")):
        nodes = first.get(group) or {}
        if not isinstance(nodes, dict) or len(nodes) > 256:
            raise InputError(f"{snapshots}: {group} must be an object of at most 256 entries")
        for name, node in sorted(nodes.items()):
            if not isinstance(node, dict) or not _NAME.match(str(name)):
                raise InputError(f"{snapshots}: {group} entry {str(name)[:40]!r} is malformed")
            cur, gov = node.get(field_name), node.get("governor")
            if (cur is not None and (isinstance(cur, bool) or not isinstance(cur, int))) or \
                    (gov is not None and (not isinstance(gov, str) or len(gov) > 64)):
                raise InputError(f"{snapshots}: {group} {str(name)[:40]!r}: {field_name}/governor malformed")
            found[f"{'cpufreq' if group == 'cpu' else 'devfreq'}/{name}"] = \
                f"{'?' if cur is None else cur} {unit} {gov or '?'}".strip()
    return tuple(sorted(found.items()))


def _outputs(result: Path) -> tuple[ResultSetDir, tuple[OutputHash, ...], bool, int]:
    _bounded_size(result / "run.json", MAX_RUN_RECORD)
    _bounded_size(result / "index.jsonl", MAX_INDEX_BYTES)  # its lines: bounded by records.io.iter_jsonl
    source = ResultSetDir(result)
    index = result / "index.jsonl"
    summary = Summary()
    first: dict[str, tuple[tuple[int, str, str], ...]] = {}
    count = 0
    for rec in source.records():
        count += 1
        if len(rec.outputs) > MAX_OUTPUTS:
            raise InputError(f"{index}: an inference with more than {MAX_OUTPUTS} outputs")
        if not _NAME.match(rec.input):
            raise InputError(f"{index}: input name {rec.input[:40]!r} is not a plain name")
        for o in rec.outputs:
            if not _HASH.match(o.hash) or not _NAME.match(o.name):
                raise InputError(f"{index}: input {rec.input!r}: output {o.name[:40]!r} has a malformed name or hash")
        if rec.input not in first:
            if len(first) >= MAX_INPUTS:
                raise InputError(f"{index}: more than {MAX_INPUTS} distinct inputs")
            first[rec.input] = tuple((i, o.name, o.hash) for i, o in enumerate(rec.outputs))
        summary.add({"run": rec.run, "input": rec.input,
                     "outputs": [{"name": o.name, "hash": o.hash} for o in rec.outputs]})
    result_summary = summary.result()
    distinct = {name: entry["distinct"] for name, entry in result_summary["inputs"].items()}
    outs = tuple(OutputHash(name, pos, out_name, digest, distinct[name])
                 for name in sorted(first) for pos, out_name, digest in first[name])
    return source, outs, bool(result_summary["deterministic"]) and count > 0, count


def read_runs(results: Path, folder: Path) -> list[RunRecord]:
    """The records of one completed run folder: one for a single result set, one per completed cell of a
    multi-mask run (result/cells.json; skipped and failed cells have no outputs and are not records).
    InputError naming the file if anything is malformed."""
    deploy_json = folder / "deploy.json"
    deploy = _deploy_record(deploy_json)
    if deploy.status != DeployStatus.COMPLETE:
        status = deploy.status.value if deploy.status else None
        raise InputError(f"{deploy_json}: status {str(status)[:40]!r}, not a completed run")
    build = deploy.fingerprint
    if not isinstance(build, str) or not _FINGERPRINT.match(build):
        raise InputError(f"{deploy_json}: fingerprint must be lowercase hex")
    run_id = _text(deploy_json, "run_id", deploy.run_id, required=True) or ""
    check_run_id(run_id, "run_id", str(deploy_json))  # deploy.json's reader checked it too: the one definition
    board_json = folder / "board.json"
    _bounded_size(board_json, MAX_RUN_RECORD)
    label = folder.parent.parent.name
    board, state = _identity(board_json, read_probe(board_json), label)
    result = folder / "result"
    if (result / "cells.json").exists():
        _bounded_size(result / "cells.json", MAX_RUN_RECORD)
        try:
            cells = read_cells(result)
        except InputError:
            raise
        except RkdetError as err:
            raise InputError(f"{result / 'cells.json'}: {err}") from None
        sets = [(c.name, c.core_mask) for c in cells or [] if c.status == "complete"]
        if not sets:
            raise InputError(f"{result / 'cells.json'}: no cell completed; nothing to record")
    else:
        sets = [("", None)]
    relative = folder.relative_to(results).as_posix()
    return [_read_set(relative, run_id, board, state, build, deploy, deploy_json, result, name, mask)
            for name, mask in sets]


def _read_set(relative: str, run_id: str, board: BoardIdentity, state: BoardState, build: str,
              deploy: DeployRecord, deploy_json: Path, result: Path, name: str, mask: str | None) -> RunRecord:
    """One result set (`result/`, or a cell's `result/<name>/`) of a run as a record."""
    here = result / name if name else result
    if here.is_symlink():
        raise InputError(f"{here}: a symlink; a run folder holds plain folders only")
    source, outputs, deterministic, count = _outputs(here)
    run = source.run_info
    run_json = here / "run.json"
    settings = deploy.settings
    core_mask = _text(run_json, "core_mask", run.core_mask) or mask or \
        _text(deploy_json, "settings.core_mask", settings.core_mask if settings else None) or "auto"
    if mask is not None and core_mask != mask:
        raise InputError(f"{run_json}: core_mask {core_mask[:40]!r}, but cells.json names this cell {mask!r}")
    backend = _text(run_json, "backend", run.backend) or \
        _text(deploy_json, "settings.backend", settings.backend if settings else None) or DEFAULT_BACKEND
    status = _text(run_json, "status", run.status) or "unknown"
    started = run.started_unix  # a finite number or None (the run.json reader checked it)
    emulated = run.emulated
    state = BoardState(state.kernel, state.driver, state.runtime, state.model, _clocks(here / "snapshots.jsonl"))
    return RunRecord(folder=relative, run_id=run_id, board=board, state=state,
                     build=build, core_mask=core_mask, backend=backend,
                     started_unix=float(started) if started is not None else None, status=status,
                     accepted=status == "complete" and deterministic, deterministic=deterministic,
                     emulated=emulated if isinstance(emulated, bool) else None, inferences=count, outputs=outputs,
                     result_set=name, session=_session_id(deploy_json, deploy))


def _session_id(deploy_json: Path, deploy: DeployRecord) -> str | None:
    """deploy.json's session id (a plain token like a run id: it is shown in tables), or None."""
    if deploy.session is None:
        return None
    return check_run_id(deploy.session.id, "session.id", str(deploy_json))


def read_run(results: Path, folder: Path) -> RunRecord:
    """The record of a run folder with one result set (InputError for a multi-cell run: use read_runs)."""
    runs = read_runs(results, folder)
    if len(runs) != 1 or runs[0].result_set:
        raise InputError(f"{folder}: a run of several cells; read it with read_runs")
    return runs[0]


def run_folders(results: Path) -> list[Path]:
    """Deploy run folders under `results` (results/<board>/<fingerprint16>/<run-id>/deploy.json), sorted;
    symlinked folders are not followed (the database indexes what is inside `results` only)."""
    found = []
    for deploy_json in sorted(results.glob("*/*/*/deploy.json")):
        folder = deploy_json.parent
        if any(p.is_symlink() for p in (folder, folder.parent, folder.parent.parent)):
            continue
        found.append(folder)
    return found


def deploy_status(folder: Path) -> str:
    """deploy.json's status (a malformed deploy.json is an InputError naming it and the field)."""
    status = _deploy_record(folder / "deploy.json").status
    return str(status.value if status else None)
