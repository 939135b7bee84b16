"""Read one `accuracy_analysis` output folder of rknn-toolkit2 2.5.0 into typed per-layer rows.

The folder (format learnt by running it, see docs/LAYERS.md): `error_analysis.txt`, a table in graph
order with one row per RKNN layer, `[OpType] name` then entire cos | euc and single cos | euc (rows of
layers fused into the next one have no numbers); `map_name_to_file.txt` (layer name -> dump file
name); `golden/npy/<stem>.npy` (float reference of the layer's output) and `simulator/npy/<stem>.npy`
(the quantized simulator, errors accumulated: "entire"). "single" (that layer alone, fed the float
inputs) exists only as the table's two numbers, so its relative L2 is euc / |golden|.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rkdet.diff.metrics import compare_arrays
from rkdet.errors import ConversionError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ROW = re.compile(r"^\[(?P<op>[^\]]+)\]\s+(?P<name>\S+)\s*(?P<rest>.*)$")


@dataclass(frozen=True)
class Metrics:
    """Simulator vs float for one tensor: cosine, relative L2 (|s-g|/|g|), max abs (None when unknown)."""

    cosine: float | None
    rel_l2: float | None
    max_abs: float | None


@dataclass(frozen=True)
class LayerRow:
    """One row of the toolkit's table: an RKNN layer and its errors on one input."""

    index: int
    op: str
    name: str
    entire: Metrics | None  # None: fused into the next measured layer (no dump of its own)
    single: Metrics | None
    toolkit_entire_cosine: float | None


@dataclass(frozen=True)
class InputAnalysis:
    name: str
    rows: list[LayerRow]


def _float(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _file_map(folder: Path) -> dict[str, str]:
    mapping = {}
    path = folder / "map_name_to_file.txt"
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[2:]:
        parts = line.split()
        if len(parts) == 2:
            mapping[parts[0]] = parts[1]
    return mapping


def _entire(folder: Path, stem: str) -> tuple[Metrics | None, float | None]:
    """Entire-mode metrics from the two dumps, and |golden| (for the single row's relative L2)."""
    g_path, s_path = folder / "golden" / "npy" / f"{stem}.npy", folder / "simulator" / "npy" / f"{stem}.npy"
    if not g_path.is_file() or not s_path.is_file():
        return None, None
    g = np.load(g_path, allow_pickle=False).astype(np.float32, copy=False)
    s = np.load(s_path, allow_pickle=False).astype(np.float32, copy=False)
    if g.shape != s.shape:
        s = s.reshape(g.shape) if s.size == g.size else s
    if g.shape != s.shape:
        return None, None
    st = compare_arrays(g, s)
    norm = float(np.sqrt(np.einsum("i,i->", g.reshape(-1), g.reshape(-1), dtype=np.float64)))
    cosine = st.cosine if st.cosine is not None else (1.0 if st.differing == 0 else None)
    return Metrics(cosine, st.rel_l2, st.max_abs), norm


def read_analysis(name: str, folder: Path) -> InputAnalysis:
    """Parse one accuracy_analysis folder; a missing table is a toolkit failure (exit 4)."""
    table = folder / "error_analysis.txt"
    if not table.is_file():
        raise ConversionError(f"{table}: rknn-toolkit2 accuracy_analysis wrote no error table")
    files = _file_map(folder) if (folder / "map_name_to_file.txt").is_file() else {}
    rows: list[LayerRow] = []
    started = False
    for raw in table.read_text(encoding="utf-8", errors="replace").splitlines():
        line = _ANSI.sub("", raw).strip()
        if line.startswith("-----"):
            started = True
            continue
        match = _ROW.match(line) if started else None
        if not match:
            continue
        values = [v for v in (_float(t) for t in match["rest"].replace("|", " ").split())]
        op, layer = match["op"], match["name"]
        if len(values) < 4:
            rows.append(LayerRow(len(rows), op, layer, None, None, None))
            continue
        stem = Path(files.get(layer, f"{layer}.txt")).stem
        entire, norm = _entire(folder, stem)
        single_rel = values[3] / norm if values[3] is not None and norm else None
        entire = entire or Metrics(values[0], None, None)
        rows.append(LayerRow(len(rows), op, layer, entire, Metrics(values[2], single_rel, None), values[0]))
    if not rows:
        raise ConversionError(f"{table}: no layer rows in rknn-toolkit2's error table (format changed?)")
    return InputAnalysis(name, rows)
