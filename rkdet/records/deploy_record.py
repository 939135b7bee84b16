"""A run's `deploy.json` as one typed record (`DeployRecord`), its status machine, its one reader and writer.

Why here, at the bottom of the layers: deploy writes the record (through `DeployState`), `--resume`,
`rkdet history` and a fleet run read it; those readers live in rooms that may not import each other,
so the record, its status machine (`DeployStatus`, `ALLOWED`) and the bounded, strict reader live in
records (stdlib only). The on-disk format is `rkdet.deploy/2` (docs/FORMATS.md): a fact not
recorded yet is absent from the file, not null, except the judged and collected facts, which are
written together (null included) once their step ran. The verdicts (`repeatable`, `agrees`, `cells`)
are typed records (rkdet/records/verdict.py), read strictly; a `rkdet.deploy/1` file (same shapes,
written before the verdicts were typed) is read as /2, any other schema is refused.

A deploy.json may come from someone else (a shared results folder): every field is type-checked, an
unknown field or status is refused, and every refusal is one line naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any, Union

from rkdet.errors import InputError, RkdetError
from rkdet.records import io as records_io
from rkdet.records.ids import ID_RULE, is_run_id
from rkdet.records.io import MAX_RUN_RECORD, read_json_object
from rkdet.records.verdict import (AnyVerdict, CellsRecord, NotApplicable, VerdictRecord, VerdictSummary,
                                   cells_from_json, verdict_from_json)

DEPLOY_SCHEMA = "rkdet.deploy/2"
# /1 wrote the same verdict objects untyped (JSON): read as /2, written back as /2
READABLE_SCHEMAS = ("rkdet.deploy/1", DEPLOY_SCHEMA)
PRIVATE_SCHEMA = "rkdet.deploy-private/1"
# What a published run folder must not hold but --resume needs: kept in the deployer's private record.
PRIVATE_KEYS = ("board", "build", "remote", "job_env", "reference", "run_settings")

# A JSON value (the run settings and tolerances as deploy's settings hold them): typed as JSON, checked as JSON.
Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]
JsonObject = dict[str, Json]


class DeployStatus(str, Enum):
    """Where a run is; `deploy.json`'s `status`."""

    PREFLIGHT = "preflight"  # nothing on the board changed yet
    RUNNING = "running"  # pushed, the job started (or about to)
    DISCONNECTED = "disconnected"  # the connection broke: `--resume` picks it up
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    COMPLETE = "complete"

    @property
    def resumable(self) -> bool:
        return self in (DeployStatus.RUNNING, DeployStatus.DISCONNECTED)


_S = DeployStatus
# The status machine: from (None = a new record) to the statuses it may move to. COMPLETE and
# INTERRUPTED are recorded when the job's results are in, before they are judged: a judge or a
# job error afterwards still makes the run FAILED (or DISCONNECTED when the link went). FAILED is final.
ALLOWED: dict[DeployStatus | None, frozenset[DeployStatus]] = {
    None: frozenset({_S.PREFLIGHT}),
    _S.PREFLIGHT: frozenset({_S.RUNNING, _S.FAILED}),
    _S.RUNNING: frozenset({_S.COMPLETE, _S.INTERRUPTED, _S.FAILED, _S.DISCONNECTED}),
    _S.DISCONNECTED: frozenset({_S.DISCONNECTED, _S.COMPLETE, _S.INTERRUPTED, _S.FAILED}),
    _S.COMPLETE: frozenset({_S.FAILED, _S.DISCONNECTED}),
    _S.INTERRUPTED: frozenset({_S.FAILED, _S.DISCONNECTED}),
    _S.FAILED: frozenset(),
}


class TransitionError(RuntimeError):
    """A status change the machine does not allow: a bug in the caller, never the user's input."""


def check_transition(before: DeployStatus | None, after: DeployStatus) -> None:
    """Raise TransitionError unless `before` -> `after` is an allowed move."""
    if after not in ALLOWED[before]:
        allowed = ", ".join(sorted(s.value for s in ALLOWED[before])) or "none (final)"
        raise TransitionError(f"deploy status {before.value if before else 'new'} -> {after.value} is not allowed "
                              f"(allowed: {allowed})")


