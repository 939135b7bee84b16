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
