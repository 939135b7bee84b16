"""Fixtures for the converter tests: tiny models and image folders (CLI helpers: convert_helpers.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from shared_build import shared_across_workers

sys.path.insert(0, str(Path(__file__).parent))
from convert_helpers import run_rkdet  # noqa: E402
from tiny_models import conv_model, image_folder, write_config  # noqa: E402


def _tiny_model_and_images(root: Path) -> dict[str, Path]:
    """The tiny conv model and its calibration and golden folders (deterministic: the same files everywhere)."""
    return {"onnx": conv_model(root / "tiny.onnx"), "cal": image_folder(root / "cal", 6, seed=1),
            "gold": image_folder(root / "gold", 2, seed=2)}


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {**_tiny_model_and_images(root), "onnx_seed1": conv_model(root / "tiny-seed1.onnx", seed=1), "root": root}


@pytest.fixture
def tiny_config(tiny_assets, tmp_path):
    def make(**sections) -> Path:
        return write_config(tmp_path / "tiny.yaml", tiny_assets["onnx"], tiny_assets["cal"], tiny_assets["gold"],
                            **sections)
    return make


@pytest.fixture(scope="session")
def tiny_build(tmp_path_factory) -> tuple[Path, dict]:
    """The tiny model's plain build (`write_config`'s defaults, the files `tiny_assets` has too), converted once
    per run for every worker and module that reads it: (its config, convert's --json summary of the build).
    Read-only: a test that rebuilds or damages it works on a copy."""
    def make(folder: Path) -> Path:
        assets = _tiny_model_and_images(folder)
        cfg = write_config(folder / "tiny.yaml", assets["onnx"], assets["cal"], assets["gold"])
        proc = run_rkdet("convert", "--config", str(cfg), "--out", str(folder / "out"), "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        (folder / "summary.json").write_text(proc.stdout)
        return folder

    folder = shared_across_workers(tmp_path_factory, "tiny-build", make)
    return folder / "tiny.yaml", json.loads((folder / "summary.json").read_text())["builds"][0]