@dataclass(frozen=True)
class TransferRecord:
    """deploy.json `transfer`: what the verified push sent."""

    bytes_sent: int
    files_sent: int
    files_skipped: int
    method: str
    seconds: float

    def __post_init__(self) -> None:
        _check_object(self, type(self).__name__)


@dataclass(frozen=True)
class PulledRecord:
    """deploy.json `pulled`: what came back from the board."""

    bytes: int
    files: int

    def __post_init__(self) -> None:
        _check_object(self, type(self).__name__)


@dataclass(frozen=True)
class BoardLockRecord:
    """deploy.json `board_lock`: which lock the job held and how long it waited (no holder names)."""

    method: str  # "flock" | "link"
    waited_s: float
    took_over_stale: bool

    def __post_init__(self) -> None:
        _check_object(self, type(self).__name__)


@dataclass(frozen=True)
class ContextsRecord:
    """deploy.json `contexts` (`--contexts N`, one result set): whether the threaded contexts agreed."""

    contexts: int
    agree: bool

    def __post_init__(self) -> None:
        _check_object(self, type(self).__name__)


@dataclass(frozen=True)
class SessionRecord:
    """deploy.json `session`: this run was one step of a pinned session (`rkdet deploy --backends A,B`, a fleet
    board's cells): one board lock, one pin and one restore for every run it names, so their pin.json are the
    same records. `id` names the session, `runs` its runs' ids and `backends` their backends, in the order
    they ran; `index` is this run's place; `pinned`: whether the session pinned the board."""

    id: str
    runs: tuple[str, ...]
    backends: tuple[str, ...]
    index: int
    pinned: bool

    def __post_init__(self) -> None:
        _check_object(self, type(self).__name__)
        if len(self.runs) != len(self.backends) or not 0 <= self.index < len(self.runs):
            raise RecordFieldError(type(self).__name__, "field 'index' is not a place in 'runs' "
                                   "(one run and one backend per place)")

    def others(self) -> tuple[str, ...]:
        """The other runs of the same session."""
        return tuple(r for i, r in enumerate(self.runs) if i != self.index)


@dataclass(frozen=True)
class PublishedSettings:
    """deploy.json `settings`: the run's RunSettings (rkdet/deploy/settings.py) without the board
    paths and the fault text, plus `fault_injected` and `emulated_npu_lsb_k`. A field an older record
    lacks is None. (tests/records/test_deploy_records.py checks the fields against RunSettings.)"""

    repeats: int | None = None
    warmup: int | None = None
    core_mask: str | None = None
    contexts: int | None = None
    backend: str | None = None
    snapshot_every: int | None = None
    cpu_affinity: tuple[int, ...] | None = None
    pin: bool | None = None
    pin_env: Mapping[str, str] | None = None
    sudo: bool | None = None
    keep: bool | None = None
    emulate_npu: int | None = None  # the test control's K (also as emulated_npu_lsb_k)
    timeout: float | None = None
    lock_timeout: int | None = None
    tolerances: JsonObject | None = None
    runner_settings: Mapping[str, str] | None = None  # --runner-setting: the backend runner's own settings
    fault_injected: bool | None = None
    emulated_npu_lsb_k: int | None = None

    def __post_init__(self) -> None:
        _check_object(self, type(self).__name__)


# Facts written together once their step ran, null included (absent before): collect, then judge.
_GROUPS = (("pulled", ("job_exit", "restored")),
           ("verdict", ("diff_exit", "reference", "repeatable", "agrees", "stack", "cells", "contexts")))
_ALWAYS = ("schema", "run_id", "status")


