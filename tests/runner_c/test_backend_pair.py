"""The lite2-vs-C cell: `rkdet deploy --backends rknnlite,rknn_c` runs one build through both on the same
emulated RK3588 and says whether what ships (the C API) equals what was proven (lite2): SAME on a clean
double, and for each planted difference (TEST CONTROLS of the emulated board, capi_double/board_exec.py)
the output and the setting: #445 want_float, NCHW declared for NHWC data, #448 an op only lite2 runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rkdet.backends.capi_build import build_runner
from rkdet.emulator.capi_runtime import build_double
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.onboard.backend_table import BACKENDS, DEFAULT_BACKEND

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from shared_build import trim_golden  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "yolov8.yaml"
LITE = DEFAULT_BACKEND  # what was proven
C_API = BACKENDS[-1]  # what ships: the registry's C backend (asserted below)


@pytest.fixture(scope="module")
def world(default_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    assert C_API == "rknn_c"
    tmp = tmp_path_factory.mktemp("pair")
    build = trim_golden(Path(shutil.copytree(default_build, tmp / "build" / default_build.name)), 1)
    build_runner(build_double("aarch64", tmp / "sdk"), "aarch64", tmp / "cache")
    control = Path(tempfile.mkdtemp(prefix="rkdet-capi-ctl-"))
    control.chmod(0o777)
    try:
        with EmulatedBoard("rk3588", tmp / "board", env={"RKDET_EMU_CONTROL_DIR": str(control)}) as board:
            yield {"board": board, "build": build, "cache": tmp / "cache", "control": control}
    finally:
        shutil.rmtree(control, ignore_errors=True)


def _pair(world: dict, out: Path, control: dict | None, *extra: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    plant = world["control"] / "capi.json"
    plant.unlink(missing_ok=True)
    if control is not None:
        plant.write_text(json.dumps(control))
    b = world["board"]
    args = ["deploy", "--board", b.target, "--user", b.user, "--identity", str(b.identity_file),
            "--known-hosts", str(b.known_hosts_file), "--ssh-config", "/dev/null", "--config", str(CONFIG),
            "--build", str(world["build"]), "--out", str(out), "--core-mask", "0", "--repeats", "1",
            "--backends", f"{LITE},{C_API}", *extra]
    done = subprocess.run([sys.executable, "-m", "rkdet.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=600, env={**os.environ, "RKDET_RUNNER_CACHE": str(world["cache"])})
    found = sorted(out.glob("*/*/*/backends.json"))
    return done, (json.loads(found[-1].read_text()) if found else None)


@pytest.mark.slow
def test_a_clean_double_is_same_bitwise(world, tmp_path):
    done, cell = _pair(world, tmp_path / "r", None)
    assert done.returncode == 0, done.stderr[-3000:]
    assert cell is not None and cell["same"] is True and cell["a"] == LITE and cell["b"] == C_API
    assert cell["compared"] == 1 and cell["outputs"] == [] and cell["settings"] == []
    assert f"{C_API} vs {LITE}: SAME (bitwise)" in done.stderr


@pytest.mark.slow
def test_want_float_0_is_named_with_its_outputs_445(world, tmp_path):
    """The application's setting given to deploy (it goes to the C runner only: lite2 takes no such setting)."""
    done, cell = _pair(world, tmp_path / "r", None, "--runner-setting", "want_float=0")
    assert done.returncode == 1, done.stderr[-3000:]
    assert cell is not None and cell["same"] is False
    assert cell["settings"] == [{"key": "want_float", "a": 1, "b": 0}]
    assert {d["how"] for d in cell["outputs"]} == {"dtype float32 vs int8"}
    assert {d["output"] for d in cell["outputs"]} == {"box0", "cls0", "box1", "cls1", "box2", "cls2"}
    assert "want_float rknn_c=0 vs rknnlite=1" in done.stderr and "box0" in done.stderr


@pytest.mark.slow
def test_nchw_declared_for_nhwc_data_is_named(world, tmp_path):
    """Planted by the emulated board's test control (as an application built with that setting would run)."""
    done, cell = _pair(world, tmp_path / "r", {"args": ["--input-fmt", "nchw"]})
    assert done.returncode == 1, done.stderr[-3000:]
    assert cell is not None and cell["settings"] == [{"key": "input_fmt", "a": "nhwc", "b": "nchw"}]
    assert cell["outputs"] and {d["how"] for d in cell["outputs"]} == {"values differ bitwise"}


@pytest.mark.slow
def test_an_op_only_lite2_runs_is_named_448(world, tmp_path):
    done, cell = _pair(world, tmp_path / "r", {"reject_op": "Floor"})
    assert done.returncode == 1, done.stderr[-3000:]
    assert cell is not None and cell["same"] is False and "Floor" in cell["refused"]
    assert "rknn_init" in cell["refused"] and "Traceback" not in done.stderr
