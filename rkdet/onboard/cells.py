"""Several core masks in one session: each mask a cell with its own result set, and cells.json.

Why its own module: `--core-mask 0,1,2,0_1_2` runs every mask one after the other in one pinned
session (OUT/core-<mask>/), skips the masks the SoC lacks, and records whether the cells agree bit for
bit (rknn-toolkit2 #228); the run of one cell is rkdet-run's (`run_cell`, passed in by run.py).
"""

import os
from typing import Any, Callable, Dict, List, Optional

from .atomic import write_json_atomic
from .exits import EXIT_BOARD, EXIT_DIFFERENT, EXIT_OK, RunnerError, check_stop
from .resultset import CELLS_SCHEMA, first_hashes


def mask_cores(mask):
    # type: (str) -> List[int]
    """The NPU cores a core mask names ("0_1_2" -> [0, 1, 2]; "auto" -> [])."""
    return [] if mask == "auto" else [int(c) for c in mask.split("_")]


def run_cells(args, samples, affinity, check, run_cell):
    # type: (Any, List[Any], Optional[List[int]], Dict[str, Any], Callable[..., int]) -> int
    """Every core mask a cell (OUT/core-<mask>/, a result set each), one after the other in this one
    (pinned) session; cells.json records each cell's status, the skipped masks and whether the cells
    agree bit for bit (each input's outputs the same in every cell: rknn-toolkit2 #228)."""
    out = args.out
    if os.path.isdir(out) and os.listdir(out):
        raise RunnerError("%s: already holds files; choose a new --out so results never mix" % out)
    if not os.path.isdir(out):
        os.makedirs(out)
    doc = {"schema": CELLS_SCHEMA, "cells": [], "agree": None, "first_difference": None}
    cells_path = os.path.join(out, "cells.json")
    codes = []
    reference = None  # (cell, first hashes)
    for mask in args.core_masks:
        cell = {"cell": "core-" + mask, "core_mask": mask, "status": None, "exit": None, "reason": None}
        doc["cells"].append(cell)
        missing = [c for c in mask_cores(mask) if args.npu_cores is not None and c >= args.npu_cores]
        if missing:
            cell.update(status="skipped", reason="the SoC has %d NPU core(s); core mask %s needs core %s"
                        % (args.npu_cores, mask, ",".join(map(str, missing))))
            write_json_atomic(cells_path, doc)
            continue
        check_stop()
        cell_out = os.path.join(out, cell["cell"])
        cell["status"] = "running"
        write_json_atomic(cells_path, doc)
        try:
            code = run_cell(args, mask, cell_out, samples, affinity, check)
        except RunnerError as err:
            if err.exit_code != EXIT_BOARD:
                raise
            cell.update(status="failed", exit=EXIT_BOARD, reason=str(err))
            codes.append(EXIT_BOARD)
            write_json_atomic(cells_path, doc)
            continue
        cell.update(status="complete", exit=code, reason=None if code == EXIT_OK else "runs of an input differ")
        codes.append(code)
        first = first_hashes(cell_out)
        if reference is None:
            reference = (cell["cell"], first)
        elif doc["first_difference"] is None:
            for name in sorted(first):
                theirs, ours = reference[1].get(name), first[name]
                if theirs is not None and theirs != ours:
                    output = next((n for (n, h), (_, rh) in zip(ours, theirs) if h != rh), None)
                    doc["first_difference"] = {"cells": [reference[0], cell["cell"]], "input": name, "output": output}
                    break
        write_json_atomic(cells_path, doc)
    ran = [c for c in doc["cells"] if c["status"] == "complete"]
    doc["agree"] = None if len(ran) < 2 else doc["first_difference"] is None
    write_json_atomic(cells_path, doc)
    if EXIT_BOARD in codes:
        return EXIT_BOARD
    if not ran:
        raise RunnerError("no core mask of %s can run on this SoC (%s NPU core(s))" % (args.core_mask, args.npu_cores))
    return EXIT_DIFFERENT if EXIT_DIFFERENT in codes or doc["agree"] is False else EXIT_OK

