"""Helpers for the converter tests (a uniquely named module: `conftest` names collide across test dirs)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from process_tree import leftovers, tree_argv

REPO = Path(__file__).resolve().parents[2]
RKDET = [sys.executable, "-m", "rkdet.cli"]


def run_rkdet(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 600):
    """Run the real CLI in a subprocess (exit codes and stderr exactly as a user sees them).
    `.leftovers` on the result: command lines of its descendants that outlived it (process_tree)."""
    full_env = {**os.environ, **(env or {})}
    fd, report = tempfile.mkstemp(prefix="rkdet-tree-", suffix=".json")
    os.close(fd)
    proc = subprocess.run(tree_argv([*RKDET, *args], Path(report)), capture_output=True, text=True, env=full_env,
                          cwd=cwd or REPO, timeout=timeout, check=False)
    proc.args = [*RKDET, *args]
    proc.leftovers = leftovers(Path(report))
    return proc
