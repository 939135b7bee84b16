"""Every bad-input path: documented exit code, one line on stderr, nothing half-written."""

import json
import shutil
import subprocess

import numpy as np
import pytest

from rkdet.onboard.hashing import output_hash
from rkdet.onboard.resultset import read_index
from runner_helpers import RUNNER, assert_one_line_error, base_env, listing, make_inputs, make_model, run_cli


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    return make_model(root / "m.onnx"), make_inputs(root / "inputs", count=2)


def ort_args(model, inputs, out, *extra):
    return ["--model", model, "--inputs", inputs, "--repeats", "2", "--backend", "onnxruntime", "--out", out, *extra]


def test_missing_model(tiny, tmp_path):
    _, inputs = tiny
    proc = run_cli(ort_args(tmp_path / "absent.onnx", inputs, tmp_path / "out"))
    assert_one_line_error(proc, 2)
    assert "absent.onnx" in proc.stderr and listing(tmp_path) == []


def test_unloadable_model(tiny, tmp_path):
    _, inputs = tiny
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    proc = run_cli(ort_args(tmp_path / "junk.onnx", inputs, tmp_path / "out"))
    assert_one_line_error(proc, 2)
    assert "junk.onnx" in proc.stderr and listing(tmp_path) == ["junk.onnx"]


@pytest.mark.parametrize("case", ["missing-dir", "empty-dir", "corrupt-npy", "mixed"])
def test_missing_or_unreadable_inputs(tiny, tmp_path, case):
    model, good = tiny
    inputs = tmp_path / "inputs"
    if case != "missing-dir":
        inputs.mkdir()
    if case == "corrupt-npy":
        (inputs / "page.npy").write_bytes(b"\x93NUMPY garbage")
    if case == "mixed":
        shutil.copy(good / "page-0000.npy", inputs)
        np.savez(inputs / "other.npz", x=np.zeros(3))
    before = listing(tmp_path)
    proc = run_cli(ort_args(model, inputs, tmp_path / "out"))
    assert_one_line_error(proc, 2)
    assert str(inputs) in proc.stderr
    assert listing(tmp_path) == before


@pytest.mark.parametrize("arr", [np.zeros((1, 3, 8, 8), np.float32), np.zeros((1, 3, 16, 16), np.float64)],
                         ids=["shape", "dtype"])
def test_shape_or_dtype_mismatch_is_caught_before_the_first_run(tiny, tmp_path, arr):
    model, _ = tiny
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    np.save(inputs / "wrong.npy", arr)
    proc = run_cli(ort_args(model, inputs, tmp_path / "out"))
    assert_one_line_error(proc, 2)
    assert "wrong.npy" in proc.stderr and "'x'" in proc.stderr and "(1,3,16,16)" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_out_dir_that_already_holds_results_is_refused(tiny, tmp_path):
    model, inputs = tiny
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.json").write_text("{}")
    proc = run_cli(ort_args(model, inputs, out))
    assert_one_line_error(proc, 2)
    assert listing(out) == ["run.json"] and (out / "run.json").read_text() == "{}"


def test_out_dir_under_a_file_is_not_writable(tiny, tmp_path):
    model, inputs = tiny
    (tmp_path / "file").write_text("x")
    proc = run_cli(ort_args(model, inputs, tmp_path / "file" / "out"))
    assert_one_line_error(proc, 2)
    assert "file/out" in proc.stderr


def _in_private_mount(script: str, tmp_path, timeout=120):
    """Run a shell script in a private mount namespace (tmpfs mounts vanish with it)."""
    if shutil.which("unshare") is None:
        pytest.fail("util-linux unshare is required (installed by .ci/setup)")
    return subprocess.run(["unshare", "-m", "sh", "-ec", script], capture_output=True, text=True,
                          timeout=timeout, env=base_env(RUNNER=str(RUNNER), PY=__import__("sys").executable, T=str(tmp_path)))


def test_read_only_out_filesystem(tiny, tmp_path):
    model, inputs = tiny
    (tmp_path / "ro").mkdir()
    proc = _in_private_mount(
        'mount -n -t tmpfs -o ro,size=64k tmpfs "$T/ro"\n'
        '"$PY" "$RUNNER" run --model %s --inputs %s --repeats 1 --backend onnxruntime --out "$T/ro/out" 2>"$T/stderr" || echo $? >"$T/rc"\n'
        'ls -A "$T/ro" >"$T/listing"\n' % (model, inputs), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "rc").read_text().strip() == "2"
    stderr = (tmp_path / "stderr").read_text()
    assert len(stderr.strip().splitlines()) == 1 and "Read-only" in stderr and "Traceback" not in stderr
    assert (tmp_path / "listing").read_text() == ""


def test_disk_full_mid_run_keeps_completed_runs_and_leaves_no_temp_files(tiny, tmp_path):
    """ENOSPC for real: a 256 KiB tmpfs fills up while the index grows."""
    model, inputs = tiny
    (tmp_path / "small").mkdir()
    proc = _in_private_mount(
        'mount -n -t tmpfs -o size=256k tmpfs "$T/small"\n'
        'rc=0; "$PY" "$RUNNER" run --model %s --inputs %s --repeats 100000 --backend onnxruntime --out "$T/small/out" 2>"$T/stderr" || rc=$?\n'
        'echo $rc >"$T/rc"; cp -a "$T/small/out" "$T/copy"\n' % (model, inputs), tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "rc").read_text().strip() == "3"
    stderr = (tmp_path / "stderr").read_text()
    assert len(stderr.strip().splitlines()) == 1 and "No space left" in stderr and "Traceback" not in stderr
    copy = tmp_path / "copy"
    index = read_index(str(copy))
    assert len(index) > 100
    assert [(r["run"], r["input"]) for r in index] == [(i // 2, "page-%04d" % (i % 2)) for i in range(len(index))]
    for rec in index[:4]:
        for out in rec["outputs"]:
            assert output_hash(np.load(copy / "outputs" / (out["hash"] + ".npy"))) == out["hash"]
    assert not [p for p in copy.rglob("*") if ".tmp-" in p.name]
    run = json.loads((copy / "run.json").read_text())  # "running" if even the final rewrite had no room
    assert run["status"] in ("running", "failed") and run["schema"] == "rkdet.run/1"


def test_cpu_affinity_refused_by_the_kernel(tiny, tmp_path):
    model, inputs = tiny
    proc = run_cli(ort_args(model, inputs, tmp_path / "out", "--cpu-affinity", "4095"))
    assert_one_line_error(proc, 2)
    assert "--cpu-affinity" in proc.stderr and not (tmp_path / "out").exists()


def test_usage_errors_exit_2(tiny, tmp_path):
    model, inputs = tiny
    for extra in (["--core-mask", "1"], ["--repeats", "0"]):
        args = ort_args(model, inputs, tmp_path / "out")
        if extra[0] == "--repeats":
            args[args.index("--repeats") + 1] = "0"
        else:
            args += extra
        proc = run_cli(args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert not (tmp_path / "out").exists()
