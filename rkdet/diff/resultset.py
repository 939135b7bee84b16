"""Read result sets (docs/FORMATS.md) and single .npy/.npz files as one streaming interface.

A result set is read record by record from index.jsonl (hashes only); an output array is loaded
from outputs/<hash>.npy only when the caller asks, through a small byte-bounded cache, so a diff
of 1000 runs never holds more than a couple of records' arrays.
"""

from __future__ import annotations

import math
import os
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rkdet.records.build import BuildRecord, load_build
from rkdet.diff.safeio import (MAX_ARRAY_BYTES, MAX_INPUTS, MAX_NAME, MAX_OUTPUTS, MAX_RECORD_BYTES, array_bytes,
                               check_dtype, check_shape, load_array_file, load_npy)
from rkdet.errors import InputError
from rkdet.records.io import iter_jsonl
from rkdet.records import io
from rkdet.onboard.hashing import output_hash
from rkdet.onboard.reference import reference_for_run
from rkdet.records.manifest import Manifest, read_manifest
from rkdet.records.run_info import RunInfo, RunInput, read_run_info


@dataclass(frozen=True)
class OutputRef:
    """One output of one inference, as index.jsonl names it."""

    name: str
    hash: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Record:
    """One completed inference: run number, input name and its outputs in model order."""

    run: int
    input: str
    outputs: tuple[OutputRef, ...]
    latency_ms: float | None = None
    t_unix: float | None = None

    @property
    def signature(self) -> tuple[str, ...]:
        return tuple(o.hash for o in self.outputs)


class ArrayCache:
    """A least-recently-used cache of loaded arrays, bounded in bytes rather than entries."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._pinned: dict[str, np.ndarray] = {}

    def get(self, key: str) -> np.ndarray | None:
        arr = self._pinned.get(key)
        if arr is not None:
            return arr
        arr = self._items.get(key)
        if arr is not None:
            self._items.move_to_end(key)
        return arr

    def pin(self, key: str, arr: np.ndarray) -> None:
        """Keep a reference array (run 0 of an input) outside the LRU budget until the end."""
        self._pinned[key] = arr
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes

    def put(self, key: str, arr: np.ndarray) -> None:
        if key in self._items or key in self._pinned or arr.nbytes > self.max_bytes:
            return
        self._items[key] = arr
        self._bytes += arr.nbytes
        while self._bytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self._bytes -= old.nbytes


def _read_run_info(path: Path) -> RunInfo:
    try:
        return read_run_info(path, limit=io.MAX_JSON)  # the one run.json reader (bounded, strict)
    except FileNotFoundError:
        raise InputError(f"{path}: missing; is this a result set written by rkdet-run?") from None


_HASH = re.compile(r"[0-9a-f]{64}")


def _name(value: object, what: str, where: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME:
        raise InputError(f"{where}: {what} must be a non-empty string of at most {MAX_NAME} characters")
    return value


def _number(raw: dict[str, Any], key: str, where: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise InputError(f"{where}: {key} must be a finite number or null, got {str(value)[:40]!r}")
    return float(value)


def _check_output(o: dict[str, Any], where: str) -> tuple[OutputRef, int]:
    name = _name(o.get("name"), "output name", where)
    where = f"{where} output {name!r}"
    digest = o.get("hash")
    if not isinstance(digest, str) or not _HASH.fullmatch(digest):
        raise InputError(f"{where}: hash {str(digest)[:80]!r} is not 64 lowercase hex digits (an output hash)")
    shape = check_shape(o.get("shape"), where)
    dtype = check_dtype(o.get("dtype"), where)
    nbytes = array_bytes(shape, dtype)
    if nbytes > MAX_ARRAY_BYTES:
        raise InputError(f"{where}: shape {list(shape)} {dtype.name} is {nbytes:,} bytes, over the "
                         f"{MAX_ARRAY_BYTES >> 20} MiB per-output cap")
    return OutputRef(name, digest, shape, dtype.name), nbytes


class _Parser:
    """Checks index lines; an output entry equal to the one at the same place in that input's previous
    record (the common case: runs repeat) is reused instead of re-checked. One entry per (input, output
    position) is remembered, i.e. one run's worth, whatever the number of records."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last: dict[tuple[str, int], tuple[tuple[Any, ...], tuple[OutputRef, int]]] = {}

    def _output(self, o: object, where: str, slot: tuple[str, int]) -> tuple[OutputRef, int]:
        if not isinstance(o, dict):
            raise InputError(f"{where}: expected an object with name, hash, shape, dtype")
        shape = o.get("shape")
        key = (o.get("name"), o.get("hash"), tuple(shape) if isinstance(shape, list) else shape, o.get("dtype"))
        last = self._last.get(slot)
        if last is not None and last[0] == key and all(type(d) is int for d in key[2]):
            return last[1]
        checked = _check_output(o, where)
        self._last[slot] = (key, checked)
        return checked

    def record(self, lineno: int, raw: dict[str, Any]) -> Record:
        """One index line, every field checked (docs/FORMATS.md); sizes are bounded before anything is sized."""
        where = f"{self.path}:{lineno}"
        run = raw.get("run")
        if type(run) is not int or run < 0:
            raise InputError(f"{where}: run {str(run)[:40]!r} is not a non-negative integer")
        name = _name(raw.get("input"), "input", where)
        outs = raw.get("outputs")
        if not isinstance(outs, list) or len(outs) > MAX_OUTPUTS:
            raise InputError(f"{where}: outputs must be a list of at most {MAX_OUTPUTS} objects "
                             f"(name, hash, shape, dtype)")
        checked = [self._output(o, where, (name, i)) for i, o in enumerate(outs)]
        outputs = tuple(ref for ref, _ in checked)
        if len({o.name for o in outputs}) != len(outputs):
            raise InputError(f"{where}: an output name repeats within one inference")
        if sum(n for _, n in checked) > MAX_RECORD_BYTES:
            raise InputError(f"{where}: outputs total over the {MAX_RECORD_BYTES >> 20} MiB per-inference cap")
        return Record(run, name, outputs, _number(raw, "latency_ms", where), _number(raw, "t_unix", where))


