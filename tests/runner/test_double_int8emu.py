"""The emulated NPU's INT8 emulation (rkdet.convert.int8emu + the runtime double's default computation):
tensors land on their int8 / float16 grids, any input runs, the FP32 ONNX is an explicit test control, a
fault at a named tensor moves what the INT8 emulation computes, and a fault naming a tensor the model lacks
fails the run in one line naming tensor and model. Tiny models, no toolkit (the table is written here as
the worker writes the toolkit's; tests/convert/test_convert_tiny.py checks a real build has one)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from rkdet.convert import int8emu
from runner_helpers import make_inputs, make_rknn_dir, ort_outputs, run_cli, with_double

MEAN, STD = (10.0, 20.0, 30.0), (50.0, 60.0, 70.0)
C_SCALE, C_ZERO = 0.25, 3
PROB_SCALE, PROB_ZERO = 1 / 255.0, -128
TABLE = {
    "x_int8": {"dtype": "int8", "scale": [0.05], "zero_point": [0]},
    "c": {"dtype": "int8", "scale": [C_SCALE], "zero_point": [C_ZERO]},
    "prob": {"dtype": "float32", "scale": [], "zero_point": []},
    "prob_int8": {"dtype": "int8", "scale": [PROB_SCALE], "zero_point": [PROB_ZERO]},
    "mean": {"dtype": "float16"},
    "W": {"dtype": "int8", "qmethod": "channel", "qtype": "asym", "scale": [0.03] * 4, "zero_point": [0, 1, -1, 2]},
    "B": {"dtype": "int32", "qmethod": "channel", "qtype": "sym", "scale": [1e-3] * 4, "zero_point": [0] * 4},
}


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    root = tmp_path_factory.mktemp("int8board")
    model = make_rknn_dir(root / "model", MEAN, STD)
    emulation = int8emu.fake_quantize(model.with_suffix(".onnx").read_bytes(), TABLE, weights=True)
    (root / "model" / int8emu.FILE).write_bytes(emulation.onnx_bytes)
    prep = json.loads((root / "model" / "model.emu.json").read_text())
    (root / "model" / "model.emu.json").write_text(json.dumps({**prep, "int8emu": int8emu.FILE}))
    return model, make_inputs(root / "inputs", count=2, nhwc_uint8=True), emulation


def _fed(nhwc: np.ndarray) -> np.ndarray:
    x = nhwc.transpose(0, 3, 1, 2).astype(np.float32)
    return np.ascontiguousarray((x - np.array(MEAN, np.float32).reshape(1, 3, 1, 1))
                                / np.array(STD, np.float32).reshape(1, 3, 1, 1))


def test_every_tensor_lands_on_the_grid_the_build_keeps(board, tmp_path):
    model, inputs, emulation = board
    assert (emulation.int8_tensors, emulation.float16_tensors, emulation.int8_weights) == (3, 1, 2)
    from onnx import numpy_helper

    weights = {i.name: numpy_helper.to_array(i) for i in onnx.load_from_string(emulation.onnx_bytes).graph.initializer}
    zero = np.array([0, 1, -1, 2]).reshape(4, 1, 1, 1)
    levels = weights["W"] / 0.03 + zero  # the toolkit's per-channel asymmetric grid
    assert np.allclose(levels, np.round(levels), atol=1e-3) and levels.min() >= -128 and levels.max() <= 127
    path = tmp_path / "emu.onnx"
    path.write_bytes(emulation.onnx_bytes)
    fed = _fed(np.load(inputs / "page-0000.npy"))
    prob, mean = ort_outputs(path, fed)
    levels = prob / PROB_SCALE + PROB_ZERO  # the output's int8 grid
    assert np.allclose(levels, np.round(levels), atol=1e-3) and levels.min() >= -128 and levels.max() <= 127
    assert np.array_equal(mean, mean.astype(np.float16).astype(np.float32))  # float16 where the build keeps it
    fp32_prob, _ = ort_outputs(model.with_suffix(".onnx"), fed)
    assert not np.array_equal(prob, fp32_prob) and np.abs(prob - fp32_prob).max() < 0.1  # rounded, not another model
    names = {n.output[0] for n in onnx.load_from_string(emulation.onnx_bytes).graph.node}
    assert {"c", "prob", "mean"} <= names  # the ONNX's own tensor names: faults and cuts address them


def test_the_emulated_npu_computes_the_int8_emulation_for_any_input(board, tmp_path):
    model, inputs, emulation = board
    (tmp_path / "emu.onnx").write_bytes(emulation.onnx_bytes)
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "2", "--out", tmp_path / "out"],
                   env=with_double(RKDET_EMU_COMPUTE="int8"))
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["emulated"] is True and run["emulates_npu"] is True and "INT8 emulation" in run["backend_detail"]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["deterministic"]
    control = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "fp32"],
                      env=with_double(RKDET_EMU_COMPUTE="fp32"))
    assert control.returncode == 0, control.stderr
    run = json.loads((tmp_path / "fp32" / "run.json").read_text())
    assert run["emulated"] is True and run["emulates_npu"] is False  # the FP32 ONNX: judged against onnx-fp32


def _outputs(out):
    from rkdet.onboard.resultset import read_index

    return {r["input"]: [o["hash"] for o in r["outputs"]] for r in read_index(str(out))}


def test_a_fault_at_a_named_tensor_moves_the_int8_emulation(board, tmp_path):
    model, inputs, _ = board
    clean = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "a"],
                    env=with_double(RKDET_EMU_COMPUTE="int8"))
    faulted = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "b"],
                      env=with_double(RKDET_EMU_FAULT_TENSOR="c", RKDET_EMU_COMPUTE="int8"))
    assert json.loads((tmp_path / "b" / "run.json").read_text())["emulates_npu"] is True
    assert clean.returncode == 0 and faulted.returncode == 0, faulted.stderr
    assert _outputs(tmp_path / "a") != _outputs(tmp_path / "b")


@pytest.mark.parametrize("compute", ["int8", "fp32"])
def test_a_fault_at_a_tensor_the_model_lacks_is_one_line(board, tmp_path, compute):
    model, inputs, _ = board
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "out"],
                   env=with_double(RKDET_EMU_FAULT_TENSOR="no_such_tensor", RKDET_EMU_COMPUTE=compute))
    assert proc.returncode == 3, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "no_such_tensor" in lines[0] and (int8emu.FILE if compute == "int8" else "model.onnx") in lines[0]


@pytest.mark.parametrize("compute", ["int8", "fp32"])
def test_multicore_split_makes_core_0_1_2_differ_for_real(board, tmp_path, compute):
    """The opt-in profile setting (socs.with_multicore_split): NPU_CORE_0_1_2 adds per-core partial sums in
    another order, so each mask repeats itself bit for bit and, computed in float, 0_1_2 differs from core 0.
    In the INT8 emulation the requantization absorbs most of the reordering: whether a value of this tiny
    model sits at a rounding boundary depends on the session's graph optimizations, so only repeatability is
    asserted there (the default model's 116k differing elements are in docs/EMULATOR.md)."""
    from rkdet.emulator.socs import RK3588, with_multicore_split

    model, inputs, _ = board
    root = tmp_path / "root"
    (root / "etc" / "rkdet-emulator").mkdir(parents=True)
    (root / "etc" / "rkdet-emulator" / "runtime.json").write_text(with_multicore_split(RK3588).runtime_control)
    runs = {}
    for mask in ("0", "0_1_2"):
        out = tmp_path / mask
        proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "2", "--core-mask", mask, "--out", out],
                       env=with_double(RKDET_ROOT=str(root), RKDET_EMU_COMPUTE=compute))
        assert proc.returncode == 0, proc.stderr
        assert json.loads((out / "summary.json").read_text())["deterministic"]
        runs[mask] = _outputs(out)
    if compute == "fp32":
        assert runs["0"] != runs["0_1_2"]
