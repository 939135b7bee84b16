"""Record one finished run folder in `<results>/rkdet.db`: the call a deploy makes when a run completes.

(`rkdet deploy` calls it through rkdet/cli/deploy.py; `rkdet history import` indexes the same folders afterwards.)
"""

from __future__ import annotations

from pathlib import Path

from rkdet.history.db import connect, record_runs
from rkdet.history.ingest import read_runs


def record_folder(results: Path, folder: Path) -> bool:
    """Add `folder` (a completed run under `results`; one run per cell) to the database; False if it was
    already there."""
    runs = read_runs(results, folder)
    conn = connect(results)
    try:
        return record_runs(conn, runs) > 0
    finally:
        conn.close()
