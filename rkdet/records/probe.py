"""What a board is, as probe.sh says it (`board.json`, schema `rkdet.board/1`): the typed `ProbeReport`,
its parser (`parse_probe`) and the one reader and writer of board.json.

Why here, at the bottom of the layers: deploy writes board.json and judges the board by it (preflight,
the stack line), `rkdet history` reads who the board is and what it ran from it, and a fleet run goes
through both; history may not import deploy or a board connection, so the record, its strict parser
and the bounded reader live in records (stdlib only). The board is untrusted: a record of the wrong
shape is RecordError naming the record and the field; a reader's refusal is one line naming the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.errors import BoardError, InputError, RkdetError
from rkdet.records.io import SHARED, write_json
from rkdet.records.io import MAX_RUN_RECORD, read_json_object

BOARD_SCHEMA = "rkdet.board/1"
MAX_RECORDS = 10_000  # probe records in one board.json (probe.sh writes a few dozen)


def records_of(records: Iterable[Mapping[str, Any]], script: str) -> list[Mapping[str, Any]]:
    """The records one script wrote (run-pinned.sh output mixes pin, run-pinned and restore)."""
    return [r for r in records if r.get("script") == script]


@dataclass(frozen=True)
class ScriptReport:
    """What every script ends with: a result record (absent when the run was cut off)."""

    script: str
    status: str  # "ok" | "partial" | "error" | "incomplete" (no result record)
    exit_code: int | None
    reason: str | None
    note: str | None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def raise_for_status(self, host: str = "board") -> None:
        """Raise the matching RkdetError unless the script succeeded (exit 2: InputError, else BoardError)."""
        if self.ok:
            return
        why = self.reason or f"{self.script}.sh ended without a result (status {self.status})"
        message = f"{host}: {self.script}.sh: {why}"
        if self.exit_code == 2:
            raise InputError(message)
        raise BoardError(message)


def script_result(records: Sequence[Mapping[str, Any]]) -> tuple[str, int | None, str | None, str | None]:
    """(status, exit code, reason, note) of the last result record; "incomplete" without one."""
    res = [r for r in records if r.get("record") == "result"]
    if not res:
        return "incomplete", None, None, None
    last = res[-1]
    code = last.get("exit")
    return str(last.get("status", "")), code if isinstance(code, int) else None, last.get("reason"), last.get("note")


@dataclass(frozen=True)
class CpuPolicyInfo:
    name: str
    cpus: tuple[int, ...]
    governor: str
    governors: tuple[str, ...]
    frequencies_khz: tuple[int, ...]
    cur_khz: int | None
    min_khz: int | None
    max_khz: int | None


@dataclass(frozen=True)
class DevfreqInfo:
    name: str
    kind: str  # "npu" | "gpu" | "ddr" | "other"
    governor: str
    governors: tuple[str, ...]
    frequencies_hz: tuple[int, ...]
    cur_hz: int | None
    min_hz: int | None
    max_hz: int | None


@dataclass(frozen=True)
class ProbeReport(ScriptReport):
    """probe.sh's board description. ``missing`` maps what was not found to why."""

    soc: str | None = None
    compatible: tuple[str, ...] = ()
    model: str | None = None
    serial: str | None = None  # device-tree serial-number: who the board is, whatever its address
    machine_id: str | None = None  # /etc/machine-id (an OS install: changes on a reflash)
    kernel: str | None = None
    cpu_policies: tuple[CpuPolicyInfo, ...] = ()
    devfreq: tuple[DevfreqInfo, ...] = ()
    thermal: Mapping[str, int | None] = field(default_factory=dict)  # zone type -> millicelsius
    rknpu_version: str | None = None
    rknpu_source: str | None = None  # where the driver version was found: "debugfs" | "sysfs" | "dmesg"
    npu_load: str | None = None
    runtime_library: str | None = None
    runtime_version: str | None = None
    python_version: str | None = None
    rknnlite: bool = False
    rknnlite_version: str | None = None
    numpy_version: str | None = None
    compaction_proactiveness: int | None = None
    thp: str | None = None
    work_dir_free_kb: int | None = None
    pinned_state: bool = False  # a pin state left behind by a run that did not restore
    missing: Mapping[str, str] = field(default_factory=dict)
    records: tuple[Mapping[str, Any], ...] = ()

    def devfreq_of(self, kind: str) -> DevfreqInfo | None:
        """The first devfreq node of a kind ("npu", "gpu", "ddr"), or None."""
        return next((d for d in self.devfreq if d.kind == kind), None)

    def to_json(self) -> dict[str, Any]:
        """The raw records, for results/<...>/board.json."""
        return {"schema": BOARD_SCHEMA, "records": list(self.records)}


class RecordError(ValueError):
    """A board script's record has the wrong shape; the message names the record and the field."""


