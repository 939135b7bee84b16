"""Fixtures for the converter tests: tiny models and image folders (CLI helpers: convert_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import conv_model, image_folder, write_config  # noqa: E402


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
