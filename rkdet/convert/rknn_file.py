"""Read a toolkit2 `.rknn` file without the toolkit, and fingerprint what the model does.

Why: rknn-toolkit2 copies host pointers and uninitialised heap bytes into some parts of the file,
so two identical builds can differ in bytes. `content_fingerprint` hashes only the parts that
define behaviour (header facts, metadata, tensors and quant params, node list, weights and the
NPU register commands), with the known-volatile parts and the provenance string rkdet embeds (the
custom string) left out, so it is equal for identical inputs on any workstation and changes with
weights, quantization, target or config. Layout and evidence:
docs/RKNN_FORMAT.md. Only stdlib + numpy: reading must work on hosts without the toolkit.
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import json
import mmap
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import numpy as np

from rkdet.errors import InputError
from rkdet.onboard.identity import HEADER_SIZE as _HEADER_SIZE, ContainerError, read_container
from rkdet.records import io

__all__ = [
    "FINGERPRINT_SCHEME",
    "PROVENANCE_SECTIONS",
    "RknnComparison",
    "RknnFileInfo",
    "RknnFormatError",
    "Section",
    "TensorAttr",
    "compare_rknn",
    "content_fingerprint",
    "read_rknn",
]

FINGERPRINT_SCHEME = "rkdet.rknn-fingerprint/2"  # /2: the custom string (slot 11) is provenance, not content

_FB_IDENT = b"RKNN"  # FlatBuffers file identifier of the RKNPU2 model payload
_MAX_JSON = 1 << 20  # the metadata JSON (toolkit2 writes ~100 bytes): the board's cap; 64 MiB cost 1.7 GB parsed
MAX_STRING = 16 << 20  # one FlatBuffer string (names, io JSON, build_info); toolkit2 writes KBs
MAX_LITERAL = 1 << 20  # characters of build_info parsed with ast.literal_eval (the toolkit's is ~2 KB)
MAX_WORK_FACTOR = 4  # table/vector bytes a parse may read, per payload byte (toolkit2 files: 1.0; see _Fb.spend)
MAX_WORK_BASE = 1 << 20

# Model (root table) slots, toolkit2 2.x.
_M_REVISION, _M_FORMAT, _M_GRAPHS, _M_BUILD_INFO = 0, 1, 2, 3
_M_COMPILER, _M_TARGET, _M_SOURCE = 7, 8, 9
_M_INPUT_JSON, _M_OUTPUT_JSON, _M_BUFFERS = 12, 13, 20
_M_CUSTOM_STRING = 11  # config(custom_string=...): what RKNN_QUERY_CUSTOM_STRING returns on a board
# Says who built it (rkdet's `rkdet-fp=`), not what the NPU runs: outside the content fingerprint.
PROVENANCE_SECTIONS = (f"model.slot{_M_CUSTOM_STRING}",)
# Graph slots. 8 and 9 hold per-task descriptor tables with raw host pointers: volatile.
_G_TENSORS, _G_NODES, _G_INPUTS, _G_OUTPUTS = 0, 1, 2, 3
_G_VOLATILE = frozenset({8, 9})

# Tensor kind byte: 0x40 runtime-written buffer, 0x41 constant. Role byte: 4 model weight or
# internal buffer, 8 constant the toolkit synthesised (e.g. `*_rs_weight`, `*_ReduceMax_*_weight`).
_KIND_RUNTIME, _KIND_CONST, _ROLE_SYNTH = 0x40, 0x41, 8
# Internal tensor type codes seen in toolkit2 2.5.0 files -> (name, bytes per element).
_DTYPES: dict[int, tuple[str, int]] = {
    1: ("float32", 4), 3: ("int8", 1), 5: ("int16", 2), 6: ("int32", 4),
    10: ("float16", 2), 13: ("bytes", 1),
}


class RknnFormatError(InputError):
    """The file is not a readable toolkit2 `.rknn` (exit 2); the message names the file."""


@dataclass(frozen=True)
class Section:
    """One byte range of the file: `offset`/`size` are absolute; `sha256` of those raw bytes."""

    name: str
    offset: int
    size: int
    sha256: str
    volatile: bool = False


@dataclass(frozen=True)
class TensorAttr:
    """An input or output as the runtime sees it (shape in the model's original layout)."""

    index: int
    name: str
    shape: tuple[int, ...]
    native_shape: tuple[int, ...]
    dtype: str
    layout: str | None
    qnt_method: str | None
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    size_bytes: int


@dataclass(frozen=True)
class RknnFileInfo:
    """What `read_rknn` found. Dict fields are excluded from hashing (the object stays frozen)."""

    path: str
    file_size: int
    file_sha256: str
    format_version: int
    model_format: str
    target_platform: str
    toolkit_version: str
    compiler_version: str
    source_framework: str
    graph_count: int  # >1 for dynamic-shape models (one graph per shape); inputs/outputs: graph 0
    inputs: tuple[TensorAttr, ...]
    outputs: tuple[TensorAttr, ...]
    sections: tuple[Section, ...]
    content_fingerprint: str
    metadata: dict[str, Any] = field(hash=False)
    build_info: dict[str, Any] = field(hash=False)
    custom_string: str = ""  # root slot 11: rkdet embeds its model fingerprint (provenance, not hashed)
    # graph 0's decoded tensor and node tables (what the fingerprint hashes): `rkdet compare-builds` names changes
    tables: dict[str, Any] = field(default_factory=dict, hash=False)


def read_rknn(path: str | Path) -> RknnFileInfo:
    """Parse `path` (its `content_fingerprint` included); raise RknnFormatError (one line, names
    the file) if it is not a readable toolkit2 `.rknn`."""
    return _parse(Path(path))


def content_fingerprint(path: str | Path) -> str:
    """sha256 (hex) over the behaviour-defining content of `path`, stable across identical builds."""
    return read_rknn(path).content_fingerprint


@dataclass(frozen=True)
class RknnComparison:
    """Two builds side by side: byte identity, fingerprint identity, and where the bytes differ."""

    bytes_identical: bool
    fingerprint_identical: bool
    differing_sections: tuple[str, ...]  # leaf sections whose bytes differ (or exist in one file only)
    differing_stable_sections: tuple[str, ...]  # of those, the ones not known to be volatile


def compare_rknn(a: RknnFileInfo, b: RknnFileInfo) -> RknnComparison:
    """Explain a rebuild: when bytes differ but fingerprints match, `differing_stable_sections`
    is normally empty (only pointer tables and uninitialised tails moved)."""
    sa = {s.name: s for s in a.sections if s.name != "model"}
    sb = {s.name: s for s in b.sections if s.name != "model"}
    differing = sorted(n for n in sa.keys() | sb.keys() if n not in sa or n not in sb or sa[n].sha256 != sb[n].sha256)
    stable = [n for n in differing if not (n in sa and sa[n].volatile) and not (n in sb and sb[n].volatile)]
    return RknnComparison(
        bytes_identical=a.file_sha256 == b.file_sha256,
        fingerprint_identical=a.content_fingerprint == b.content_fingerprint,
        differing_sections=tuple(differing), differing_stable_sections=tuple(stable),
    )


def _fingerprint(canonical: dict[str, Any]) -> str:
    payload = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# --- container ------------------------------------------------------------------------------------


def _parse(path: Path) -> RknnFileInfo:
    """Map the file (never read whole: a 2 GiB model costs no copy), hash it in chunks, parse it bounded."""
    try:
        handle = io.open_regular(path, error=RknnFormatError)
    except FileNotFoundError:
        raise RknnFormatError(f"{path}: cannot read (No such file or directory); check the path") from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size < 24:
            return _parse_mapped(path, handle.read(), size)
        try:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise RknnFormatError(f"{path}: cannot read ({exc}); check the path") from None
    view = memoryview(mapped)
    try:
        return _parse_mapped(path, view, size)
    finally:
        view.release()
        try:
            mapped.close()
        except BufferError:  # a slice still held by an error's traceback: unmapped when it is collected
            pass


def _file_sha256(data: bytes | memoryview) -> str:
    """sha256 of the mapped file in 1 MiB chunks (the memory it costs stays the page cache's)."""
    digest = hashlib.sha256()
    for at in range(0, len(data), 1 << 20):
        digest.update(data[at : at + (1 << 20)])
    return digest.hexdigest()


def _parse_mapped(path: Path, data: bytes | memoryview, size: int) -> RknnFileInfo:
    fail = _failer(path)
    try:  # the container header: the board's reader (rkdet.onboard.identity), one definition
        version, model_size, model_at, json_at = read_container(data)
    except ContainerError as exc:
        fail(str(exc))
    model = data[model_at : model_at + model_size]
    (json_size,) = struct.unpack_from("<Q", data, json_at)
    json_end = json_at + 8 + json_size
    if json_end > len(data):
        fail(f"truncated: metadata JSON of {json_size} bytes runs past the end of the file")
    if json_size > _MAX_JSON:
        fail(f"metadata JSON of {json_size} bytes, over the {_MAX_JSON >> 20} MiB an .rknn's metadata may have "
             "(the toolkit writes ~100 bytes); not read")
    if json_end != len(data):
        fail(f"{len(data) - json_end} unexpected bytes after the metadata JSON; the file is corrupt")
    try:
        metadata = io.loads(bytes(data[json_at + 8 : json_end]), f"{path}: metadata JSON", error=RknnFormatError)
    except RknnFormatError as exc:
        fail(f"{str(exc).split(': metadata JSON: ', 1)[-1]} (metadata JSON at offset {json_at + 8}); file corrupt")
    if not isinstance(metadata, dict):
        fail("metadata JSON is not an object; the file is corrupt")
    if bytes(model[4:8]) != _FB_IDENT:
        fail("model payload is not an RKNPU2 FlatBuffer (toolkit1/OpenVX files are not supported)")
    try:
        return _parse_model(path, data, version, model, json_at, json_size, metadata)
    except _FbError as exc:
        fail(f"model payload is corrupt ({exc})")


def _failer(path: Path) -> Callable[[str], NoReturn]:
    def fail(what: str) -> NoReturn:
        raise RknnFormatError(f"{path}: {what}")

    return fail


def _sha(b: bytes | memoryview) -> str:
    return hashlib.sha256(b).hexdigest()


# --- FlatBuffers (just enough: tables, scalars, strings, vectors), bounds-checked -----------------


class _FbError(Exception):
    pass


class _Fb:
    """Minimal bounds-checked FlatBuffers reader; positions are offsets into the model payload."""

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        # every table, vector and string read is paid for in bytes: aliased tables (one table listed
        # a million times) cannot make the parse quadratic; an honest file costs about 3x its size
        self.budget = MAX_WORK_FACTOR * len(buf) + MAX_WORK_BASE

    def spend(self, n: int) -> None:
        self.budget -= n
        if self.budget < 0:
            raise _FbError(f"more table and vector reads than a {len(self.buf)}-byte payload can hold "
                           "(aliased tables?)")

    def scalar(self, fmt: str, pos: int) -> Any:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.buf):
            raise _FbError(f"read of {size} bytes at {pos} outside the {len(self.buf)}-byte payload")
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def root(self) -> int:
        return int(self.scalar("<I", 0))

    def slots(self, table: int) -> list[int | None]:
        """Absolute position of each field of `table` (None where absent)."""
        vtable = table - self.scalar("<i", table)
        vsize = self.scalar("<H", vtable)
        if vsize < 4 or vsize % 2:
            raise _FbError(f"bad vtable size {vsize} at {vtable}")
        count = (vsize - 4) // 2
        self.spend(vsize + 8)
        return [table + o if o else None for o in (self.scalar("<H", vtable + 4 + 2 * i) for i in range(count))]

    def target(self, pos: int) -> int:
        return pos + int(self.scalar("<I", pos))

    def vector(self, pos: int, itemsize: int) -> tuple[int, int]:
        start = self.target(pos)
        n = int(self.scalar("<I", start))
        if start + 4 + n * itemsize > len(self.buf):
            raise _FbError(f"vector of {n} x {itemsize} bytes at {start} runs past the payload")
        self.spend(4 + n * itemsize)
        return start + 4, n

    def string(self, pos: int) -> str:
        start, n = self.vector(pos, 1)
        if n > MAX_STRING:
            raise _FbError(f"string of {n} bytes at {start}, over the {MAX_STRING >> 20} MiB a .rknn string may have")
        self.spend(n)
        try:
            return bytes(self.buf[start : start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise _FbError(f"string at {start} is not UTF-8") from None

    def array(self, pos: int, dtype: str) -> np.ndarray:
        dt = np.dtype(dtype)
        start, n = self.vector(pos, dt.itemsize)
        return np.frombuffer(self.buf, dtype=dt, count=n, offset=start)

    def inline(self, table: int) -> str:
        """A table's vtable and inline fields as hex (for tables we do not decode further)."""
        vtable = table - self.scalar("<i", table)
        vsize, tsize = self.scalar("<H", vtable), self.scalar("<H", vtable + 2)
        if vtable < 0 or vtable + vsize > len(self.buf) or tsize < 4 or table + tsize > len(self.buf):
            raise _FbError(f"bad table at {table}")
        self.spend(vsize + tsize)
        return (bytes(self.buf[vtable : vtable + vsize]) + bytes(self.buf[table + 4 : table + tsize])).hex()

    def tables(self, pos: int) -> list[int]:
        start, n = self.vector(pos, 4)
        return [self.target(start + 4 * i) for i in range(n)]


def _get(slots: Sequence[int | None], i: int) -> int | None:
    return slots[i] if i < len(slots) else None


def _opt(slots: Sequence[int | None], i: int, read: Callable[[int], Any], default: Any) -> Any:
    pos = _get(slots, i)
    return default if pos is None else read(pos)


# --- model ----------------------------------------------------------------------------------------


_TENSOR_FIELDS: dict[int, tuple[str, str]] = {
    0: ("type_code", "u8"), 1: ("kind", "u8"), 2: ("role", "u8"), 3: ("native_shape", "vi32"),
    4: ("shape", "vi32"), 5: ("name", "str"), 6: ("qnt_method", "str"), 7: ("qnt_dtype", "str"),
    8: ("min", "vf32"), 9: ("max", "vf32"), 10: ("scale", "vf32"), 11: ("zero_point", "vi32"),
    12: ("size", "i32"), 13: ("offset", "i32"), 14: ("f14", "i32"), 15: ("f15", "vi32"), 16: ("f16", "vi32"),
    17: ("f17", "vi32"), 18: ("buffer", "i32"), 19: ("f19", "i32"), 20: ("f20", "vi32"),
}
_NODE_FIELDS: dict[int, tuple[str, str]] = {
    0: ("f0", "i32"), 1: ("type", "str"), 2: ("name", "str"), 3: ("f3", "u8"), 4: ("inputs", "vi32"),
    5: ("outputs", "vi32"), 6: ("f6", "vi32"), 7: ("f7", "u8"), 8: ("params", "table"), 9: ("f9", "vi32"),
    10: ("f10", "vi32"), 11: ("f11", "vi32"), 12: ("f12", "vi32"), 13: ("f13", "u8"),
}


def _decode(fb: _Fb, table: int, spec: dict[int, tuple[str, str]]) -> dict[str, Any]:
    """Decode the listed fields of `table`; unknown present slots are recorded by index only."""
    slots = fb.slots(table)
    out: dict[str, Any] = {}
    readers: dict[str, Callable[[int], Any]] = {
        "u8": lambda p: int(fb.scalar("<B", p)),
        "i32": lambda p: int(fb.scalar("<i", p)),
        "str": fb.string,
        "vi32": lambda p: [int(v) for v in fb.array(p, "<i4")],
        "vf32": lambda p: [float(v) for v in fb.array(p, "<f4")],
        "table": lambda p: fb.inline(fb.target(p)),
    }
    for i, pos in enumerate(slots):
        if pos is None:
            continue
        if i in spec:
            key, kind = spec[i]
            out[key] = readers[kind](pos)
        else:
            out.setdefault("unknown_slots", []).append(i)
    return out


@dataclass(frozen=True)
class _Graph:
    """One graph of the model (toolkit2 writes one per input shape of a dynamic-shape model)."""

    tensors: list[dict[str, Any]]  # every decoded field, JSON-able (used for the fingerprint)
    nodes: list[dict[str, Any]]
    inputs: list[int]
    outputs: list[int]
    spans: dict[int, tuple[int, int]]  # subtree span of every slot after the outputs


def _read_graph(fb: _Fb, table: int, anchors: Sequence[int]) -> _Graph:
    g = fb.slots(table)
    ints = lambda p: [int(v) for v in fb.array(p, "<i4")]  # noqa: E731
    graph = _Graph(
        tensors=[_decode(fb, t, _TENSOR_FIELDS) for t in _opt(g, _G_TENSORS, fb.tables, [])],
        nodes=[_decode(fb, t, _NODE_FIELDS) for t in _opt(g, _G_NODES, fb.tables, [])],
        inputs=_opt(g, _G_INPUTS, ints, []), outputs=_opt(g, _G_OUTPUTS, ints, []),
        spans=_slot_spans(fb, g, anchors),
    )
    for k in graph.inputs + graph.outputs:
        if not 0 <= k < len(graph.tensors):
            raise _FbError(f"graph refers to tensor {k} of {len(graph.tensors)}")
    return graph


def _parse_model(
    path: Path, data: bytes, version: int, model: bytes, json_at: int, json_size: int,
    metadata: dict[str, Any],
) -> RknnFileInfo:
    fb = _Fb(model)
    root = fb.root()
    m = fb.slots(root)

    def text(slot: int) -> str:
        return str(_opt(m, slot, fb.string, ""))

    tables = _opt(m, _M_GRAPHS, fb.tables, [])
    if not tables:
        raise _FbError("the model has no graph")
    anchors = sorted(_anchors(fb, root, m, tables))
    graphs = [_read_graph(fb, t, anchors) for t in tables]
    all_tensors = [r for gr in graphs for r in gr.tensors]
    buffers = _buffers(fb, m)
    by_buffer: dict[int, list[dict[str, Any]]] = {}
    for r in all_tensors:  # one pass: each buffer's tensors (was a scan of every tensor per buffer)
        by_buffer.setdefault(r.get("buffer"), []).append(r)  # type: ignore[arg-type]
    digests = [_buffer_digest(model, start, n, by_buffer.get(i, [])) for i, (start, n) in enumerate(buffers)]
    io_json = {k: _json_or_empty(text(s)) for k, s in (("input", _M_INPUT_JSON), ("output", _M_OUTPUT_JSON))}
    compiler_raw = text(_M_COMPILER)
    match = re.search(r"compiler version:\s*(.+)\)\s*$", compiler_raw)

    sections = [Section("header", 0, _HEADER_SIZE, _sha(data[:_HEADER_SIZE])),
                Section("model", _HEADER_SIZE, len(model), _sha(model))]
    for i, ((start, n), digest) in enumerate(zip(buffers, digests)):
        owner = next((r.get("name", "") for r in by_buffer.get(i, [])), "")
        name = f"model.buffer[{i}]{':' + owner if owner else ''}"
        used = digest["hashed"]  # the defined bytes; an uninitialised tail gets its own section
        sections.append(Section(name, _HEADER_SIZE + start, used, _sha(model[start : start + used])))
        if used < n:
            tail = slice(start + digest["hashed"], start + n)
            sections.append(Section(name + ":uninitialised_tail", _HEADER_SIZE + tail.start,
                                    n - digest["hashed"], _sha(model[tail]), volatile=True))
    root_spans = _root_spans(fb, m, anchors)
    for slot, (start, end) in root_spans.items():  # 18: name order varies, content normalised
        sections.append(Section(f"model.slot{slot}", _HEADER_SIZE + start, end - start, _sha(model[start:end]),
                                volatile=slot == _M_NAME_SET))
    for k, (start, end) in enumerate(_name_set_strings(fb, m)):
        sections.append(Section(f"model.slot{_M_NAME_SET}[{k}]", _HEADER_SIZE + start, end - start,
                                _sha(model[start:end]), volatile=True))
    for k, gr in enumerate(graphs):
        prefix = "model.graph" if k == 0 else f"model.graph[{k}]"
        for slot, (start, end) in gr.spans.items():
            sections.append(Section(f"{prefix}.slot{slot}", _HEADER_SIZE + start, end - start,
                                    _sha(model[start:end]), volatile=slot in _G_VOLATILE))
    sections += _structure_sections(model, sections)
    sections.append(Section("metadata_json_size", json_at, 8, _sha(data[json_at : json_at + 8])))
    sections.append(Section("metadata_json", json_at + 8, json_size, _sha(data[json_at + 8 : json_at + 8 + json_size])))

    build_info = _literal_or_empty(text(_M_BUILD_INFO))  # evaluated once (a 1 MiB literal costs ~0.5 GB)
    canonical = {
        "scheme": FINGERPRINT_SCHEME,
        "format_version": version,
        "header_reserved": data[24:_HEADER_SIZE].hex(),
        "model": {
            "format": text(_M_FORMAT), "compiler": compiler_raw, "target": text(_M_TARGET),
            "source": text(_M_SOURCE), "io_json": io_json,
            "build_info": _canonical_literal(build_info),
            "other_slots": _other_model_slots(fb, m, root_spans),
        },
        "metadata": metadata,
        "graphs": [{
            "tensors": gr.tensors, "nodes": gr.nodes, "inputs": gr.inputs, "outputs": gr.outputs,
            # slots we do not decode (memory plan, op groups, ...): their subtree bytes, which are
            # stable across identical builds; the pointer-carrying slots are left out entirely
            "other_slots": {str(i): _sha(model[lo:hi]) for i, (lo, hi) in gr.spans.items() if i not in _G_VOLATILE},
            "volatile_slots_skipped": sorted(i for i in gr.spans if i in _G_VOLATILE),
        } for gr in graphs],
        "buffers": digests,
    }
    first = graphs[0]
    return RknnFileInfo(
        path=str(path), file_size=len(data), file_sha256=_file_sha256(data), format_version=version,
        model_format=text(_M_FORMAT), target_platform=text(_M_TARGET),
        toolkit_version=str(metadata.get("version", "")),
        compiler_version=match.group(1).strip() if match else compiler_raw,
        source_framework=text(_M_SOURCE), graph_count=len(graphs),
        inputs=_io_attrs(first, first.inputs, io_json["input"]),
        outputs=_io_attrs(first, first.outputs, io_json["output"]),
        sections=tuple(sections), content_fingerprint=_fingerprint(canonical), metadata=metadata,
        build_info=build_info,
        custom_string=text(_M_CUSTOM_STRING),
        tables={"tensors": first.tensors, "nodes": first.nodes},
    )


def _structure_sections(model: bytes, leaves: list[Section]) -> list[Section]:
    """The payload bytes no other section covers (tables, vtables, strings, padding), one
    section per gap, so that the leaf sections tile the file and a comparison sees every byte."""
    covered = sorted((s.offset - _HEADER_SIZE, s.offset - _HEADER_SIZE + s.size)
                     for s in leaves if s.name != "model" and s.offset >= _HEADER_SIZE and s.size)
    out, pos = [], 0
    for start, end in covered + [(len(model), len(model))]:
        if start > pos:
            out.append(Section(f"model.structure[{len(out)}]", _HEADER_SIZE + pos, start - pos,
                               _sha(model[pos:start])))
        pos = max(pos, end)
    return out


def _io_attrs(graph: _Graph, indices: list[int], io_json: Any) -> tuple[TensorAttr, ...]:
    """Input/output attributes from the tensor table, layout from the model's io JSON."""
    result = []
    for k in indices:
        r = graph.tensors[k]
        name = str(r.get("name", ""))
        lay = io_json.get(name) if isinstance(io_json, dict) else None
        lay = lay if isinstance(lay, dict) else {}
        code_name = _DTYPES.get(r.get("type_code", -1), (f"type{r.get('type_code')}", 0))[0]
        result.append(TensorAttr(
            index=k, name=name, shape=tuple(r.get("shape", ())), native_shape=tuple(r.get("native_shape", ())),
            dtype=str(r.get("qnt_dtype") or lay.get("dtype") or code_name), layout=lay.get("layout"),
            qnt_method=r.get("qnt_method") or None, scale=tuple(r.get("scale", ())),
            zero_point=tuple(r.get("zero_point", ())), size_bytes=int(r.get("size", 0)),
        ))
    return tuple(result)


def _buffers(fb: _Fb, m: Sequence[int | None]) -> list[tuple[int, int]]:
    """(start, size) of each data buffer in the payload: weights, LUTs, register commands, tasks."""
    out = []
    for t in _opt(m, _M_BUFFERS, fb.tables, []):
        pos = _get(fb.slots(t), 0)
        out.append(fb.vector(pos, 1) if pos is not None else (0, 0))
    return out


def _buffer_digest(model: bytes | memoryview, start: int, n: int, tensors: list[dict[str, Any]]) -> dict[str, Any]:
    """Hash a buffer's defined bytes only (see `_tail_is_uninitialised`); the rest whole. `tensors`: the
    buffer's own."""
    used = n
    for r in tensors:
        if not _tail_is_uninitialised(r):
            continue
        itemsize = _DTYPES.get(r.get("type_code", -1), ("", 0))[1]
        count = _bounded_prod(r["native_shape"], n)
        need = -1 if count is None else count * itemsize + int(r.get("offset", 0))
        if 0 < need <= n:
            used = need
    return {"size": n, "hashed": used, "sha256": _sha(model[start : start + used])}


def _bounded_prod(shape: Sequence[int], limit: int) -> int | None:
    """The product of `shape`, stopping once it passes `limit` (then limit + 1): math.prod over 100 000
    big dimensions of a crafted file took minutes. None for a negative dimension."""
    count = 1
    for d in shape:
        if d < 0:
            return None
        count *= d
        if count > limit:
            return limit + 1
    return count


def _tail_is_uninitialised(r: dict[str, Any]) -> bool:
    """True for tensors whose buffer is allocated larger than the tensor and whose tail the toolkit
    never writes: runtime buffers (kind 0x40: `tempMC*`, `*_BScfgTensor`, `fenceConv_*`) and
    synthesised constants (kind 0x41, role 8). In builds under MALLOC_PERTURB_=165 those tails are
    0x5a (fresh heap) or stale heap; in plain builds they differ from build to build starting
    exactly at native_shape x itemsize. Model weights (role 4) are hashed whole: on rk3576/rv1126b
    their buffers carry data past native_shape x itemsize."""
    if not r.get("native_shape"):
        return False
    kind = r.get("kind")
    return kind == _KIND_RUNTIME or (kind == _KIND_CONST and r.get("role") == _ROLE_SYNTH)


def _slot_spans(fb: _Fb, g: Sequence[int | None], anchors: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Approximate byte span of each graph slot's subtree after the outputs slot: from the slot's
    vector to the next object we know of (`_anchors`). In toolkit2 files each graph slot's nested
    tables follow its vector, so the span covers them (checked: every byte that differs between
    identical builds falls in a volatile span). Used to hash slots we cannot decode and to
    report the volatile ones."""
    spans = {}
    for slot, pos in enumerate(g):
        if pos is None or slot <= _G_OUTPUTS:
            continue
        start = fb.target(pos)
        if not 0 <= start < len(fb.buf):
            raise _FbError(f"graph slot {slot} points outside the payload")
        spans[slot] = (start, _next_anchor(anchors, start))
        fb.spend(spans[slot][1] - start)  # it is hashed: an aliased graph pays for its span again
    return spans


def _next_anchor(anchors: Sequence[int], start: int) -> int:
    """The first anchor after `start` (`anchors` sorted: a bisection, not a scan of every anchor)."""
    return anchors[bisect.bisect_right(anchors, start)]


# Root-table slots we do not name, by what 2.5.0 files hold there: 6 an int (20500 in every file),
# 10 a byte, 14/16/19 strings or bytes ("0", "static_shape"/"dynamic_shape", 8-10 bytes), 18 a
# list of constant names whose order follows the toolkit's hash seed (a set: sorted here).
# Anything else (17: one table per dynamic shape; 11, 15, 21: empty so far) counts by its
# subtree bytes, bounded like the graph slots.
_M_SCALARS = {_M_REVISION: "<i", 6: "<i", 10: "<B"}
_M_BYTES = frozenset({14, 16, 19})
_M_NAME_SET = 18


_M_NAMED = frozenset({_M_FORMAT, _M_GRAPHS, _M_BUILD_INFO, _M_COMPILER, _M_TARGET, _M_SOURCE,
                      _M_INPUT_JSON, _M_OUTPUT_JSON, _M_BUFFERS})


def _name_set_strings(fb: _Fb, m: Sequence[int | None]) -> list[tuple[int, int]]:
    """(start, end) of each string in the constant-name list (slot 18), in file order."""
    pos = _get(m, _M_NAME_SET)
    if pos is None:
        return []
    start, n = fb.vector(pos, 4)
    out = []
    for k in range(n):
        s_start, s_len = fb.vector(start + 4 * k, 1)
        out.append((s_start - 4, s_start + s_len + 1))  # length prefix .. NUL terminator
    return out


def _anchors(fb: _Fb, root: int, m: Sequence[int | None], graphs: list[int]) -> set[int]:
    """Start (and, where known, end) of every object we can locate: spans end at the next one.
    The builder does not nest subtrees strictly (slot 18's strings follow slot 19's vector), so
    exact ends of byte vectors and strings matter."""
    anchors = {len(fb.buf), root, *graphs}
    for i, p in enumerate(m):
        if p is None or i in _M_SCALARS:
            continue
        anchors.add(fb.target(p))
        if i in _M_BYTES:
            start, n = fb.vector(p, 1)
            anchors.add(start + n)
    for start, end in _name_set_strings(fb, m):
        anchors.update((start, end))
    for t in graphs:
        anchors.update(fb.target(p) for p in fb.slots(t) if p is not None)
    return anchors


def _root_spans(fb: _Fb, m: Sequence[int | None], anchors: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Span of each unnamed, non-scalar root slot: to the next anchor (`_anchors`)."""
    spans = {}
    for i, pos in enumerate(m):
        if pos is None or i in _M_NAMED or i in _M_SCALARS:
            continue
        start = fb.target(pos)
        if not 0 <= start < len(fb.buf):
            raise _FbError(f"model slot {i} points outside the payload")
        spans[i] = (start, _next_anchor(anchors, start))
    return spans


def _other_model_slots(fb: _Fb, m: Sequence[int | None], spans: dict[int, tuple[int, int]]) -> dict[str, Any]:
    """Root-table slots we do not name, by value, stable across identical builds (the custom string,
    provenance, left out)."""
    out: dict[str, Any] = {}
    for i, pos in enumerate(m):
        if pos is None or i in _M_NAMED or i == _M_CUSTOM_STRING:  # provenance: PROVENANCE_SECTIONS
            continue
        if i in _M_SCALARS:
            out[str(i)] = int(fb.scalar(_M_SCALARS[i], pos))
        elif i in _M_BYTES:
            start, n = fb.vector(pos, 1)
            fb.spend(2 * n)
            out[str(i)] = fb.buf[start : start + n].hex()
        elif i == _M_NAME_SET:
            start, n = fb.vector(pos, 4)
            out[str(i)] = sorted(fb.string(start + 4 * k) for k in range(n))  # order follows hash seed
        else:
            start, end = spans[i]
            out[str(i)] = _sha(fb.buf[start:end])
    return out


def _json_or_empty(text: str) -> Any:
    try:  # bounded in depth: nested JSON in a crafted file is {"unparsed": ...}, not a RecursionError
        return io.loads(text, "io JSON") if text else {}
    except InputError:
        return {"unparsed": text}


def _literal_or_empty(text: str) -> dict[str, Any]:
    """The toolkit stores its build attributes as a Python dict literal; parse it safely."""
    if len(text) > MAX_LITERAL:  # literal_eval of 50 MiB reached 22 GB: never parsed, kept as its hash
        return {"unparsed_sha256": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
                "unparsed_bytes": len(text)}
    try:
        value = ast.literal_eval(text) if text else {}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return {"unparsed": text}
    return value if isinstance(value, dict) else {"value": value}


def _canonical_literal(value: dict[str, Any]) -> Any:
    """JSON-able and order-stable: sets become sorted lists (their repr order follows the hash seed)."""

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, (set, frozenset)):
            return sorted((plain(x) for x in v), key=repr)
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        return repr(v)

    return plain(value)
