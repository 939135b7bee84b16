"""Shared helpers for the rkdet-run tests: a tiny real ONNX model, inputs, and running the CLI.

The model is built with onnx.helper (Conv + Sigmoid, plus a ReduceMean second output) from seeded
weights, so every expected output is computed by onnxruntime itself, never hard-coded.
"""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rkdet.onboard import program

_PROGRAM_DIR = tempfile.mkdtemp(prefix="rkdet-onboard-test-")
atexit.register(shutil.rmtree, _PROGRAM_DIR, True)
RUNNER = Path(program.build(_PROGRAM_DIR))  # the on-board program as a board gets it: one zipapp
PACKAGE = Path(program.HERE)  # rkdet/onboard/
DOUBLE_DIR = PACKAGE.parent / "emulator" / "runtime_double"
SHAPE = (1, 3, 16, 16)


def make_model(path: Path, seed: int = 7) -> Path:
    """Conv(3->4, 3x3) -> Sigmoid ("prob"), and ReduceMean of the conv ("mean"): two outputs."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Sigmoid", ["c"], ["prob"]),
         helper.make_node("ReduceMean", ["c"], ["mean"], axes=[2, 3], keepdims=0)],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 4, 16, 16]),
         helper.make_tensor_value_info("mean", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def make_two_input_model(path: Path) -> Path:
    """y = a * b + a: a multi-input model for the .npz input path."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "a"], ["y"])],
        "two",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def make_inputs(folder: Path, count: int = 3, seed: int = 11, nhwc_uint8: bool = False) -> Path:
    """count seeded inputs named page-000N.npy: float NCHW, or uint8 NHWC as a board is fed."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        if nhwc_uint8:
            arr = rng.integers(0, 256, (1, 16, 16, 3)).astype(np.uint8)
        else:
            arr = rng.random(SHAPE).astype(np.float32)
        np.save(folder / ("page-%04d.npy" % i), arr)
    return folder


def make_rknn_dir(folder: Path, mean=(10.0, 20.0, 30.0), std=(50.0, 60.0, 70.0)) -> Path:
    """What the deploy puts on an emulated board: model.rknn + model.onnx + model.emu.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.rknn").write_bytes(b"RKNN placeholder: the emulated runtime computes model.onnx")
    make_model(folder / "model.onnx")
    (folder / "model.emu.json").write_text(json.dumps({"mean": list(mean), "std": list(std), "input_layout": "nchw"}))
    return folder / "model.rknn"


def base_env(**extra: str) -> dict:
    """The environment for a runner subprocess: no PYTHONPATH, no fault controls, no RKDET_ROOT."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RKDET_ROOT", "RKDET_EMU_FAULT", "RKDET_EMU_CONTROL_DIR", "RKDET_EMU_ONNX")}
    env.update(extra)
    return env


def run_cli(args, env=None, python=sys.executable, script=RUNNER, timeout=120, flags=(), command="run"):
    """Run `python3 rkdet-onboard.pyz run ARGS` (as on a board) and return the CompletedProcess."""
    cmd = [str(python), *flags, str(script), command, *[str(a) for a in args]]
    return subprocess.run(cmd, env=env if env is not None else base_env(), capture_output=True,
                          text=True, timeout=timeout)


def with_double(**extra: str) -> dict:
    """Environment with the emulated RKNNLite on PYTHONPATH."""
    return base_env(PYTHONPATH=str(DOUBLE_DIR), **extra)


def ort_outputs(model: Path, array: np.ndarray) -> list:
    """Reference outputs computed directly with onnxruntime (the onnx-fp32 reference's session settings)."""
    import onnxruntime as ort

    from rkdet.onboard.reference import session_options
    session = ort.InferenceSession(str(model), session_options(ort), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: array})


def assert_one_line_error(proc, code: int) -> None:
    """A bad-input path: the documented code, one line on stderr, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def listing(folder: Path) -> list:
    """Every path under folder (relative), to prove nothing was written."""
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
