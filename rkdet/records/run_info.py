"""`run.json`, typed: the host's one reader of a result set's run record (`RunInfo`).

Why: diff, deploy's judge and cells, history and the board bisection each read run.json as a dict
by key; a board's (possibly hostile) run.json with a wrongly typed field then failed far from it or
was shown as it came. Here it is read once, bounded (records/io.py) and strictly typed: a field of
the wrong type is one line naming the file and the dotted field. Fields the file does not record
are None; `recorded` says which keys were present (two run settings are compared only when both
sides recorded them). The WRITER is the on-board program's (rkdet-run, rkdet/onboard/resultset.py), which also defines the schema string (docs/FORMATS.md "Result set").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.errors import InputError, RkdetError
from rkdet.records import fields as f
from rkdet.onboard.resultset import RUN_SCHEMA
from rkdet.records.io import MAX_RUN_RECORD, read_json_object

# The schema string is defined once, by the writer (the on-board program's resultset module, stdlib only).
FILE = "run.json"
ADVICE = "the result set is damaged or was not written by rkdet-run"


def run_schema() -> str:
    """"rkdet.run/1", as the writer defines it."""
    return RUN_SCHEMA


@dataclass(frozen=True)
class RunInput:
    """One input of the run as rkdet-run fed it (`inputs[]`)."""

    name: str | None
    file: str | None = None
    sha256: str | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    tensors: tuple[Mapping[str, Any], ...] | None = None  # a multi-input sample's tensors (.npz)

    @classmethod
    def read(cls, value: Any, where: f.Where) -> RunInput:
        doc = f.obj(value, where)
        return cls(f.text(doc, "name", where), f.text(doc, "file", where), f.text(doc, "sha256", where),
                   f.items(doc, "shape", where, f.an_int), f.text(doc, "dtype", where),
                   f.items(doc, "tensors", where, lambda v, w: f.obj(v, w)))


@dataclass(frozen=True)
class ModelCheck:
    """How rkdet-run knew the model (`model_check`): by embedded fingerprint, sha256 or not at all."""

    by: str | None
    expected: str | None = None
    found: str | None = None
    why: str | None = None

    @classmethod
    def read(cls, doc: Mapping[str, Any], where: f.Where) -> ModelCheck:
        return cls(f.text(doc, "by", where), f.text(doc, "expected", where), f.text(doc, "found", where),
                   f.text(doc, "why", where))


@dataclass(frozen=True)
class RunInfo:
    """A result set's `run.json` (schema rkdet.run/1)."""

    schema: str | None = None
    backend: str | None = None
    backend_detail: str | None = None
    emulated: bool | None = None
    emulates_npu: bool | None = None
    model: Mapping[str, Any] | None = None  # {path, sha256}
    inputs: tuple[RunInput, ...] = ()
    outputs: tuple[str, ...] = ()
    model_check: ModelCheck | None = None
    embedded_fingerprint: str | None = None
    stack: Mapping[str, Any] | None = None  # the board's Python, numpy, runtime versions as rkdet-run saw them
    repeats: int | None = None
    warmup: int | None = None
    core_mask: str | None = None
    contexts: int | None = None
    affinity: tuple[int, ...] | None = None
    backend_options: Mapping[str, Any] | None = None
    snapshot_every: int | None = None
    index_fsync_s: float | int | None = None  # the index's durability policy (rkdet.onboard.resultset.INDEX_FSYNC_S)
    python: str | None = None
    platform: str | None = None
    started_unix: float | int | None = None
    finished_unix: float | int | None = None
    status: str | None = None  # running | complete | failed
    error: str | None = None
    recorded: frozenset[str] = frozenset()  # the keys the file had

    @classmethod
    def from_json(cls, doc: Any, where: str | Path, error: type[RkdetError] = InputError) -> RunInfo:
        """The record of a parsed run.json; a wrongly typed field is one line naming file and field."""
        at = f.Where(str(where), advice=ADVICE, error=error)
        doc = f.obj(doc, at)
        return cls(
            schema=f.text(doc, "schema", at), backend=f.text(doc, "backend", at),
            backend_detail=f.text(doc, "backend_detail", at), emulated=f.flag(doc, "emulated", at),
            emulates_npu=f.flag(doc, "emulates_npu", at), model=f.mapping(doc, "model", at),
            inputs=f.items(doc, "inputs", at, RunInput.read) or (),
            outputs=f.items(doc, "outputs", at, f.a_str) or (),
            model_check=f.nested(doc, "model_check", at, ModelCheck.read),
            embedded_fingerprint=f.text(doc, "embedded_fingerprint", at), stack=f.mapping(doc, "stack", at),
            repeats=f.integer(doc, "repeats", at), warmup=f.integer(doc, "warmup", at),
            core_mask=f.text(doc, "core_mask", at), contexts=f.integer(doc, "contexts", at),
            affinity=f.items(doc, "affinity", at, f.an_int), backend_options=f.mapping(doc, "backend_options", at),
            snapshot_every=f.integer(doc, "snapshot_every", at),
            index_fsync_s=f.number(doc, "index_fsync_s", at), python=f.text(doc, "python", at),
            platform=f.text(doc, "platform", at), started_unix=f.number(doc, "started_unix", at),
            finished_unix=f.number(doc, "finished_unix", at), status=f.text(doc, "status", at),
            error=f.text(doc, "error", at), recorded=frozenset(k for k in doc if isinstance(k, str)))

    def setting(self, key: str) -> Any:
        """A run setting as recorded (`core_mask`, `affinity`, `backend`, `emulated`); None when absent."""
        value = getattr(self, key)
        return list(value) if isinstance(value, tuple) else value

    def for_reference_rule(self) -> dict[str, Any]:
        """The fields the board side's reference rule reads (rkdet.onboard.reference.reference_for_run)."""
        return {k: getattr(self, k) for k in ("backend", "emulated", "emulates_npu") if k in self.recorded}

    def stack_text(self, key: str) -> str | None:
        """One `stack` entry as text (None when absent or not a string)."""
        value = (self.stack or {}).get(key)
        return value if isinstance(value, str) else None

    @property
    def first_input_shape(self) -> tuple[int, ...] | None:
        return self.inputs[0].shape if self.inputs else None


def read_run_info(path: str | Path, *, error: type[RkdetError] = InputError, limit: int = MAX_RUN_RECORD) -> RunInfo:
    """THE reader of a run.json (bounded to a board record's cap, strict). FileNotFoundError passes."""
    path = Path(path)
    return RunInfo.from_json(read_json_object(path, limit=limit, error=error), path, error)


__all__ = ["FILE", "ModelCheck", "RunInfo", "RunInput", "read_run_info", "run_schema"]
