"""What changed between two `.rknn` files, by what our reader can name (rkdet.convert.rknn_file).

Why its own module: the raw byte comparison (`compare_rknn`) says *which* byte ranges differ; a person
deciding on a toolkit upgrade asks *what* changed: the weights, the quantization, the NPU register
commands, or only the toolkit's own identity (its version string, the compiler string, rkdet's
embedded fingerprint, which hashes the toolkit version). Volatile ranges (host pointers,
uninitialised tails) are left out, as the content fingerprint leaves them out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.convert.rknn_file import RknnFileInfo, compare_rknn, read_rknn

# Categories, in the order a report lists them. "identity": what names the toolkit, not what the model does.
CATEGORIES = ("weights and constants", "register commands", "tasks", "runtime buffers", "quantization",
              "inputs and outputs", "node list", "tensor table", "graph tables (memory plan, op groups)",
              "tensor and node tables, strings", "strings and layout", "metadata (toolkit version)", "metadata (beyond the version)", "custom string", "header",
              "other model slots")
IDENTITY = frozenset({"metadata (toolkit version)", "custom string", "strings and layout"})


@dataclass(frozen=True)
class Change:
    category: str
    name: str  # the section, tensor or field
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"category": self.category, "name": self.name, "detail": self.detail}


@dataclass(frozen=True)
class ContentDiff:
    a: RknnFileInfo
    b: RknnFileInfo
    bytes_identical: bool
    fingerprint_identical: bool
    changes: tuple[Change, ...]
    volatile_differing: int  # byte ranges that differ but are known to (pointers, uninitialised tails)

    @property
    def program_identical(self) -> bool:
        """Nothing but the toolkit's identity differs: same weights, quantization, register commands, tables."""
        return all(c.category in IDENTITY for c in self.changes)

    def summary(self) -> str:
        if self.fingerprint_identical:
            return "model content identical (content fingerprint equal)"
        cats = sorted({c.category for c in self.changes}, key=CATEGORIES.index)
        head = ("model program identical; only the toolkit's identity differs" if self.program_identical
                else "model content differs")
        return f"{head}: {', '.join(cats)}"

    def to_json(self) -> dict[str, Any]:
        def side(i: RknnFileInfo) -> dict[str, Any]:
            return {"toolkit_version": i.toolkit_version, "compiler_version": i.compiler_version,
                    "target_platform": i.target_platform, "file_sha256": i.file_sha256,
                    "content_fingerprint": i.content_fingerprint, "file_size": i.file_size}

        return {"a": side(self.a), "b": side(self.b), "bytes_identical": self.bytes_identical,
                "fingerprint_identical": self.fingerprint_identical, "program_identical": self.program_identical,
                "summary": self.summary(), "changes": [c.to_json() for c in self.changes],
                "volatile_ranges_differing": self.volatile_differing}


def _category(section: str) -> str:
    m = re.match(r"model\.buffer\[\d+\](?::(.*))?$", section)
    if m:
        owner = m.group(1) or ""
        if owner == "regcmd":
            return "register commands"
        if owner == "task":
            return "tasks"
        if owner.startswith("tempMC"):
            return "runtime buffers"
        return "weights and constants"
    if section == "header":
        return "header"
    if section.startswith("metadata_json"):
        return "metadata (beyond the version)"
    if section == "model.slot11":
        return "custom string"
    if section.startswith("model.graph"):
        return "graph tables (memory plan, op groups)"
    if section.startswith("model.structure"):
        return "tensor and node tables, strings"
    return "other model slots"


def _io(a: RknnFileInfo, b: RknnFileInfo) -> list[Change]:
    out = []
    for kind, xs, ys in (("input", a.inputs, b.inputs), ("output", a.outputs, b.outputs)):
        if [t.name for t in xs] != [t.name for t in ys]:
            out.append(Change("inputs and outputs", kind + "s", f"{[t.name for t in xs]} -> {[t.name for t in ys]}"))
            continue
        for x, y in zip(xs, ys):
            for what in ("shape", "native_shape", "dtype", "layout"):
                if getattr(x, what) != getattr(y, what):
                    out.append(Change("inputs and outputs", f"{kind} {x.name}",
                                      f"{what} {getattr(x, what)} -> {getattr(y, what)}"))
            if (x.qnt_method, x.scale, x.zero_point) != (y.qnt_method, y.scale, y.zero_point):
                out.append(Change("quantization", f"{kind} {x.name}", f"{x.qnt_method} scale {list(x.scale)} zero point "
                                  f"{list(x.zero_point)} -> {y.qnt_method} scale {list(y.scale)} zero point {list(y.zero_point)}"))
    return out


def _quant_tab(a: RknnFileInfo, b: RknnFileInfo) -> list[Change]:
    """The calibrated ranges the toolkit recorded per tensor (build_info quant_tab)."""
    ta = (a.build_info.get("quant_tab") or {}) if isinstance(a.build_info, dict) else {}
    tb = (b.build_info.get("quant_tab") or {}) if isinstance(b.build_info, dict) else {}
    out = []
    for name in sorted(set(ta) | set(tb), key=str):
        x, y = ta.get(name), tb.get(name)
        if not isinstance(x, dict) or not isinstance(y, dict):
            out.append(Change("quantization", str(name), "in one file only"))
            continue
        for key in ("qmethod", "qtype", "min", "max"):
            if x.get(key) != y.get(key):
                out.append(Change("quantization", str(name), f"{key} {x.get(key)} -> {y.get(key)}"))
    return out


