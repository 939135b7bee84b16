"""The fidelity gate judges class scores apart from boxes: whole-output cosine hides a collapse."""

from __future__ import annotations

import numpy as np
import pytest

from rkdet.config import FidelitySection
from rkdet.convert import fidelity
from rkdet.errors import ConversionError


def _per_tensor_int8(x: np.ndarray) -> np.ndarray:
    """Quantize with one int8 scale for the whole tensor, as INT8 does for a single output."""
    scale = float(np.abs(x).max()) / 127.0
    return (np.clip(np.round(x / scale), -128, 127) * scale).astype(np.float32)


def test_stock_single_output_collapse_is_caught(tmp_path):
    rng = np.random.default_rng(0)
    n = 8400
    boxes = rng.uniform(0, 640, (1, 4, n)).astype(np.float32)  # pixel coordinates up to the input size
    scores = np.zeros((1, 11, n), np.float32)
    scores[0, rng.integers(0, 11, 60), rng.integers(0, n, 60)] = rng.uniform(0.55, 0.95, 60)
    ref = np.concatenate([boxes, scores], axis=1)
    quant = _per_tensor_int8(ref)  # scale 640/127 ~ 5: every score rounds to 0
    slices = fidelity.slices_for(("output0",), ((1, 15, n),), "none")
    whole = fidelity.measure({"p": {"output0": quant}}, {"p": {"output0": ref}},
                             [fidelity.Slice("output0", "all", None)])
    assert whole["output0"]["min_cosine"] > 0.999  # looks perfect as a whole
    report = fidelity.measure({"p": {"output0": quant}}, {"p": {"output0": ref}}, slices)
    assert report["output0[scores]"]["sim_max"] == 0.0
    with pytest.raises(ConversionError, match="class scores collapsed"):
        fidelity.gate(report, FidelitySection(), "rk3588")


def test_split_outputs_keep_scores():
    rng = np.random.default_rng(1)
    cls = np.zeros((1, 11, 80, 80), np.float32)
    cls[0, 3, 10:20, 10:20] = rng.uniform(0.6, 0.9, (10, 10))
    quant = _per_tensor_int8(cls)
    slices = fidelity.slices_for(("cls0",), ((1, 11, 80, 80),), "yolov8-split-head")
    report = fidelity.measure({"p": {"cls0": quant}}, {"p": {"cls0": cls}}, slices)
    assert report["cls0"]["score_recall"] == 1.0
    assert fidelity.gate(report, FidelitySection(), "rk3588") == []


def test_quantization_gate_rejects_float_tensors():
    header = {"inputs": [{"name": "x", "dtype": "int8"}], "outputs": [{"name": "y", "dtype": "float16"}]}
    with pytest.raises(ConversionError, match="left tensors unquantized: y"):
        fidelity.quantization_gate(header, "w8a8", True, "rk3588")
    fidelity.quantization_gate(header | {"outputs": [{"name": "y", "dtype": "int8"}]}, "w8a8", True, "rk3588")
