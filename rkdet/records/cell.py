"""A multi-mask run's `result/cells.json` (schema `rkdet.cells/1`): the typed `Cell`, its one host reader and writer.

Why here: deploy judges the cells (rkdet/deploy/cells.py) and `rkdet history` records one run per
completed cell (rkdet/history/ingest.py); history may not import deploy, so the record and its
bounded, strict reader live in records. rkdet-run writes the file on the board (rkdet/onboard/cells.py,
, which cannot import the host); `write_cells` writes the same shape on the host (tests,
fixtures), so the two sides are checked against one reader.

The board's word is untrusted: a cell's name must be `core-<mask>` of a mask rkdet-run knows (the host
then reads `result/<name>/`, never outside `result/`), reasons are bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.errors import BoardError, RkdetError
from rkdet.onboard.resultset import CELLS_SCHEMA, CORE_MASKS
from rkdet.records.deploy_record import JsonObject
from rkdet.records.io import SHARED, write_json
from rkdet.records.io import MAX_RUN_RECORD, read_json_object

MAX_REASON = 300
STATUSES = ("complete", "failed", "skipped", "running")


@dataclass(frozen=True)
class Cell:
    """One core mask of the run, as the board reported it."""

    name: str  # "core-0_1_2"
    core_mask: str
    status: str  # "complete" | "failed" | "skipped" | "running"
    reason: str | None
    exit: int | None = None  # the cell's rkdet-run exit (0, 1, 3) or None (skipped, still running)

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.name, "core_mask": self.core_mask, "status": self.status, "exit": self.exit,
                "reason": self.reason}


def cell_name(core_mask: str) -> str:
    return f"core-{core_mask}"


def read_cells(result: Path, error: type[RkdetError] = BoardError) -> list[Cell] | None:
    """The cells of a multi-mask run (`result/cells.json`; None: a single result set), bounded like every
    run record. A malformed file is `error` naming it and the entry (a broken or hostile board?)."""
    path = result / "cells.json"
    if not path.is_file():
        return None
    try:
        doc = read_json_object(path, limit=MAX_RUN_RECORD, error=error)
    except FileNotFoundError:
        return None
    except RkdetError as exc:
        raise error(f"the board's cells: {exc} (a broken or hostile board?)") from None
    listed = doc.get("cells") or []
    if not isinstance(listed, list):
        raise error(f"{path}: field 'cells' is not a list; the board's cells.json is malformed")
    cells = []
    for item in listed:
        if not isinstance(item, dict):
            raise error("the board's cells.json lists a cell that is not an object")
        mask = str(item.get("core_mask", ""))
        if item.get("cell") != cell_name(mask) or mask not in CORE_MASKS:
            raise error(f"the board's cells.json names an unexpected cell {str(item.get('cell'))[:40]!r}")
        code = item.get("exit")
        cells.append(Cell(cell_name(mask), mask, str(item.get("status")),
                          None if item.get("reason") is None else str(item.get("reason"))[:MAX_REASON],
                          code if isinstance(code, int) and not isinstance(code, bool) else None))
    return cells


def write_cells(result: Path, cells: list[Cell], agree: bool | None = None,
                first_difference: JsonObject | None = None) -> None:
    """`result/cells.json` in rkdet-run's shape (docs/FORMATS.md "Cells"), atomically."""
    write_json(result / "cells.json", {"schema": CELLS_SCHEMA, "cells": [c.to_json() for c in cells],
                                       "agree": agree, "first_difference": first_difference}, SHARED)