def _tables(a: RknnFileInfo, b: RknnFileInfo) -> list[Change]:
    """Node list (op type and name, in order) and tensor table (by name, field by field) of graph 0."""
    out = []
    na = [(n.get("type"), n.get("name")) for n in a.tables.get("nodes", [])]
    nb = [(n.get("type"), n.get("name")) for n in b.tables.get("nodes", [])]
    if na != nb:
        sa, sb = {repr(n) for n in na}, {repr(n) for n in nb}  # sets: `in` a list was quadratic (50 000 nodes: 294 s)
        gone, new = [n for n in na if repr(n) not in sb], [n for n in nb if repr(n) not in sa]
        out.append(Change("node list", f"{len(na)} -> {len(nb)} nodes",
                          f"only in A: {gone[:8]}; only in B: {new[:8]}" if gone or new else "same nodes, other order"))
    else:
        for x, y in zip(a.tables.get("nodes", []), b.tables.get("nodes", [])):
            if x != y:
                keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
                out.append(Change("node list", f"node {x.get('name')}", f"fields {', '.join(keys)} differ"))
    ta = {t.get("name", ""): t for t in a.tables.get("tensors", [])}
    tb = {t.get("name", ""): t for t in b.tables.get("tensors", [])}
    for name in sorted(set(ta) | set(tb)):
        x, y = ta.get(name), tb.get(name)
        if x is None or y is None:
            out.append(Change("tensor table", f"tensor {name!r}", "in one file only"))
            continue
        keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k) and k != "buffer")  # buffers: by owner
        quant = [k for k in keys if k in ("scale", "zero_point", "min", "max", "qnt_method", "qnt_dtype")]
        if quant:
            out.append(Change("quantization", f"tensor {name!r}",
                              "; ".join(f"{k} {x.get(k)} -> {y.get(k)}" for k in quant)[:300]))
        rest = [k for k in keys if k not in quant]
        if rest:
            out.append(Change("tensor table", f"tensor {name!r}", f"fields {', '.join(rest)} differ"))
    return out


def _buffers(a: RknnFileInfo, b: RknnFileInfo) -> list[Change]:
    """Data buffers keyed by the tensor that owns them (weights by name, regcmd, task ...), defined bytes only."""
    def owned(info: RknnFileInfo) -> dict[str, tuple[str, int]]:
        out: dict[str, tuple[str, int]] = {}
        for sec in info.sections:
            m = re.match(r"model\.buffer\[(\d+)\](?::(.*))?$", sec.name)
            if m and not sec.volatile:
                key = m.group(2) or f"buffer[{m.group(1)}]"
                while key in out:  # a name owning two buffers: keep both, in file order
                    key += "'"
                out[key] = (sec.sha256, sec.size)
        return out

    oa, ob = owned(a), owned(b)
    changes = []
    for key in sorted(set(oa) | set(ob)):
        x, y = oa.get(key), ob.get(key)
        if x == y:
            continue
        cat = _category(f"model.buffer[0]:{key.rstrip(chr(39))}")
        detail = ("only in B" if x is None else "only in A" if y is None
                  else f"{x[1]} -> {y[1]} bytes" if x[1] != y[1] else f"{x[1]} bytes, content differs")
        changes.append(Change(cat, key, detail))
    return changes


def _same_but_version(x: dict[str, Any], y: dict[str, Any]) -> bool:
    return {k: v for k, v in x.items() if k != "version"} == {k: v for k, v in y.items() if k != "version"}


def compare_content(a_path: Path, b_path: Path) -> ContentDiff:
    a, b = read_rknn(a_path), read_rknn(b_path)
    raw = compare_rknn(a, b)
    sa = {s.name: s for s in a.sections}
    sb = {s.name: s for s in b.sections}
    changes = _buffers(a, b)
    table_changes = _tables(a, b)
    structure = []
    for name in raw.differing_stable_sections:
        if name.startswith("model.buffer["):
            continue  # compared by owner tensor above: buffer indices move when the toolkit reorders them
        x, y = sa.get(name), sb.get(name)
        detail = ("in one file only" if x is None or y is None
                  else f"{x.size} -> {y.size} bytes" if x.size != y.size else f"{x.size} bytes, content differs")
        category = _category(name)
        if category == "metadata (beyond the version)" and _same_but_version(a.metadata, b.metadata):
            category = "metadata (toolkit version)"
        if category == "tensor and node tables, strings":
            structure.append(name)
            continue
        changes.append(Change(category, name, detail))
    if structure:  # the bytes between the named objects (tables, vtables, strings): one line
        size = lambda info: sum(s.size for s in info.sections if s.name.startswith("model.structure"))  # noqa: E731
        what = f"{len(structure)} range(s) differ ({size(a)} -> {size(b)} bytes in all)"
        if table_changes:
            changes.append(Change("tensor and node tables, strings", "model.structure", what))
        else:
            changes.append(Change("strings and layout", "model.structure",
                                  what + "; the decoded tensor and node tables are equal"))
    changes += table_changes
    if a.toolkit_version != b.toolkit_version:
        changes.append(Change("metadata (toolkit version)", "toolkit version",
                              f"{a.toolkit_version} -> {b.toolkit_version}"))
    if a.custom_string != b.custom_string:
        changes.append(Change("custom string", "custom_string", f"{a.custom_string!r} -> {b.custom_string!r}"))
    changes += _io(a, b) + _quant_tab(a, b)
    if a.target_platform != b.target_platform:
        changes.append(Change("header", "target platform", f"{a.target_platform} -> {b.target_platform}"))
    if a.compiler_version != b.compiler_version:  # the compiler string lives in the tables-and-strings ranges
        changes.append(Change("strings and layout", "compiler version",
                              f"{a.compiler_version} -> {b.compiler_version}"))
    changes.sort(key=lambda c: (CATEGORIES.index(c.category), c.name))
    return ContentDiff(a, b, raw.bytes_identical, raw.fingerprint_identical, tuple(changes),
                       len(raw.differing_sections) - len(raw.differing_stable_sections))
