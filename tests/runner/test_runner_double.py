"""The rknnlite backend against the emulated RKNNLite test double (results labelled emulated)."""

import ast
import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import rkdet.onboard.backends
from rkdet.emulator.fake_tree import build_fake_tree
from rkdet.emulator.socs import RK3588
from rkdet.onboard.hashing import output_hash
from rkdet.onboard.resultset import read_index
from runner_helpers import (DOUBLE_DIR, assert_one_line_error, base_env, make_inputs, make_rknn_dir,
                            ort_outputs, run_cli, with_double)

MEAN, STD = (10.0, 20.0, 30.0), (50.0, 60.0, 70.0)


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    root = tmp_path_factory.mktemp("board")
    model = make_rknn_dir(root / "model", MEAN, STD)
    return model, make_inputs(root / "inputs", count=2, nhwc_uint8=True)


def expected_outputs(model, nhwc):
    """What the double must compute: NHWC uint8 -> NCHW float, (x - mean) / std per channel."""
    x = nhwc.transpose(0, 3, 1, 2).astype(np.float32)
    x = (x - np.array(MEAN, np.float32).reshape(1, 3, 1, 1)) / np.array(STD, np.float32).reshape(1, 3, 1, 1)
    return ort_outputs(model.with_suffix(".onnx"), np.ascontiguousarray(x))


def test_double_runs_are_labelled_emulated_and_computed_for_real(board, tmp_path):
    model, inputs = board
    out = tmp_path / "out"
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "4", "--warmup", "1",
                    "--core-mask", "0_1_2", "--out", out], env=with_double())
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["backend"] == "rknnlite" and run["emulated"] is True
    assert "EMULATED" in run["backend_detail"] and "not an NPU" in run["backend_detail"]
    assert run["core_mask"] == "0_1_2" and run["outputs"] == ["output0", "output1"]
    index = read_index(str(out))
    assert len(index) == 8 and all(r["backend"] == "rknnlite" for r in index)
    for i in range(2):
        ref = expected_outputs(model, np.load(inputs / ("page-%04d.npy" % i)))
        rec = next(r for r in index if r["input"] == "page-%04d" % i)
        assert [o["hash"] for o in rec["outputs"]] == [output_hash(a) for a in ref]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["deterministic"] and all(v["distinct"] == 1 for v in summary["inputs"].values())


def test_fault_knob_is_reported_with_run_input_and_output(board, tmp_path):
    model, inputs = board
    target = np.load(inputs / "page-0001.npy")
    warmup, run = 2, 3
    fault = {"occurrence": warmup + run, "input_sha256": hashlib.sha256(target.tobytes()).hexdigest(),
             "output": 1, "index": 2, "bit": 0}
    out = tmp_path / "out"
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "6", "--warmup", str(warmup), "--out", out],
                   env=with_double(RKDET_EMU_FAULT=json.dumps(fault)))
    assert proc.returncode == 1, proc.stderr  # complete, but not deterministic
    summary = json.loads((out / "summary.json").read_text())
    assert summary["deterministic"] is False
    assert summary["inputs"]["page-0000"]["distinct"] == 1
    assert summary["inputs"]["page-0001"] == {"distinct": 2, "runs": 6, "first_divergence": {"run": 3, "output": "output1"}}
    # the kept faulty output differs from the good one in exactly the injected bit
    recs = [r for r in read_index(str(out)) if r["input"] == "page-0001"]
    good = np.load(out / "outputs" / (recs[0]["outputs"][1]["hash"] + ".npy"))
    bad = np.load(out / "outputs" / (recs[3]["outputs"][1]["hash"] + ".npy"))
    flipped = np.bitwise_xor(good.reshape(-1).view(np.uint32), bad.reshape(-1).view(np.uint32))
    assert flipped.tolist() == [0, 0, 1, 0]
    assert recs[4]["outputs"] == recs[0]["outputs"]  # a single occurrence only


def test_fault_control_file_can_be_armed_by_name(board, tmp_path):
    model, inputs = board
    control = tmp_path / "control"
    control.mkdir()
    (control / "fault.json").write_text(json.dumps({"occurrence": 1, "input_sha256": None, "output": 0,
                                                     "index": 5, "bit": 31}))
    out = tmp_path / "out"
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "2", "--out", out],
                   env=with_double(RKDET_EMU_CONTROL_DIR=str(control)))
    assert proc.returncode == 1, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    # occurrence 1 with any input = the second call = run 0 of page-0001: a run-0 fault diverges at run 1
    assert summary["inputs"]["page-0001"]["first_divergence"] == {"run": 1, "output": "output0"}


