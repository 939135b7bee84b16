"""The on-board program is deployable alone: its zipapp runs from a bare copy with only numpy/onnxruntime,
and the whole rkdet/onboard/ package is 3.6-safe."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rkdet.onboard.resultset import read_index
from runner_helpers import PACKAGE, RUNNER, assert_one_line_error, base_env, make_inputs, make_model, run_cli

SITE = Path(__import__("numpy").__file__).resolve().parent.parent


def _bare_python(tmp_path: Path, packages) -> Path:
    """A fresh venv (no pip, no rkdet) whose site-packages holds only the given packages."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=base_env())
    site = next((venv / "lib").glob("python3*/site-packages"))
    for name in packages:
        for path in SITE.glob(name):
            (site / path.name).symlink_to(path)
    return venv / "bin" / "python"


def test_a_lone_copy_runs_with_python_isolated(tmp_path):
    python = _bare_python(tmp_path, ["numpy", "numpy.libs", "onnxruntime"])
    board = tmp_path / "board"
    board.mkdir()
    lone = board / "rkdet-onboard.pyz"
    shutil.copy(RUNNER, lone)
    probe = subprocess.run([str(python), "-I", "-c", "import rkdet"], capture_output=True, text=True, env=base_env())
    assert probe.returncode != 0 and "No module named 'rkdet'" in probe.stderr
    model = make_model(board / "m.onnx")
    inputs = make_inputs(board / "in", count=2)
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "3", "--backend", "onnxruntime",
                    "--out", board / "out"], python=python, script=lone, flags=("-I",))
    assert proc.returncode == 0, proc.stderr
    assert len(read_index(str(board / "out"))) == 6
    assert json.loads((board / "out" / "summary.json").read_text())["deterministic"] is True


def test_runtime_not_installed_is_exit_3(tmp_path):
    python = _bare_python(tmp_path, ["numpy", "numpy.libs"])
    model = make_model(tmp_path / "m.onnx")
    inputs = make_inputs(tmp_path / "in", count=1)
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--backend", "onnxruntime",
                    "--out", tmp_path / "out"], python=python, flags=("-I",))
    assert_one_line_error(proc, 3)
    assert "onnxruntime is not installed" in proc.stderr and not (tmp_path / "out").exists()
    no_numpy = _bare_python(tmp_path / "nn", [])
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--backend", "onnxruntime",
                    "--out", tmp_path / "out"], python=no_numpy, flags=("-I",))
    assert_one_line_error(proc, 3)
    assert "numpy is not installed" in proc.stderr


def _vermin(path: Path):
    vermin = Path(sys.executable).parent / "vermin"
    return subprocess.run([str(vermin), "-t=3.6-", "--no-tips", "--violations", str(path)],
                          capture_output=True, text=True, env=base_env())


def test_vermin_finds_no_python_3_6_violations(tmp_path):
    assert {"run.py", "selfcheck.py", "atomic.py", "resultset.py"} <= {p.name for p in PACKAGE.glob("*.py")}
    proc = _vermin(PACKAGE)  # every module of the package (the zipapp holds them all)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the check is live: the same invocation fails on 3.8-only syntax
    bad = tmp_path / "bad.py"
    bad.write_text("if (n := 1):\n    pass\n")
    assert _vermin(bad).returncode != 0


def _python36():
    for candidate in ("/root/.pyenv/versions/3.6.15/bin/python", shutil.which("python3.6")):
        if candidate and Path(candidate).exists():
            probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                                   capture_output=True, text=True, env=base_env())
            if probe.stdout.strip() == "(3, 6)":
                return candidate
    return None


@pytest.mark.skipif(_python36() is None, reason="no Python 3.6 interpreter here; vermin covers the check")
def test_python36_compiles_the_onboard_package():
    code = "import sys\nfor p in sys.argv[1:]: compile(open(p).read(), p, 'exec')"
    files = sorted(str(p) for p in PACKAGE.glob("*.py"))
    assert len(files) >= 10
    proc = subprocess.run([_python36(), "-I", "-c", code, *files], capture_output=True, text=True, env=base_env())
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(_python36() is None, reason="no Python 3.6 interpreter here; vermin covers the check")
def test_python36_runs_the_zipapp_to_its_numpy_check(tmp_path):
    """A real 3.6 (no numpy here) imports every module the run needs from the zipapp and ends in one line."""
    model = make_model(tmp_path / "m.onnx")
    inputs = make_inputs(tmp_path / "in", count=1)
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--backend", "onnxruntime",
                    "--out", tmp_path / "out"], python=_python36(), flags=("-I",))
    assert_one_line_error(proc, 3)
    assert "numpy is not installed" in proc.stderr, proc.stderr
