"""Fixtures for the converter tests: tiny models, image folders, and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import conv_model, image_folder, write_config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RKDET = [sys.executable, "-m", "rkdet.cli"]


def run_rkdet(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 600):
    """Run the real CLI in a subprocess (exit codes and stderr exactly as a user sees them)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*RKDET, *args], capture_output=True, text=True, env=full_env, cwd=cwd or REPO,
                          timeout=timeout, check=False)


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {
        "onnx": conv_model(root / "tiny.onnx"),
        "onnx_seed1": conv_model(root / "tiny-seed1.onnx", seed=1),
        "cal": image_folder(root / "cal", 6, seed=1),
        "gold": image_folder(root / "gold", 2, seed=2),
        "root": root,
    }


@pytest.fixture
def tiny_config(tiny_assets, tmp_path):
    def make(**sections) -> Path:
        return write_config(tmp_path / "tiny.yaml", tiny_assets["onnx"], tiny_assets["cal"], tiny_assets["gold"],
                            **sections)
    return make
