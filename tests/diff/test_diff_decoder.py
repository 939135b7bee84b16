"""YOLOv8 decoders against real onnxruntime outputs of the default model on a real document page.

The split-head model is cut from the stock Ultralytics export (onnx.utils.Extractor at the last
box/cls convolutions, a Sigmoid added on cls), so both layouts come from the same weights and the
same image: decoding both must give the same detections. Nothing here is a hard-coded expectation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from diff_helpers import ResultSetBuilder

from rkdet.diff.api import compare
from rkdet.diff.decision import compare_classification, compare_detections
from rkdet.decode import decode_yolov8, detect_layout, iou_matrix
from rkdet.tolerance import Tolerance
from rkdet.errors import InputError

SIDE = 1024


def test_both_layouts_decode_to_the_same_detections(doc_outputs: dict) -> None:
    single_layout = detect_layout([("output0", doc_outputs["single"].shape)])
    split_layout = detect_layout([(n, doc_outputs["split"][n].shape) for n in doc_outputs["names"]])
    assert single_layout.kind == "yolov8-single" and single_layout.nc == 11 and single_layout.input_size == (SIDE, SIDE)
    assert split_layout.kind == "yolov8-split" and [b.stride for b in split_layout.branches] == [8, 16, 32]
    a = decode_yolov8(single_layout, {"output0": doc_outputs["single"]})
    b = decode_yolov8(split_layout, doc_outputs["split"])
    assert len(a) >= 3, "a real page should give several layout detections"
    assert len(a) == len(b)
    assert np.array_equal(a.classes, b.classes)
    assert np.allclose(a.scores, b.scores, atol=1e-5)
    assert np.diag(iou_matrix(a.boxes, b.boxes)).min() > 0.999
    delta = compare_detections(a, b)
    assert not delta["changed"] and delta["matched"] == len(a)


def test_nhwc_and_score_sum_variants_decode_identically(doc_outputs: dict) -> None:
    nchw = doc_outputs["split"]
    nhwc = {}
    for i in range(3):
        nhwc[f"box{i}"] = np.ascontiguousarray(nchw[f"box{i}"].transpose(0, 2, 3, 1))
        nhwc[f"cls{i}"] = np.ascontiguousarray(nchw[f"cls{i}"].transpose(0, 2, 3, 1))
        nhwc[f"score_sum{i}"] = np.clip(nhwc[f"cls{i}"].sum(axis=3, keepdims=True), 0, 1)
    layout = detect_layout([(n, a.shape) for n, a in nhwc.items()])
    assert layout.kind == "yolov8-split" and layout.branches[0].channels_last and layout.branches[0].score_sum
    base = decode_yolov8(detect_layout([(n, a.shape) for n, a in nchw.items()]), nchw)
    other = decode_yolov8(layout, nhwc)
    assert not compare_detections(base, other)["changed"] and len(other) == len(base)


def test_default_build_shapes_are_recognised() -> None:
    shapes = [(f"{k}{i}", (1, 64 if k == "box" else 11, 80 >> i, 80 >> i)) for i in range(3) for k in ("box", "cls")]
    layout = detect_layout(shapes)
    assert layout.kind == "yolov8-split" and layout.input_size == (640, 640) and layout.nc == 11
    assert layout.roles == {"box0": "box", "cls0": "cls", "box1": "box", "cls1": "cls", "box2": "box", "cls2": "cls"}
    assert detect_layout([("output0", (1, 84, 8400))]).nc == 80
    assert detect_layout([("output0", (1, 8400, 84))]).transposed
    assert detect_layout([("prob", (1, 1000))]).kind == "classification"
    assert detect_layout([("x", (1, 3, 7))]).kind == "none"
    assert detect_layout(shapes, "none").kind == "none"
    with pytest.raises(InputError, match="--decoder yolov8"):
        detect_layout([("x", (1, 3, 7))], "yolov8")


def test_zeroed_class_scores_hide_behind_whole_output_cosine(doc_outputs: dict, tmp_path: Path) -> None:
    """INT8 zeroing every class score barely moves the whole-output cosine; the cls slice and decisions show it."""
    ref = doc_outputs["single"]
    broken = ref.copy()
    broken[:, 4:, :] = 0.0
    for name, arr in (("ref", ref), ("board", broken)):
        b = ResultSetBuilder(tmp_path / name, ["page"], ["output0"])
        b.add(0, "page", [arr])
        b.close()
    c = compare(tmp_path / "board", tmp_path / "ref", Tolerance(min_cosine=0.999))
    var = next(v for v in c.a.inputs["page"].outputs["output0"].variants.values())
    assert var.vs_reference.cosine > 0.999 and var.vs_reference.within
    assert var.slices_vs_reference["cls"].cosine is None and not var.slices_vs_reference["cls"].within
    assert var.slices_vs_reference["box"].differing == 0
    assert c.exit_code == 1 and "cls" in c.verdict
    decision = next(iter(c.a.inputs["page"].groups.values())).decision_vs_reference
    assert decision["candidate_count"] == 0 and len(decision["missing"]) == decision["reference_count"] > 0


def test_swapped_class_channels_are_class_flips(doc_outputs: dict) -> None:
    split = doc_outputs["split"]
    layout = detect_layout([(n, a.shape) for n, a in split.items()])
    ref = decode_yolov8(layout, split)
    top = int(np.bincount(ref.classes).argmax())
    other = (top + 1) % 11
    swapped = {n: a.copy() for n, a in split.items()}
    for i in range(3):
        swapped[f"cls{i}"][:, [top, other]] = split[f"cls{i}"][:, [other, top]]
    delta = compare_detections(ref, decode_yolov8(layout, swapped))
    affected = int(np.count_nonzero((ref.classes == top) | (ref.classes == other)))
    assert delta["changed"] and len(delta["class_flips"]) == affected
    assert all({f["reference_class"], f["candidate_class"]} == {top, other} for f in delta["class_flips"])
    assert delta["matched"] == len(ref) - affected and not delta["missing"] and not delta["extra"]


def test_classification_top1_flip() -> None:
    rng = np.random.default_rng(0)
    scores = rng.random(10)
    flipped = scores.copy()
    best, second = np.argsort(-scores)[:2]
    flipped[second] = scores[best] + 0.01
    d = compare_classification(scores, flipped)
    assert d["top1_flip"] and d["candidate_top1"] == second and not compare_classification(scores, scores)["changed"]
