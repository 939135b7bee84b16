"""The matrix of a fleet run: `--matrix core_mask=auto,0,1,2,0_1_2 --matrix backend=rknnlite,onnxruntime`
→ cells, and which of them a board's SoC can run.

Why skip rather than fail: a core mask naming a core the SoC does not have (RK3568, RV1126 and RK3562
have one NPU core; RK3576 two; RK3588 three) cannot be run, so the cell is skipped and the reason said.
`onnxruntime` runs on the board CPU, where a core mask means nothing: it is one cell (core mask `auto`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rkdet import socs
from rkdet.backends.registry import backend as descriptor
from rkdet.choices import BACKENDS, CORE_MASKS
from rkdet.errors import InputError
from rkdet.fleets.run.records import MatrixCell

AXES = ("core_mask", "backend")



@dataclass(frozen=True)
class Planned:
    cell: MatrixCell
    skip: str = ""  # why the board cannot run this cell ("" : it runs)


def parse_matrix(specs: tuple[str, ...], default: MatrixCell) -> list[MatrixCell]:
    """Cells from `AXIS=V1,V2` specs (each axis at most once); an axis not given keeps the config's value."""
    axes: dict[str, list[str]] = {}
    for spec in specs:
        axis, sep, values = spec.partition("=")
        axis = axis.strip().replace("-", "_")
        if not sep or axis not in AXES:
            raise InputError(f"--matrix {spec!r}: give AXIS=V1,V2 with AXIS one of {', '.join(AXES)}")
        if axis in axes:
            raise InputError(f"--matrix: {axis} is given twice; list its values once, comma-separated")
        chosen = [v.strip() for v in values.split(",") if v.strip()]
        allowed = CORE_MASKS if axis == "core_mask" else BACKENDS
        bad = [v for v in chosen if v not in allowed]
        if not chosen or bad:
            raise InputError(f"--matrix {axis}: {', '.join(map(repr, bad)) or 'no value'}; allowed: {', '.join(allowed)}")
        if len(set(chosen)) != len(chosen):
            raise InputError(f"--matrix {axis}: a value is listed twice")
        axes[axis] = chosen
    masks = axes.get("core_mask", [default.core_mask])
    backends = axes.get("backend", [default.backend])
    cells: list[MatrixCell] = []
    for backend in backends:
        for mask in (masks if descriptor(backend).takes_core_mask else ["auto"]):
            if MatrixCell(mask, backend) not in cells:
                cells.append(MatrixCell(mask, backend))
    return cells


def plan(cells: list[MatrixCell], soc: str | None) -> list[Planned]:
    """Each cell, with the reason it is skipped on this SoC (a core it lacks)."""
    cores = socs.npu_cores(soc)
    out = []
    for cell in cells:
        alias = socs.runs_as(soc, cell.core_mask)
        if descriptor(cell.backend).takes_core_mask and socs.mask_needs(cell.core_mask) > cores:
            runs = f" (the runtime runs it as core mask {alias})" if alias != cell.core_mask else ""
            out.append(Planned(cell, f"{soc or 'this SoC'} has {cores} NPU core{'s' if cores != 1 else ''}; "
                                     f"core mask {cell.core_mask} needs {socs.mask_needs(cell.core_mask)}{runs}"))
        else:
            out.append(Planned(cell))
    return out
