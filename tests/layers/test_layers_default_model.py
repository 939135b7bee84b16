"""`rkdet layers` on the shipped default model (the session's shared build; CPU-heavy: one run, one input).

What it proves: the rebuild reproduces the build's fingerprint; every RKNN layer maps to the ONNX graph;
the per-layer values are those of the build (the output layers' entire cosine equals the cosine between
the build's own golden simulator and onnxruntime FP32 outputs); the default build is within the default
`fidelity.min_layer_cosine`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from convert_helpers import REPO, run_rkdet
from rkdet.diff.metrics import compare_arrays

pytestmark = pytest.mark.slow


def _golden_output(build: Path, kind: str, input_name: str, output: str) -> np.ndarray:
    for line in (build / "golden" / kind / "index.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["input"] == input_name:
            ref = next(o for o in record["outputs"] if o["name"] == output)
            return np.load(build / "golden" / kind / "outputs" / f"{ref['hash']}.npy")
    raise AssertionError(f"{input_name} not in {kind}")


def test_default_model_layers(default_build: Path, tmp_path: Path) -> None:
    html = tmp_path / "layers.html"
    proc = run_rkdet("layers", str(default_build), "--config", str(REPO / "configs" / "yolov8.yaml"),
                     "--out", str(tmp_path), "--max-inputs", "1", "--json",
                     "--html", str(html), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["fingerprint_match"] is True and "equals the build's" in proc.stderr
    assert doc["verdict"] == "within" and doc["first_loss"] is None and len(doc["inputs"]) == 1
    layers = doc["layers"]
    assert len(layers) > 150
    assert all(x["onnx"]["kind"] in ("exact", "derived", "input") for x in layers)
    # graph order: along the layers, every mapped node comes after the mapped nodes producing its inputs
    graph = onnx.load(str(default_build / "model.onnx")).graph
    producer = {o: n.name for n in graph.node for o in n.output}
    inputs_of = {n.name: [producer[i] for i in n.input if i in producer] for n in graph.node}
    position = {}
    for x in layers:
        for ref in [*x["fused"], x["onnx"]]:
            if ref["node"]:
                position.setdefault(ref["node"], x["index"])
    checked = 0
    for node, pos in position.items():
        for before in inputs_of[node]:
            if before in position:
                assert position[before] <= pos, (before, node)
                checked += 1
    assert checked > 150
    by_name = {x["rknn_name"]: x for x in layers}
    # the class-score head conv is fused into its Sigmoid; the int8 layer maps back to the output tensor
    cls0 = by_name["cls0_int8"]
    assert cls0["onnx"]["kind"] == "derived" and cls0["onnx"]["op_type"] == "Sigmoid"
    assert [f["node"] for f in cls0["fused"]] == ["/model.22/cv3.0/cv3.0.2/Conv"]  # stride 8's, not another's
    name = doc["inputs"][0]
    for out in ("cls0", "box2"):
        expected = compare_arrays(_golden_output(default_build, "onnx-fp32", name, out),
                                  _golden_output(default_build, "simulator", name, out)).cosine
        assert abs(by_name[out]["entire"]["cosine"] - expected) < 1e-5, (out, expected)
    assert "cls0_int8" in html.read_text()