def test_emulated_latency_follows_the_npu_clock(board, tmp_path, monkeypatch):
    sys.path.insert(0, str(DOUBLE_DIR))
    try:
        from rknnlite import api as double_api
    finally:
        sys.path.remove(str(DOUBLE_DIR))
    root = build_fake_tree(RK3588, tmp_path / "root")
    monkeypatch.setenv("RKDET_ROOT", str(root))
    node = root / "sys/class/devfreq/fdab0000.npu"
    freqs = [int(f) for f in (node / "available_frequencies").read_text().split()]
    (node / "cur_freq").write_text("%d\n" % min(freqs))
    assert double_api._npu_clock_ratio() == pytest.approx(max(freqs) / min(freqs))
    (node / "cur_freq").write_text("%d\n" % max(freqs))
    assert double_api._npu_clock_ratio() == 1.0
    monkeypatch.setenv("RKDET_ROOT", str(tmp_path / "empty"))
    assert double_api._npu_clock_ratio() == 1.0

    # end to end: at the lowest clock an inference's compute time is stretched by max/min (held against
    # a clock of the test's own: each inference "computes" for exactly 0.25 s; no machine-speed threshold)
    lite = double_api.RKNNLite()
    model, inputs = board
    assert lite.load_rknn(str(model)) == 0 and lite.init_runtime(core_mask=lite.NPU_CORE_AUTO) == 0
    x = np.load(inputs / "page-0000.npy")
    monkeypatch.setenv("RKDET_ROOT", str(root))
    ticks = iter(float(i) * 0.25 for i in range(1000))
    slept: list[float] = []
    monkeypatch.setattr(double_api, "_clock", lambda: next(ticks))
    monkeypatch.setattr(double_api, "_sleep", slept.append)
    assert lite.inference(inputs=[x]) is not None
    assert slept == []  # at the highest clock: no stretch
    (node / "cur_freq").write_text("%d\n" % min(freqs))
    assert lite.inference(inputs=[x]) is not None
    assert slept == [pytest.approx(0.25 * (max(freqs) / min(freqs) - 1.0))]


def test_double_returns_codes_not_exceptions(board, tmp_path):
    sys.path.insert(0, str(DOUBLE_DIR))
    try:
        from rknnlite.api import RKNNLite
    finally:
        sys.path.remove(str(DOUBLE_DIR))
    lite = RKNNLite()
    assert lite.load_rknn(str(tmp_path / "nope.rknn")) == -1
    assert lite.inference(inputs=[np.zeros((1, 16, 16, 3), np.uint8)]) is None
    model, inputs = board
    assert lite.load_rknn(str(model)) == 0
    assert lite.init_runtime(core_mask=12345) == -1
    assert lite.init_runtime() == 0
    assert lite.inference(inputs=[np.zeros((1, 8, 8, 3), np.uint8)]) is None  # wrong shape
    first = lite.inference(inputs=[np.load(inputs / "page-0000.npy")])
    kept = first[0].copy()
    second = lite.inference(inputs=[np.load(inputs / "page-0001.npy")])
    assert second[0] is not first[0] and np.array_equal(first[0], kept)  # 2.5.0 default: independent arrays
    first = lite.inference(inputs=[np.load(inputs / "page-0000.npy")], reuse_outputs=True)
    kept = first[0].copy()
    second = lite.inference(inputs=[np.load(inputs / "page-0001.npy")], reuse_outputs=True)
    assert second[0] is first[0] and not np.array_equal(first[0], kept)  # staging buffers, overwritten


def test_missing_onnx_beside_the_rknn_is_a_runtime_failure(tmp_path):
    (tmp_path / "lonely.rknn").write_bytes(b"RKNN")
    inputs = make_inputs(tmp_path / "in", count=1, nhwc_uint8=True)
    proc = run_cli(["--model", tmp_path / "lonely.rknn", "--inputs", inputs, "--repeats", "1",
                    "--out", tmp_path / "out"], env=with_double())
    assert proc.returncode == 3 and "load_rknn" in proc.stderr.splitlines()[-1]
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_rknnlite_not_installed(board, tmp_path):
    model, inputs = board
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "out"], env=base_env())
    assert_one_line_error(proc, 3)
    assert "rknnlite" in proc.stderr and not (tmp_path / "out").exists()


