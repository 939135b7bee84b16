"""Helpers for the converter tests (a uniquely named module: `conftest` names collide across test dirs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RKDET = [sys.executable, "-m", "rkdet.cli"]


def run_rkdet(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 600):
    """Run the real CLI in a subprocess (exit codes and stderr exactly as a user sees them)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*RKDET, *args], capture_output=True, text=True, env=full_env, cwd=cwd or REPO,
                          timeout=timeout, check=False)


def own_workers(own_tmp: Path) -> list[int]:
    """Live processes working in a test's own temp dir (a convert run with TMPDIR=own_tmp keeps its hermetic
    build folders, so its toolkit workers' cwd, there): other converts on the machine are not counted."""
    pids = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(proc_dir / "cwd"))
        except OSError:  # gone, or not ours to read
            continue
        if cwd == own_tmp or own_tmp in cwd.parents:
            pids.append(int(proc_dir.name))
    return pids
