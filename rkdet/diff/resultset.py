"""Read result sets (docs/FORMATS.md) and single .npy/.npz files as one streaming interface.

A result set is read record by record from index.jsonl (hashes only); an output array is loaded
from outputs/<hash>.npy only when the caller asks, through a small byte-bounded cache, so a diff
of 1000 runs never holds more than a couple of records' arrays.
"""

from __future__ import annotations

import json
import zipfile
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rkdet.runner import output_hash
from rkdet.errors import InputError


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


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: missing; is this a result set written by rkdet-run?") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path}: unreadable JSON ({err}); re-pull or re-run the result set") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a JSON Lines file; a final line without newline is a torn write, skipped."""
    try:
        handle = path.open("r", encoding="utf-8")
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    with handle:
        for lineno, line in enumerate(handle, 1):
            if not line.endswith("\n"):
                return
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
            if not isinstance(record, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object")
            yield lineno, record


def _parse_record(path: Path, lineno: int, raw: dict[str, Any]) -> Record:
    try:
        outputs = tuple(
            OutputRef(str(o["name"]), str(o["hash"]), tuple(int(d) for d in o["shape"]), str(o["dtype"]))
            for o in raw["outputs"]
        )
        return Record(int(raw["run"]), str(raw["input"]), outputs, raw.get("latency_ms"), raw.get("t_unix"))
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"{path}:{lineno}: malformed index record (missing or bad {err}); expected run, input, "
                         f"outputs[name, hash, shape, dtype]") from None


@dataclass
class Source:
    """A readable set of inference outputs: a result-set folder or a single .npy/.npz file."""

    path: Path
    kind: str  # "result-set" | "npy" | "npz"
    run_info: dict[str, Any] = field(default_factory=dict)
    note: str | None = None
    verify: bool = True
    cache: ArrayCache = field(default_factory=ArrayCache)

    # -- overridden by the concrete kinds -------------------------------------------------
    def records(self) -> Iterator[Record]:
        raise NotImplementedError

    def _load_uncached(self, ref: OutputRef) -> np.ndarray:
        raise NotImplementedError

    def snapshots(self) -> list[dict[str, Any]]:
        return []

    def input_image(self, name: str) -> np.ndarray | None:
        return None

    # -- shared ----------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return str(self.path)

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


class ResultSetDir(Source):
    """A result-set folder written by rkdet-run (or by rkdet convert as golden data)."""

    def __init__(self, path: Path, note: str | None = None) -> None:
        super().__init__(path=path, kind="result-set", note=note)
        self._verified: set[str] = set()
        self.run_info = _read_json(path / "run.json")
        if not (path / "index.jsonl").is_file():
            raise InputError(f"{path / 'index.jsonl'}: missing; the run recorded no inference")

    def records(self) -> Iterator[Record]:
        index = self.path / "index.jsonl"
        for lineno, raw in iter_jsonl(index):
            yield _parse_record(index, lineno, raw)

    def _load_uncached(self, ref: OutputRef) -> np.ndarray:
        path = self.path / "outputs" / f"{ref.hash}.npy"
        try:
            arr = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise InputError(f"{path}: missing output named in index.jsonl; re-pull the result set") from None
        except (OSError, ValueError) as err:
            raise InputError(f"{path}: unreadable .npy ({err})") from None
        if self.verify and ref.hash not in self._verified:
            if output_hash(arr) != ref.hash:
                raise InputError(f"{path}: content does not match its hash; the file is corrupt, re-pull the result set")
            self._verified.add(ref.hash)  # a reload after cache eviction need not hash again
        return arr

    def snapshots(self) -> list[dict[str, Any]]:
        path = self.path / "snapshots.jsonl"
        if not path.is_file():
            return []
        return [rec for _, rec in iter_jsonl(path)]

    def input_image(self, name: str) -> np.ndarray | None:
        """The input as fed, when the set (or its build folder) kept it: golden sets do."""
        files = [i.get("file") for i in self.run_info.get("inputs", []) if isinstance(i, dict) and i.get("name") == name]
        file = files[0] if files and files[0] else f"{name}.npy"
        for folder in (self.path / "inputs", self.path.parent / "inputs"):
            candidate = folder / Path(str(file)).name
            if candidate.is_file():
                try:
                    loaded = np.load(candidate, allow_pickle=False)
                    if isinstance(loaded, np.lib.npyio.NpzFile):  # multi-input sample: show the first tensor
                        with loaded:
                            return loaded[loaded.files[0]] if loaded.files else None
                    return loaded
                except (OSError, ValueError, zipfile.BadZipFile):
                    return None
        return None


class ArrayFile(Source):
    """A single .npy (one output named "output") or .npz (one output per key) as a one-run set."""

    def __init__(self, path: Path) -> None:
        kind = path.suffix.lower().lstrip(".")
        super().__init__(path=path, kind=kind)
        try:
            if kind == "npy":
                arrays = {"output": np.load(path, allow_pickle=False)}
            else:
                with np.load(path, allow_pickle=False) as npz:
                    arrays = {key: npz[key] for key in npz.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
            raise InputError(f"{path}: unreadable .{kind} ({err})") from None
        if not arrays:
            raise InputError(f"{path}: the .npz holds no arrays")
        self._arrays = {output_hash(a): a for a in arrays.values()}
        self._record = Record(0, path.stem, tuple(
            OutputRef(name, output_hash(a), tuple(a.shape), a.dtype.name) for name, a in arrays.items()))
        self.run_info = {"backend": f"file ({path.name})", "outputs": list(arrays),
                         "inputs": [{"name": path.stem}], "repeats": 1}

    def records(self) -> Iterator[Record]:
        yield self._record

    def _load_uncached(self, ref: OutputRef) -> np.ndarray:
        return self._arrays[ref.hash]


def open_source(path: str | Path, role: str = "A") -> Source:
    """Open a result set, a build folder (its simulator golden set), a golden/ folder, or a .npy/.npz."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{role} {p}: no such file or directory")
    if p.is_file():
        if p.suffix.lower() in (".npy", ".npz"):
            return ArrayFile(p)
        raise InputError(f"{role} {p}: not a result set folder, build folder or .npy/.npz file")
    if (p / "index.jsonl").exists() or (p / "run.json").exists():
        return ResultSetDir(p)
    for sub, what in (("golden/simulator", "build folder"), ("simulator", "golden folder")):
        if (p / sub / "run.json").exists():
            return ResultSetDir(p / sub, note=f"{role} {p} is a {what}: using its RKNN simulator outputs ({p / sub}); "
                                              f"pass {p / sub.replace('simulator', 'onnx-fp32')} for the FP32 reference")
    raise InputError(f"{role} {p}: not a result set (no run.json/index.jsonl), build folder (no golden/simulator) "
                     f"or .npy/.npz file")