def test_io_json_checks_inputs_and_names_outputs(board, tmp_path):
    model, inputs = board
    io = model.with_suffix(".io.json")
    io.write_text(json.dumps({"inputs": [{"name": "images", "shape": [1, 16, 16, 3], "dtype": "uint8", "layout": "nhwc"}],
                              "outputs": ["prob", "mean"]}))
    try:
        ok = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "ok"], env=with_double())
        assert ok.returncode == 0, ok.stderr
        assert json.loads((tmp_path / "ok" / "run.json").read_text())["outputs"] == ["prob", "mean"]
        io.write_text(json.dumps({"inputs": [{"name": "images", "shape": [1, 32, 32, 3], "dtype": "uint8"}]}))
        bad = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "bad"], env=with_double())
        assert_one_line_error(bad, 2)
        assert "page-0000.npy" in bad.stderr and "(1,32,32,3)" in bad.stderr and not (tmp_path / "bad").exists()
    finally:
        io.unlink()


def test_legacy_v1_api_without_core_mask_is_detected(board, tmp_path):
    # shadow `rknnlite.api` with a v1-shaped class while keeping the double importable underneath
    shim = tmp_path / "shim" / "rknnlite"
    (shim / "api").mkdir(parents=True)
    (shim / "__init__.py").write_text("RKDET_EMULATED = 'rkdet legacy v1 shim over the emulated RKNNLite'\n")
    (shim / "api" / "__init__.py").write_text(
        "import importlib.util, os\n"
        "spec = importlib.util.spec_from_file_location('_double_api', os.environ['DOUBLE_API'])\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "RKDET_EMULATED = mod.RKDET_EMULATED\n"
        "class RKNNLite(mod.RKNNLite):\n"
        "    def init_runtime(self, target=None, device_id=None, async_mode=False):\n"
        "        return mod.RKNNLite.init_runtime(self)\n")
    model, inputs = board
    env = base_env(PYTHONPATH=str(shim.parent), DOUBLE_API=str(DOUBLE_DIR / "rknnlite" / "api" / "__init__.py"))
    ok = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "ok"], env=env)
    assert ok.returncode == 0, ok.stderr
    run = json.loads((tmp_path / "ok" / "run.json").read_text())
    assert run["backend_options"]["legacy_api"] is True and "legacy v1" in run["backend_detail"] and run["emulated"]
    bad = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--core-mask", "1",
                   "--out", tmp_path / "bad"], env=env)
    assert_one_line_error(bad, 2)
    assert "core_mask" in bad.stderr and not (tmp_path / "bad").exists()


def test_onnx_from_env_and_default_normalisation(board, tmp_path, monkeypatch):
    """No <stem>.onnx / .emu.json beside the .rknn: RKDET_EMU_ONNX names the model; mean 0, std 255."""
    sys.path.insert(0, str(DOUBLE_DIR))
    try:
        from rknnlite.api import RKNNLite
    finally:
        sys.path.remove(str(DOUBLE_DIR))
    model, inputs = board
    lone = tmp_path / "elsewhere.rknn"
    lone.write_bytes(b"RKNN")
    monkeypatch.setenv("RKDET_EMU_ONNX", str(model.with_suffix(".onnx")))
    lite = RKNNLite()
    assert lite.load_rknn(str(lone)) == 0 and lite.init_runtime() == 0
    x = np.load(inputs / "page-0000.npy")
    got = lite.inference(inputs=[x], data_format=["nhwc"])
    ref = ort_outputs(model.with_suffix(".onnx"), np.ascontiguousarray(x.transpose(0, 3, 1, 2).astype(np.float32) / 255.0))
    assert all(np.array_equal(g, r) for g, r in zip(got, ref))


# ---- the double held to the real rknn-toolkit-lite2 2.5.0 API -------------------------------------

REPO = Path(__file__).resolve().parents[2]
LITE2_WHEEL = "rknn_toolkit_lite2-2.5.0-*aarch64*.whl"