@dataclass
class ResultSource:
    """A readable set of inference outputs: a result-set folder or a single .npy/.npz file."""

    path: Path
    kind: str  # "result-set" | "npy" | "npz"
    run_info: RunInfo = field(default_factory=RunInfo)  # run.json (rkdet.records.run_info)
    note: str | None = None
    verify: bool = True
    cache: ArrayCache = field(default_factory=ArrayCache)
    quant_steps: dict[str, float] = field(default_factory=dict)  # output -> int8 scale (LSB), from a build
    build_caveat: str | None = None  # a build's golden set whose build failed its gates at convert (rkdet.records.gates)
    declared: dict[str, Any] | None = None  # a build's declared decisions (its config's decision.outputs)
    build_cpu_class: str | None = None  # a build's golden set: the CPU class its manifest's environment.cpu records

    @property
    def cpu_class(self) -> str | None:
        """The CPU class the FP32 outputs were computed on (rkdet.onboard.reference.cpu_class): run.json's
        `backend_options.cpu_class`, else a golden set's build manifest's; None when neither records one."""
        found = (self.run_info.backend_options or {}).get("cpu_class")
        return found if isinstance(found, str) and found else self.build_cpu_class

    # -- overridden by the concrete kinds -------------------------------------------------
    def records(self) -> Iterator[Record]:
        raise NotImplementedError

    def _load_uncached(self, ref: OutputRef) -> np.ndarray:
        raise NotImplementedError

    def snapshots(self, limit: int | None = None) -> list[dict[str, Any]]:
        return []

    def input_image(self, name: str) -> np.ndarray | None:
        return None

    # -- shared ----------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return str(self.path)

    @property
    def short_label(self) -> str:
        """How a verdict names this set: its last three path parts (`…/<build>/golden/onnx-fp32`), so a
        verdict stored in a published report names no workstation folder (errors use the full label)."""
        parts = Path(self.path).parts
        return str(self.path) if len(parts) <= 3 else "…/" + "/".join(parts[-3:])

    @property
    def single_file(self) -> bool:
        return self.kind in ("npy", "npz")

    def load_fresh(self, ref: OutputRef) -> np.ndarray:
        """Load and check one output without touching the cache (safe from a prefetch thread)."""
        arr = self._load_uncached(ref)
        if tuple(arr.shape) != ref.shape or arr.dtype != np.dtype(ref.dtype):
            raise InputError(f"{self.label}: output {ref.hash[:12]} is {arr.dtype}{list(arr.shape)} but the "
                             f"index says {ref.dtype}{list(ref.shape)}; the result set is inconsistent")
        return arr

    def load(self, ref: OutputRef, *, pin: bool = False) -> np.ndarray:
        """The array of one output; shape and dtype are checked against the index record.

        `pin` keeps it for the whole comparison (references); others live in the bounded LRU cache.
        """
        cached = self.cache.get(ref.hash)
        if cached is None:
            cached = self.load_fresh(ref)
            if not pin:
                self.cache.put(ref.hash, cached)
        if pin:
            self.cache.pin(ref.hash, cached)
        return cached


