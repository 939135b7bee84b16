"""kill -9 mid-run: every completed run stays readable, its outputs present, run.json valid."""

import json
import signal
import subprocess
import time

import numpy as np

from rkdet.onboard.hashing import output_hash
from rkdet.onboard.resultset import read_index, summarize
from runner_helpers import RUNNER, base_env, make_inputs, make_model


def test_sigkill_mid_run_leaves_a_valid_partial_result_set(tmp_path):
    model = make_model(tmp_path / "m.onnx")
    inputs = make_inputs(tmp_path / "inputs", count=3)
    out = tmp_path / "out"
    import sys
    proc = subprocess.Popen([sys.executable, str(RUNNER), "run", "--model", str(model), "--inputs", str(inputs),
                             "--repeats", "1000000", "--backend", "onnxruntime", "--out", str(out)],
                            env=base_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    index_path = out / "index.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if index_path.exists() and index_path.stat().st_size > 200 * 400:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    index = read_index(str(out))
    assert len(index) >= 100
    assert [(r["run"], r["input"]) for r in index] == [(i // 3, "page-%04d" % (i % 3)) for i in range(len(index))]
    for rec in index:
        for o in rec["outputs"]:
            assert (out / "outputs" / (o["hash"] + ".npy")).exists()
    for name in {o["hash"] for r in index for o in r["outputs"]}:
        assert output_hash(np.load(out / "outputs" / (name + ".npy"), allow_pickle=False)) == name
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "running" and run["finished_unix"] is None
    assert not (out / "summary.json").exists()
    summary = summarize(index)  # what the host computes for an interrupted run
    assert summary["deterministic"] and set(summary["inputs"]) == {"page-0000", "page-0001", "page-0002"}


def test_sigterm_closes_the_run_as_failed(tmp_path):
    model = make_model(tmp_path / "m.onnx")
    inputs = make_inputs(tmp_path / "inputs", count=1)
    out = tmp_path / "out"
    import sys
    proc = subprocess.Popen([sys.executable, str(RUNNER), "run", "--model", str(model), "--inputs", str(inputs),
                             "--repeats", "1000000", "--backend", "onnxruntime", "--out", str(out)],
                            env=base_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not ((out / "index.jsonl").exists() and (out / "index.jsonl").stat().st_size > 4000):
        time.sleep(0.05)
    proc.terminate()
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in stderr and "Traceback" not in stderr, stderr
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["error"].startswith("interrupted")
    assert len(read_index(str(out))) > 0
