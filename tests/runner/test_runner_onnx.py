"""rkdet-run end to end with the onnxruntime backend on a tiny real model."""

import json
from pathlib import Path

import numpy as np
import pytest

from rkdet.onboard import run as runner
from rkdet.onboard.hashing import output_hash
from rkdet.onboard.resultset import read_index, read_jsonl
from runner_helpers import (RUNNER, assert_one_line_error, base_env, make_inputs, make_model,
                            make_two_input_model, ort_outputs, run_cli)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return make_model(root / "m.onnx"), make_inputs(root / "inputs", count=3)


def test_result_set_is_complete_deterministic_and_content_addressed(tiny, tmp_path, monkeypatch):
    model, inputs = tiny
    monkeypatch.setenv("RKDET_ROOT", str(tmp_path / "no-board"))
    out = tmp_path / "out"
    code = runner.main(["--model", str(model), "--inputs", str(inputs), "--repeats", "6", "--warmup", "2",
                        "--backend", "onnxruntime", "--snapshot-every", "2", "--out", str(out)])
    assert code == 0
    run = json.loads((out / "run.json").read_text())
    assert run["schema"] == "rkdet.run/1" and run["status"] == "complete" and run["error"] is None
    assert run["backend"] == "onnxruntime" and run["emulated"] is False
    assert "intra_op=1" in run["backend_detail"] and run["backend_options"]["execution_mode"] == "ORT_SEQUENTIAL"
    assert run["outputs"] == ["prob", "mean"] and run["repeats"] == 6 and run["warmup"] == 2
    assert [i["name"] for i in run["inputs"]] == ["page-0000", "page-0001", "page-0002"]
    assert run["inputs"][0]["shape"] == [1, 3, 16, 16] and run["inputs"][0]["dtype"] == "float32"
    assert run["finished_unix"] >= run["started_unix"]

    index = read_index(str(out))
    assert [(r["run"], r["input"]) for r in index] == [(r, "page-%04d" % i) for r in range(6) for i in range(3)]
    assert all(r["backend"] == "onnxruntime" and r["latency_ms"] > 0 for r in index)

    # each distinct output stored once, named by its hash, equal to onnxruntime computed directly
    stored = sorted(p.name for p in (out / "outputs").iterdir())
    expected = set()
    for i in range(3):
        arr = np.load(inputs / ("page-%04d.npy" % i))
        for name, ref in zip(["prob", "mean"], ort_outputs(model, arr)):
            expected.add(output_hash(ref) + ".npy")
            kept = np.load(out / "outputs" / (output_hash(ref) + ".npy"), allow_pickle=False)
            assert np.array_equal(kept, ref) and kept.dtype == ref.dtype
    assert stored == sorted(expected)
    assert {o["hash"] + ".npy" for r in index for o in r["outputs"]} == expected

    summary = json.loads((out / "summary.json").read_text())
    assert summary["deterministic"] is True and summary["runs"] == 6
    assert all(v == {"distinct": 1, "runs": 6, "first_divergence": None} for v in summary["inputs"].values())

    snaps = read_jsonl(str(out / "snapshots.jsonl"))
    assert [(s["at"], s["run"]) for s in snaps] == [("before", None), ("periodic", 1), ("periodic", 3), ("after", 5)]
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


def test_multi_input_npz_samples_are_fed_by_name(tmp_path):
    model = make_two_input_model(tmp_path / "two.onnx")
    inputs = tmp_path / "in"
    inputs.mkdir()
    rng = np.random.default_rng(3)
    a, b = rng.random((1, 8)).astype(np.float32), rng.random((1, 8)).astype(np.float32)
    np.savez(inputs / "s1.npz", b=b, a=a)  # key order differs from the model's input order
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "2", "--backend", "onnxruntime",
                    "--out", tmp_path / "out"])
    assert proc.returncode == 0, proc.stderr
    rec = read_index(str(tmp_path / "out"))[0]
    kept = np.load(tmp_path / "out" / "outputs" / (rec["outputs"][0]["hash"] + ".npy"))
    np.testing.assert_array_equal(kept, a * b + a)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert {t["name"] for t in run["inputs"][0]["tensors"]} == {"a", "b"}

    np.savez(inputs / "s2.npz", a=a, c=b)
    bad = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--backend", "onnxruntime",
                   "--out", tmp_path / "out2"])
    assert_one_line_error(bad, 2)
    assert "s2.npz" in bad.stderr and not (tmp_path / "out2").exists()


def test_cpu_affinity_is_applied_and_recorded(tiny, tmp_path):
    model, inputs = tiny
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--backend", "onnxruntime",
                    "--cpu-affinity", "0", "--out", tmp_path / "out"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "out" / "run.json").read_text())["affinity"] == [0]


def test_console_script_help_documents_exit_codes():
    script = Path(__import__("sys").executable).parent / "rkdet-run"
    proc = __import__("subprocess").run([str(script), "--help"], capture_output=True, text=True, env=base_env())
    assert proc.returncode == 0
    for code in ("0 ", "1 ", "2 ", "3 ", "130"):
        assert "\n  " + code in proc.stdout
    assert "--snapshot-every" in proc.stdout and "RKDET_ROOT" in proc.stdout
    assert RUNNER.name == "rkdet-onboard.pyz"