class ResultSetDir(ResultSource):
    """A result-set folder written by rkdet-run (or by rkdet convert as golden data)."""

    def __init__(self, path: Path, note: str | None = None) -> None:
        super().__init__(path=path, kind="result-set", note=note)
        self._verified: set[str] = set()
        self.run_info = _read_run_info(path / "run.json")
        if not (path / "index.jsonl").exists():
            raise InputError(f"{path / 'index.jsonl'}: missing; the run recorded no inference")

    def records(self) -> Iterator[Record]:
        """Index records, checked; each input's runs must be 0, 1, 2, ... in index order (rkdet-run writes
        them so), which refuses duplicated or spliced records and bounds run numbers by the index's size."""
        index = self.path / "index.jsonl"
        next_run: dict[str, int] = {}
        parser = _Parser(index)
        try:
            for lineno, raw in iter_jsonl(index):
                rec = parser.record(lineno, raw)
                want = next_run.get(rec.input, 0)
                if rec.run != want:
                    raise InputError(f"{index}:{lineno}: run {rec.run} of input {rec.input!r} where run {want} was "
                                     f"expected (each input's runs are 0, 1, 2, ... in order); duplicated or "
                                     f"out-of-order records, re-pull the result set")
                if want == 0 and len(next_run) >= MAX_INPUTS:
                    raise InputError(f"{index}:{lineno}: more than {MAX_INPUTS} distinct inputs")
                next_run[rec.input] = want + 1
                yield rec
        except FileNotFoundError:
            raise InputError(f"{index}: missing; the run recorded no inference") from None

    def _load_uncached(self, ref: OutputRef) -> np.ndarray:
        path = self.path / "outputs" / f"{ref.hash}.npy"
        try:
            arr = load_npy(path, (ref.shape, ref.dtype))
        except FileNotFoundError:
            raise InputError(f"{path}: missing output named in index.jsonl; re-pull the result set") from None
        if self.verify and ref.hash not in self._verified:
            if output_hash(arr) != ref.hash:
                raise InputError(f"{path}: content does not match its hash; the file is corrupt, re-pull the result set")
            self._verified.add(ref.hash)  # a reload after cache eviction need not hash again
        return arr

    def snapshots(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Board snapshots; at most `limit` (the runner takes one per run at most, plus before/after)."""
        path = self.path / "snapshots.jsonl"
        if not path.exists():
            return []
        out = []
        try:
            for lineno, rec in iter_jsonl(path):
                if limit is not None and len(out) >= limit:
                    raise InputError(f"{path}:{lineno}: more snapshots than runs; not written by rkdet-run")
                out.append(rec)
        except FileNotFoundError:
            return []
        return out

    def input_image(self, name: str) -> np.ndarray | None:
        """The input as fed, when the set (or its build folder) kept it: golden sets do."""
        files = [i.file for i in self.run_info.inputs if i.name == name]
        file = files[0] if files and files[0] else f"{name}.npy"
        for folder in (self.path / "inputs", self.path.parent / "inputs"):
            candidate = folder / Path(str(file)).name
            if candidate.is_file() and candidate.suffix.lower() in (".npy", ".npz"):
                try:  # a multi-input sample (.npz): show the first tensor
                    return next(iter(load_array_file(candidate).values()), None)
                except (InputError, OSError):
                    return None
        return None


class ArrayFile(ResultSource):
    """A single .npy (one output named "output") or .npz (one output per key) as a one-run set."""

    def __init__(self, path: Path) -> None:
        kind = path.suffix.lower().lstrip(".")
        super().__init__(path=path, kind=kind)
        arrays = load_array_file(path)
        if not arrays:
            raise InputError(f"{path}: the .npz holds no arrays")
        self._arrays = {output_hash(a): a for a in arrays.values()}
        self._record = Record(0, path.stem, tuple(
            OutputRef(name, output_hash(a), tuple(a.shape), a.dtype.name) for name, a in arrays.items()))
        self.run_info = RunInfo(backend=f"file ({path.name})", outputs=tuple(arrays), inputs=(RunInput(path.stem),),
                                repeats=1, recorded=frozenset(("backend", "outputs", "inputs", "repeats")))

    def records(self) -> Iterator[Record]:
        yield self._record

    def _load_uncached(self, ref: OutputRef) -> np.ndarray:
        return self._arrays[ref.hash]


def reference_set(build: Path, run_info: RunInfo | None) -> Path:
    """The golden set of `build` that results described by `run_info` (their run.json) are judged against:
    rkdet.onboard.reference.reference_for, the one rule deploy, diff and the self-check share (simulator for an NPU
    runtime, onnx-fp32 for onnxruntime or the emulated board). Results that name no board backend, or a
    build without that set, get the simulator set when present (the historical default), else onnx-fp32."""
    wanted = (reference_for_run(run_info.for_reference_rule()) if run_info is not None else None) or "simulator"
    golden = Path(build) / "golden"
    for name in (wanted, "simulator", "onnx-fp32"):
        if (golden / name / "run.json").exists():
            return golden / name
    return golden / wanted


def quant_steps(build: Path) -> dict[str, float]:
    """Output name -> quantization step (the int8 scale) from a build's manifest.json (`rknn.header.outputs`),
    for `max_lsb`; empty when the manifest is absent, unreadable or names no single per-tensor scale."""
    try:
        return read_manifest(Path(build) / "manifest.json").quant_steps
    except (OSError, InputError):
        return {}


def _golden_set(path: Path, note: str | None = None, builds: Sequence[BuildRecord] = ()) -> ResultSetDir:
    """A result set; a build's golden set also knows the build's output quantization steps and whether the
    build failed its gates, from the build's record (`builds`: the ones the caller loaded, else loaded
    here): a build whose manifest is missing, unreadable, not a regular file or invalid is refused
    (one line naming it, exit 2), never judged as a good build."""
    src = ResultSetDir(path, note=note)
    if path.parent.name == "golden":
        folder = path.parent.parent
        build = next((b for b in builds if b.folder == folder), None) or load_build(folder, complete=False)
        src.quant_steps = build.manifest.quant_steps
        src.build_caveat = None if build.gates.passed else build.gates.caveat(folder)
        src.declared = declared_of(build.manifest)
        cpu = (build.manifest.environment or {}).get("cpu")
        found = cpu.get("class") if isinstance(cpu, Mapping) else None
        src.build_cpu_class = found if isinstance(found, str) and found else None
    return src


def declared_of(manifest: Manifest) -> dict[str, Any] | None:
    """A build's declared decision rules (its manifest's `inputs.config.resolved.decision.outputs`), or
    None: none declared (the layout is then recognised, as before)."""
    config = manifest.inputs.config
    section = (config.resolved or {}).get("decision") if config is not None else None
    outputs = section.get("outputs") if isinstance(section, dict) else None
    return dict(outputs) if isinstance(outputs, dict) and outputs else None


def declared_decisions(build: Path) -> dict[str, Any] | None:
    """`declared_of` a build folder's manifest; None also when it has no readable manifest."""
    try:
        return declared_of(read_manifest(Path(build) / "manifest.json"))
    except (OSError, InputError):
        return None