@dataclass(frozen=True)
class DeployRecord:
    """One run's deploy.json (with, in memory and in the private record, what `--resume` needs)."""

    run_id: str
    schema: str = DEPLOY_SCHEMA
    status: DeployStatus | None = None  # None: not saved yet; moves only through `advance`
    board: str | None = None  # user@host:port in memory and privately; host_port when published
    build: str | None = None  # the build folder: absolute privately, relative to the run folder when published
    fingerprint: str | None = None
    platform: str | None = None
    remote: Mapping[str, str] | None = None  # the RemoteLayout (private)
    job_env: Mapping[str, str] | None = None
    settings: PublishedSettings | None = None
    run_settings: JsonObject | None = None  # RunSettings.to_json() whole (private; --resume restores it)
    tolerances: JsonObject | None = None
    emulated: bool | None = None
    warnings: tuple[str, ...] | None = None
    transfer: TransferRecord | None = None
    job_pid: int | None = None
    error: str | None = None
    board_lock: BoardLockRecord | None = None
    job_exit: int | None = None
    restored: bool | None = None
    pulled: PulledRecord | None = None
    verdict: str | None = None
    diff_exit: int | None = None
    reference: str | None = None
    repeatable: AnyVerdict | None = None  # rkdet/records/verdict.py
    agrees: AnyVerdict | None = None
    stack: Mapping[str, str | None] | None = None  # BoardStack.to_json() (rkdet/boardinfo/stack.py)
    cells: CellsRecord | None = None  # CellsJudgement.record() (rkdet/deploy/cells.py)
    contexts: ContextsRecord | None = None
    session: SessionRecord | None = None  # one step of a pinned session of several runs (rkdet/deploy/session.py)

    def __post_init__(self) -> None:
        _check_object(self, "deploy.json")

    def advanced(self, status: DeployStatus, **facts: Any) -> DeployRecord:
        """This record moved to `status` (TransitionError if the machine does not allow it)."""
        status = DeployStatus(status)
        check_transition(self.status, status)
        return dataclasses.replace(self, **facts, status=status)

    def with_facts(self, **facts: Any) -> DeployRecord:
        """This record with facts that do not change the status (a field name it lacks is a TypeError)."""
        if "status" in facts:
            raise TransitionError("status changes go through DeployState.advance / DeployRecord.advanced")
        return dataclasses.replace(self, **facts)

    def to_json(self) -> dict[str, Any]:
        """The JSON object as deploy.json (or, with the private keys, --json) holds it."""
        doc = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        keep = set(_ALWAYS) | {k for k, v in doc.items() if v is not None}
        for lead, members in _GROUPS:
            if doc[lead] is not None:
                keep.update(members)
        return {k: v for k, v in doc.items() if k in keep}

    @classmethod
    def from_json(cls, doc: Any, where: str = "deploy.json") -> DeployRecord:
        """The record of a parsed deploy.json; RecordFieldError (one line naming `where` and the field)."""
        return _build(cls, doc, where)


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, _VERDICTS + (CellsRecord,)):  # each writes its own shape (rkdet/records/verdict.py)
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class RecordFieldError(InputError):
    """A record's field has the wrong type or value; the message names the file and the field."""

    def __init__(self, where: str, detail: str) -> None:
        super().__init__(f"{where}: {detail}")
        self.detail = detail


# ---- the strict checks (stdlib only: records may not import pydantic) ----

_NESTED = {"transfer": TransferRecord, "pulled": PulledRecord, "board_lock": BoardLockRecord,
           "contexts": ContextsRecord, "settings": PublishedSettings, "session": SessionRecord}
_VERDICTS = (VerdictRecord, VerdictSummary, NotApplicable)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return _is_int(v) or isinstance(v, float)


def _is_json(v: Any, depth: int = 0) -> bool:
    if depth > 64:
        return False
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_is_json(x, depth + 1) for x in v)
    if isinstance(v, Mapping):
        return all(isinstance(k, str) and _is_json(x, depth + 1) for k, x in v.items())
    return False


def _str_map(v: Any, values_optional: bool = False) -> bool:
    return isinstance(v, Mapping) and all(
        isinstance(k, str) and (isinstance(x, str) or (values_optional and x is None)) for k, x in v.items())


