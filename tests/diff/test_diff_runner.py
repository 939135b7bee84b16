"""`rkdet diff` on a result set written by the real runner (rkdet-run, onnxruntime backend) running the
split-head cut of the default model on a real page, with board snapshots from an emulated RK3588 tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from diff_helpers import ResultSetBuilder

from rkdet.emulator.fake_tree import build_fake_tree
from rkdet.emulator.socs import RK3588
from rkdet.diff.api import compare
from rkdet.diff.report import json_text
from rkdet.tolerance import Tolerance


@pytest.mark.slow
def test_diff_reads_real_runner_output(doc_outputs: dict, tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(doc_outputs["split_model"])
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    np.save(inputs / "page-101.npy", doc_outputs["x"])
    root = build_fake_tree(RK3588, tmp_path / "board-root")
    env = dict(os.environ, RKDET_ROOT=str(root))
    runner = Path(sys.executable).with_name("rkdet-run")
    out = tmp_path / "result"
    proc = subprocess.run([str(runner), "--model", str(model), "--inputs", str(inputs), "--repeats", "3",
                           "--backend", "onnxruntime", "--snapshot-every", "1", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]

    c = compare(out)
    assert c.exit_code == 0 and c.a.records == 3 and c.layout.kind == "yolov8-split"
    assert c.a.inputs["page-101"].reference_decision["detections"], "the real page yields detections"
    assert [s["at"] for s in c.a.snapshots] == ["before", "periodic", "periodic", "after"]
    assert "fdab0000.npu" in c.a.snapshots[0]["devfreq"] and c.a.correlation == []
    assert json.loads(json_text(c))["sets"]["A"]["backend"] == "onnxruntime"

    golden = ResultSetBuilder(tmp_path / "golden", ["page-101"], doc_outputs["names"])
    golden.add(0, "page-101", [doc_outputs["split"][n] for n in doc_outputs["names"]])
    golden.close()
    against = compare(out, tmp_path / "golden", Tolerance(max_abs=1e-3))
    assert against.exit_code == 0, against.verdict
    group = next(iter(against.a.inputs["page-101"].groups.values()))
    if group.decision_vs_reference is not None:  # threads differ (1 vs 2): not always bitwise, same decisions
        assert not group.decision_vs_reference["changed"]