def _lite2_wheel():
    """The aarch64 wheel .ci/setup downloads (never installed): $RKDET_WHEEL_CACHE or .venv/rkdet-wheels."""
    where = Path(os.environ.get("RKDET_WHEEL_CACHE") or REPO / ".venv" / "rkdet-wheels")
    found = sorted(where.glob(LITE2_WHEEL))
    if found:
        return found[0]
    message = "%s: no %s; run .ci/setup (it downloads the wheel)" % (where, LITE2_WHEEL)
    if os.environ.get("CI") == "true":
        pytest.fail(message)  # in CI a missing wheel is a set-up bug, never a skip
    pytest.skip(message)


def _api(tree):
    """RKNNLite's methods -> [(parameter, default source or None)] and its NPU_CORE_* constants."""
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "RKNNLite")
    methods, constants = {}, {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            args = node.args.args[1:]  # without self
            defaults = [None] * (len(args) - len(node.args.defaults)) + [ast.unparse(d) for d in node.args.defaults]
            methods[node.name] = [(a.arg, d) for a, d in zip(args, defaults)]
            assert not node.args.vararg and not node.args.kwarg and not node.args.kwonlyargs, node.name
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                constants[target.id] = node.value.value
    return methods, constants


@pytest.fixture(scope="module")
def real_api():
    with zipfile.ZipFile(_lite2_wheel()) as wheel:
        source = wheel.read("rknnlite/api/rknn_lite.py").decode("utf-8")
    return _api(ast.parse(source))


@pytest.fixture(scope="module")
def double_api():
    return _api(ast.parse((DOUBLE_DIR / "rknnlite" / "api" / "__init__.py").read_text()))


def _runner_uses():
    """What rkdet/onboard/backends.py calls on RKNNLite: method -> keyword names, and the NPU_CORE_* it looks up."""
    tree = ast.parse(Path(rkdet.onboard.backends.__file__).read_text())
    calls = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "_lite"):
            calls.setdefault(node.func.attr, set()).update(k.arg for k in node.keywords)
    constants = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and n.value.startswith("NPU_CORE_")}
    return calls, constants


def test_runner_uses_only_what_the_real_rknnlite_has(real_api):
    methods, constants = real_api
    calls, masks = _runner_uses()
    assert {"load_rknn", "init_runtime", "inference", "release"} <= set(calls)  # the parse found the calls
    for method, keywords in calls.items():
        assert method in methods, "runner calls RKNNLite.%s, which 2.5.0 does not have" % method
        assert keywords <= {name for name, _ in methods[method]}, (method, keywords, methods[method])
    assert masks and masks <= set(constants), masks - set(constants)


def test_double_has_the_real_signatures_and_defaults(real_api, double_api):
    """Every public method of the real RKNNLite exists in the double with the same parameters, in
    the same order, with the same defaults; so does every NPU_CORE_* constant, with its value."""
    real_methods, real_constants = real_api
    double_methods, double_constants = double_api
    assert {"inference", "load_rknn", "init_runtime"} <= set(real_methods)
    for name, params in real_methods.items():
        if name.startswith("_") and name != "__init__":
            continue
        assert double_methods.get(name) == params, (name, params, double_methods.get(name))
    assert dict(real_methods["inference"])["reuse_outputs"] == "False"  # what the double lacked before
    assert dict(real_methods["load_rknn"])["key_path"] == "None"
    assert {k: v for k, v in double_constants.items() if k.startswith("NPU_CORE_")} == real_constants


def test_double_honours_data_type_key_path_and_frame_id(board, tmp_path):
    sys.path.insert(0, str(DOUBLE_DIR))
    try:
        from rknnlite.api import RKNNLite
    finally:
        sys.path.remove(str(DOUBLE_DIR))
    model, inputs = board
    lite = RKNNLite()
    assert lite.get_sdk_version() is None  # before init_runtime, as the real one
    assert lite.load_rknn(str(model), key_path=str(tmp_path / "missing_key.bin")) == -1
    assert lite.load_rknn(str(model)) == 0 and lite.init_runtime() == 0
    assert lite.list_devices() == ([], [])
    x = np.load(inputs / "page-0000.npy")
    plain = lite.inference([x])
    assert [np.array_equal(a, b) for a, b in zip(lite.inference([x], data_type="uint8"), plain)] == [True, True]
    assert lite.inference([x], data_type="bfloat7") is None
    with_id = lite.inference([x], get_frame_id=True)
    assert len(with_id) == len(plain) + 1 and isinstance(with_id[-1], int)
