"""Session-wide fixture: the shipped default model converted once, shared by every test that needs it.

Converting takes ~10 s on 2 cores, so the convert, diff and deploy tests all read this one build
(read-only: tests that need to change a build copy it first).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def default_build(tmp_path_factory) -> Path:
    """`rkdet convert --config configs/yolov8.yaml`: the build folder of the default model for rk3588."""
    out = tmp_path_factory.mktemp("default-build")
    proc = subprocess.run([sys.executable, "-m", "rkdet.cli", "convert", "--config", str(REPO / "configs" / "yolov8.yaml"),
                           "--out", str(out), "--json"], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ), timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return Path(json.loads(proc.stdout)["builds"][0]["folder"])