class _Fields:
    """Typed reads of one record's fields; a wrong type raises RecordError naming record and field."""

    def __init__(self, rec: Mapping[str, Any]) -> None:
        self.rec = rec
        self.kind = str(rec.get("record"))[:40]

    def _bad(self, key: str, want: str) -> RecordError:
        return RecordError(f"record {self.kind!r}: field {key!r} is {str(self.rec.get(key))[:60]!r}, not {want}")

    def text(self, key: str, default: str | None = None, required: bool = False) -> Any:
        value = self.rec.get(key, default)
        if value is None and not required:
            return default
        if not isinstance(value, str):
            raise self._bad(key, "a string")
        return value

    def integer(self, key: str) -> int | None:
        value = self.rec.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(key, "an integer")
        return value

    def integers(self, key: str) -> tuple[int, ...]:
        value = self.rec.get(key, ())
        if not isinstance(value, (list, tuple)) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise self._bad(key, "a list of integers")
        return tuple(value)

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.rec.get(key, ())
        if not isinstance(value, (list, tuple)) or any(not isinstance(v, str) for v in value):
            raise self._bad(key, "a list of strings")
        return tuple(value)

    def flag(self, key: str) -> bool:
        value = self.rec.get(key, False)
        if not isinstance(value, bool):
            raise self._bad(key, "true or false")
        return value


def parse_probe(records: Sequence[Mapping[str, Any]]) -> ProbeReport:
    """Typed view of probe.sh's records; RecordError (naming the record and field) when one has the
    wrong shape (a broken or hostile board): callers turn it into a BoardError naming the board."""
    own = records_of(records, "probe")
    status, code, reason, note = script_result(own)
    one: dict[str, _Fields] = {}
    for r in own:
        one.setdefault(str(r["record"]), _Fields(r))
    empty = _Fields({})
    soc, ident, kern, npu, rt, py, vm, disk, st = (
        one.get(k, empty) for k in ("soc", "identity", "kernel", "rknpu", "runtime", "python", "vm", "disk", "state"))
    fields = [_Fields(r) for r in own]
    cpus = tuple(CpuPolicyInfo(name=f.text("name", required=True), cpus=f.integers("cpus"), governor=f.text("governor", ""),
                               governors=f.texts("governors"), frequencies_khz=f.integers("frequencies_khz"),
                               cur_khz=f.integer("cur_khz"), min_khz=f.integer("min_khz"), max_khz=f.integer("max_khz"))
                 for f in fields if f.rec["record"] == "cpu_policy")
    devs = tuple(DevfreqInfo(name=f.text("name", required=True), kind=f.text("kind", "other"),
                             governor=f.text("governor", ""), governors=f.texts("governors"),
                             frequencies_hz=f.integers("frequencies_hz"), cur_hz=f.integer("cur_hz"),
                             min_hz=f.integer("min_hz"), max_hz=f.integer("max_hz"))
                 for f in fields if f.rec["record"] == "devfreq")
    return ProbeReport(
        script="probe", status=status, exit_code=code, reason=reason if reason is None else str(reason), note=note,
        soc=soc.text("soc"), compatible=soc.texts("compatible"), model=soc.text("model"),
        serial=ident.text("serial"), machine_id=ident.text("machine_id"),
        kernel=kern.text("release"), cpu_policies=cpus, devfreq=devs,
        thermal={f.text("type", required=True): f.integer("millicelsius") for f in fields if f.rec["record"] == "thermal"},
        rknpu_version=npu.text("version"), rknpu_source=npu.text("source"), npu_load=npu.text("load"),
        runtime_library=rt.text("library"), runtime_version=rt.text("version"),
        python_version=py.text("version") or None, rknnlite=py.flag("rknnlite"),
        rknnlite_version=py.text("rknnlite_version"), numpy_version=py.text("numpy"),
        compaction_proactiveness=vm.integer("compaction_proactiveness"), thp=vm.text("thp"),
        work_dir_free_kb=disk.integer("free_kb"), pinned_state=st.flag("pinned"),
        missing={f.text("what", required=True): str(f.rec.get("reason", "")) for f in fields if f.rec["record"] == "missing"},
        records=tuple(own),
    )


def read_probe(path: Path, error: type[RkdetError] = InputError) -> ProbeReport:
    """board.json, bounded (4 MiB, like every run record) and parsed strictly; FileNotFoundError passes.
    Every refusal is `error`, one line naming the file (and the record and field)."""
    doc = read_json_object(path, limit=MAX_RUN_RECORD, error=error)
    records = doc.get("records")
    if not isinstance(records, list) or len(records) > MAX_RECORDS:
        raise error(f"{path}: records must be a list of at most {MAX_RECORDS} probe records")
    if not all(isinstance(r, dict) for r in records):
        raise error(f"{path}: records must be JSON objects")
    try:
        return parse_probe(records)
    except (RecordError, KeyError, TypeError, ValueError, AttributeError) as err:
        raise error(f"{path}: malformed probe record ({err.__class__.__name__}: {err})") from None


def write_probe(path: Path, report: ProbeReport) -> None:
    """board.json: the probe's own records as probe.sh printed them (deploy scrubs them first), atomically."""
    write_json(path, report.to_json(), SHARED)