# field name -> (what it must be, check); None is allowed for every field but the always-written ones
_CHECKS: dict[str, tuple[str, Any]] = {
    "run_id": (f"a run id ({ID_RULE})", is_run_id),
    "schema": ("text", lambda v: isinstance(v, str)),
    "status": ("a deploy status", lambda v: isinstance(v, DeployStatus)),
    "method": ("text", lambda v: isinstance(v, str)),
    "remote": ("an object of strings", _str_map),
    "job_env": ("an object of strings", _str_map),
    "pin_env": ("an object of strings", _str_map),
    "stack": ("an object of strings or null", lambda v: _str_map(v, True)),
    "warnings": ("a list of strings", lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v)),
    "cpu_affinity": ("a list of integers", lambda v: isinstance(v, tuple) and all(_is_int(x) for x in v)),
    "runs": (f"a list of run ids ({ID_RULE})", lambda v: isinstance(v, tuple) and 0 < len(v) <= 64
             and all(is_run_id(x) for x in v)),
    "backends": ("a list of backend names", lambda v: isinstance(v, tuple) and 0 < len(v) <= 64
                 and all(isinstance(x, str) and 0 < len(x) <= 64 for x in v)),
    "id": (f"a session id ({ID_RULE})", is_run_id),
    "repeatable": ("a verdict record", lambda v: isinstance(v, _VERDICTS)),
    "agrees": ("a verdict record", lambda v: isinstance(v, _VERDICTS)),
    "cells": ("a cells record", lambda v: isinstance(v, CellsRecord)),
}
_BY_TYPE: dict[str, tuple[str, Any]] = {
    "str": ("text", lambda v: isinstance(v, str)),
    "int": ("an integer", _is_int),
    "float": ("a number", _is_number),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "JsonObject": ("a JSON object", lambda v: isinstance(v, Mapping) and _is_json(v)),
}


def _check_object(obj: Any, where: str) -> None:
    """Every field of a record (or of one of its parts) has its declared type."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is None and f.name not in _ALWAYS[:2]:
            continue
        kind = str(f.type).split(" | ")[0]
        nested = _NESTED.get(f.name) if isinstance(obj, DeployRecord) else None
        if nested is not None:
            what, ok = f"a {nested.__name__} object", isinstance(value, nested)
        else:
            what, check = _CHECKS.get(f.name) or _BY_TYPE.get(kind, ("?", lambda v: True))
            ok = check(value)
        if not ok:
            raise RecordFieldError(where, f"field {f.name!r} is {_short(value)}, not {what}")


def _short(value: Any) -> str:
    text = json.dumps(_plain(value), default=str) if not isinstance(value, str) else repr(value)
    return text[:60] + ("..." if len(text) > 60 else "")


def _build(cls: Any, doc: Any, where: str) -> Any:
    """`cls` from a JSON object: unknown keys refused, lists to tuples, nested parts and the status parsed."""
    if not isinstance(doc, Mapping):
        raise RecordFieldError(where, "expected a JSON object")
    names = {f.name for f in fields(cls)}
    missing = [f.name for f in fields(cls) if f.default is dataclasses.MISSING and f.name not in doc]
    if missing:
        raise RecordFieldError(where, f"field {missing[0]!r} is missing")
    unknown = sorted(k for k in doc if k not in names)
    if unknown:
        raise RecordFieldError(where, f"field {str(unknown[0])[:40]!r} is not one rkdet writes (a newer rkdet's "
                               "record, or not a file rkdet wrote)")
    if cls is DeployRecord and doc.get("schema", DEPLOY_SCHEMA) not in READABLE_SCHEMAS:
        raise RecordFieldError(where, f"schema {_short(doc.get('schema'))} is not one this rkdet reads "
                               f"({', '.join(READABLE_SCHEMAS)}): a newer rkdet's record, or not a file rkdet wrote")
    values: dict[str, Any] = {}
    for name, value in doc.items():
        if cls is DeployRecord and name == "schema":
            value = DEPLOY_SCHEMA  # an older schema this rkdet reads is read as the current one
        elif cls is DeployRecord and name in _NESTED and isinstance(value, Mapping):
            value = _build(_NESTED[name], value, f"{where}: {name}")
        elif cls is DeployRecord and name in ("repeatable", "agrees", "cells") and value is not None:
            try:
                value = (cells_from_json if name == "cells" else verdict_from_json)(value, f"field {name!r}")
            except ValueError as err:
                raise RecordFieldError(where, str(err)) from None
        elif name == "status" and cls is DeployRecord and value is not None:
            try:
                value = DeployStatus(value)
            except (ValueError, TypeError):
                raise RecordFieldError(where, f"field 'status' is {_short(value)}, not one of "
                                       f"{', '.join(s.value for s in DeployStatus)}") from None
        elif isinstance(value, list) and name in ("warnings", "cpu_affinity", "runs", "backends"):
            value = tuple(value)
        values[name] = value
    try:
        return cls(**values)
    except TypeError as err:  # a required field missing
        raise RecordFieldError(where, str(err).split("()")[-1].strip()[:120]) from None
    except RecordFieldError as err:  # a field of this part: named from here
        raise RecordFieldError(where, err.detail) from None


def settings_from_json(doc: Any, where: str = "deploy.json: settings") -> PublishedSettings:
    """deploy.json's `settings` part from its JSON object (strict, like the whole record)."""
    return _build(PublishedSettings, doc, where)  # type: ignore[no-any-return]