def _run_folder_result(p: Path) -> Path | None:
    """A deploy run folder (deploy.json + result/): its result set."""
    sub = p / "result"
    return sub if (sub / "run.json").exists() and not (p / "run.json").exists() else None


def open_source(path: str | Path, role: str = "A", against: RunInfo | None = None,
                builds: Sequence[BuildRecord] = ()) -> ResultSource:
    """Open a result set, a run folder (its result/), a build folder (its golden set picked by
    `reference_set` for results described by `against`, A's run.json), a golden/ folder, or a .npy/.npz
    (`builds`: build folders the caller already loaded, not read again)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{role} {p}: no such file or directory")
    if p.is_file():
        if p.suffix.lower() in (".npy", ".npz"):
            return ArrayFile(p)
        raise InputError(f"{role} {p}: not a result set folder, build folder or .npy/.npz file")
    if (p / "index.jsonl").exists() or (p / "run.json").exists():
        return _golden_set(p, builds=builds)
    result = _run_folder_result(p)
    if result is not None:
        return ResultSetDir(result)
    for base, what in ((p, "build folder"), (p.parent, "golden folder")):
        if p.name != "golden" and what == "golden folder":
            continue
        if (base / "golden" / "simulator" / "run.json").exists() or (base / "golden" / "onnx-fp32" / "run.json").exists():
            chosen = reference_set(base, against)
            why = ("the reference rule for A's run.json (simulator for an NPU runtime, onnx-fp32 for onnxruntime "
                   "or an emulated board)" if against is not None and "backend" in against.recorded else "A names no board runtime")
            other = "onnx-fp32" if chosen.name == "simulator" else "simulator"
            shown = p / chosen.name if what == "golden folder" else p / "golden" / chosen.name
            return _golden_set(chosen, note=f"{role} {p} is a {what}: using its {chosen.name} outputs ({shown}), "
                                             f"picked by {why}; pass {shown.parent / other} to compare with the other set",
                               builds=builds)
    if _imported_build(p):
        raise InputError(f"{role} {p}: an imported .rknn (rkdet import-rknn) has no reference outputs: agrees is not "
                         "applicable; compare A alone for the repeatable verdict")
    raise InputError(f"{role} {p}: not a result set (no run.json/index.jsonl), run folder (no result/), build folder "
                     f"(no golden/simulator) or .npy/.npz file")


def _imported_build(folder: Path) -> bool:
    """A build folder written by `rkdet import-rknn` (its manifest says origin: imported); a manifest there
    that cannot be read is refused (one line naming it), never taken for "not a build"."""
    if not os.path.lexists(folder / "manifest.json"):
        return False
    return load_build(folder, complete=False).manifest.imported