"""A PP-PicoDet-structured model through the real rknn-toolkit2 build and convert's decision gate.

The tiny model has the structure of the issue-24 layout detector: input 800x608, eight outputs (four
per-stride class-score tensors [1, HW, 3] after a Sigmoid, then four GFL box distributions [1, HW, 32]),
strides 8/16/32/64 (the last grid rounded up: 13x10). Its class scores fire on dark blocks of one channel
(deterministic weights), so the golden images give detections; the gate must recognise the layout (with
the input size the pipeline knows: the flattened grids cannot say 100x76 from 76x100) and judge decisions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from convert_helpers import run_rkdet
from tiny_models import image_folder, write_config

pytestmark = pytest.mark.slow
H, W, NC = 800, 608, 3


def picodet_model(path: Path) -> Path:
    rng = np.random.default_rng(24)
    nodes, inits, outs = [], [], []
    cls_w = np.zeros((NC, 3, 1, 1), np.float32)
    for c in range(NC):
        cls_w[c, c] = -10.0  # class c: channel c dark
    inits += [numpy_helper.from_array(cls_w, "cls_w"), numpy_helper.from_array(np.full(NC, 5.0, np.float32), "cls_b")]
    box_b = np.zeros(32, np.float32)
    box_b[2::8] = 3.0  # every side's distribution peaks near bin 2
    inits += [numpy_helper.from_array((rng.normal(0, 0.5, (32, 3, 1, 1))).astype(np.float32), "box_w"),
              numpy_helper.from_array(box_b, "box_b"),
              numpy_helper.from_array(np.array([1, -1, NC], np.int64), "shape_cls"),
              numpy_helper.from_array(np.array([1, -1, 32], np.int64), "shape_box")]
    prev = "x"
    scores, boxes = [], []
    for i in range(4):
        k = 8 if i == 0 else 2
        nodes.append(helper.make_node("AveragePool", [prev], [f"p{i}"], kernel_shape=[k, k], strides=[k, k], ceil_mode=1))
        prev = f"p{i}"
        nodes += [helper.make_node("Conv", [prev, "cls_w", "cls_b"], [f"c{i}"]),
                  helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"]),
                  helper.make_node("Transpose", [f"s{i}"], [f"st{i}"], perm=[0, 2, 3, 1]),
                  helper.make_node("Reshape", [f"st{i}", "shape_cls"], [f"transpose_{2 * i}.tmp_0"]),
                  helper.make_node("Conv", [prev, "box_w", "box_b"], [f"b{i}"]),
                  helper.make_node("Transpose", [f"b{i}"], [f"bt{i}"], perm=[0, 2, 3, 1]),
                  helper.make_node("Reshape", [f"bt{i}", "shape_box"], [f"transpose_{2 * i + 1}.tmp_0"])]
        cells = -(-H // (8 << i)) * -(-W // (8 << i))
        scores.append(helper.make_tensor_value_info(f"transpose_{2 * i}.tmp_0", TensorProto.FLOAT, [1, cells, NC]))
        boxes.append(helper.make_tensor_value_info(f"transpose_{2 * i + 1}.tmp_0", TensorProto.FLOAT, [1, cells, 32]))
    outs = scores + boxes
    graph = helper.make_graph(nodes, "picodet_like", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                                                   [1, 3, H, W])], outs, inits)
    graph.node[0].input[0] = "image"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def test_a_picodet_structured_build_is_judged_on_its_decisions(tmp_path: Path) -> None:
    onnx_path = picodet_model(tmp_path / "picodet.onnx")
    cfg = write_config(tmp_path / "c.yaml", onnx_path, image_folder(tmp_path / "cal", 6, seed=1),
                       image_folder(tmp_path / "gold", 2, seed=2), preprocess={"pad_value": 230}, fidelity={})
    out = tmp_path / "out"
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(out), "--keep-failed", timeout=1200)
    # INT8 moves this head's soft box distributions enough to change a quarter of its detections: the gate
    # says so by decision agreement (as it did for the real PicoDet), never a silent pass
    assert proc.returncode == 4, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "fidelity gate failed: decision agreement" in last and "detections agree" in last
    fid = json.loads((out / "tiny-rk3588.failed" / "fidelity.json").read_text())
    assert fid["layout"]["kind"] == "picodet" and fid["layout"]["input_size"] == [H, W]
    assert fid["layout"]["task"] == "detection" and "box IoU" in fid["layout"]["same_decision"]
    decision = next(g for g in fid["gates"] if g["gate"] == "decision")
    units = sum(v["detections"] for v in fid["decision"]["inputs"].values())
    assert decision["value"] is not None and decision["passed"] is False and units > 0
    assert fid["decision"]["task"] == "detection" and fid["decision"]["overlap"] == "box IoU"


def test_the_detectors_search_ends_with_the_labelled_float_remedy(tmp_path: Path) -> None:
    """Issue 24's detector case: INT8 fails the decision gate, `rkdet layers` finds no single layer to blame
    (every per-layer cosine ~0.9998), so the search tries the float16 build, labelled as such, not hybrids."""
    cfg = write_config(tmp_path / "c.yaml", picodet_model(tmp_path / "picodet.onnx"),
                       image_folder(tmp_path / "cal", 6, seed=1), image_folder(tmp_path / "gold", 2, seed=2),
                       preprocess={"pad_value": 230}, fidelity={})
    out = tmp_path / "out"
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(out), "--search", "--json",
                     "--search-space", "algorithm=normal", "--search-space", "method=channel",
                     "--search-space", "calibration=1", "--search-budget", "30m", timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert [(v["stage"], v["status"], v["float_build"]) for v in doc["variants"]] == [
        ("config", "fail", False), ("float", "pass", True)]
    assert doc["loss"]["accumulates"] is True and doc["loss"]["min_single_cosine"] >= 0.9
    assert all(v["build_seconds"] > 0 for v in doc["variants"]) and doc["budget_seconds"] == 1800
    said = proc.stderr.replace("\n", " ")
    assert "the loss accumulates" in said and "trying a float16 build instead of single-layer hybrids" in said
    assert "FLOAT16 build" in said and "not INT8" in said
    manifest = json.loads((out / "tiny-rk3588" / "manifest.json").read_text())
    assert manifest["inputs"]["config"]["resolved"]["quantize"]["force_fp16"] is True
    assert {t["dtype"] for t in manifest["rknn"]["header"]["outputs"]} <= {"float16", "float32"}  # float, as labelled
    searched = cfg.with_name("c.searched.yaml").read_text()
    assert "force_fp16: true" in searched and "FLOAT16 build, not INT8" in searched