# ---- the one reader and writer ----


def read_deploy_record(path: Path, error: type[RkdetError] = InputError) -> DeployRecord:
    """deploy.json, bounded (4 MiB, like every run record) and strict; FileNotFoundError passes."""
    doc = read_json_object(path, limit=MAX_RUN_RECORD, error=error)
    try:
        return DeployRecord.from_json(doc, where=str(path))
    except RecordFieldError as err:
        if error is InputError:
            raise
        raise error(str(err)) from None


def write_deploy_record(path: Path, record: DeployRecord, mode: int = records_io.SHARED) -> None:
    """deploy.json, atomically (through the one JSON writer, records.io.write_json): THE writer."""
    records_io.write_json(path, record.to_json(), mode)


@dataclass(frozen=True)
class PrivateRecord:
    """`$XDG_STATE_HOME/rkdet/deploys/<run-id>.json` (schema rkdet.deploy-private/1): what --resume needs."""

    run_id: str
    folder: str
    board: str | None = None
    build: str | None = None
    remote: Mapping[str, str] | None = None
    job_env: Mapping[str, str] | None = None
    reference: str | None = None
    run_settings: JsonObject | None = None
    schema: str = PRIVATE_SCHEMA

    def __post_init__(self) -> None:
        _check_object(self, "private deploy record")

    @classmethod
    def of(cls, record: DeployRecord, folder: Path) -> PrivateRecord:
        return cls(run_id=record.run_id, folder=str(folder.resolve()),
                   **{k: getattr(record, k) for k in PRIVATE_KEYS})

    def to_json(self) -> dict[str, Any]:
        doc = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        return {k: v for k, v in doc.items() if v is not None or k in ("schema", "run_id", "folder")}

    def merged(self, record: DeployRecord) -> DeployRecord:
        """The published record with this private part put back (what --resume reads)."""
        return dataclasses.replace(record, **{k: getattr(self, k) for k in PRIVATE_KEYS
                                              if getattr(self, k) is not None})


def read_private_record(path: Path) -> PrivateRecord:
    """The private record, bounded and strict (unknown keys ignored: only PRIVATE_KEYS are taken)."""
    doc = read_json_object(path, limit=MAX_RUN_RECORD)
    known = {k: doc[k] for k in ("run_id", "folder", "schema", *PRIVATE_KEYS) if k in doc}
    try:
        return PrivateRecord(**known)
    except TypeError as err:
        raise RecordFieldError(str(path), str(err).split("()")[-1].strip()[:120]) from None
    except RecordFieldError as err:
        raise RecordFieldError(str(path), err.detail) from None


def write_private_record(path: Path, private: PrivateRecord) -> None:
    records_io.write_json(path, private.to_json(), mode=0o600)
