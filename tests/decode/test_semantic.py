"""Semantic segmentation as a decision task: label maps from a tiny ONNX model (a 1x1 conv to C classes over
H x W, run by onnxruntime), the tie rule, per-class IoU with classes absent from both left out, convert's
gate through rkdet.convert.fidelity.measure, and `rkdet diff` judging label maps of result sets."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rkdet.config import FidelitySection
from rkdet.convert.fidelity import measure
from rkdet.decode import detect_layout, task_of
from rkdet.decode.tasks import decision_changed, decision_finding, semantic
from rkdet.diff.api import compare
from rkdet.errors import InputError
from rkdet.tolerance import Tolerance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diff"))
from diff_helpers import ResultSetBuilder  # noqa: E402

C, H, W = 4, 12, 10


def seg_model(path: Path, *, classes: int = C, output: str = "seg_logits", seed: int = 0) -> Path:
    """A 1x1 conv from 3 channels to `classes` class scores per pixel, at the input's size."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 1, (classes, 3, 1, 1)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], [output])], "seg",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, H, W])],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, [1, classes, H, W])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def run_model(path: Path, images: list[np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [sess.run(None, {"x": im})[0] for im in images]


def _images(n: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 1, (1, 3, H, W)).astype(np.float32) for _ in range(n)]


def test_the_layout_is_recognised_only_where_the_name_says_segmentation() -> None:
    layout = detect_layout([("seg_logits", (1, C, H, W))], input_size=(H, W))
    assert (layout.kind, layout.task, layout.nc) == ("semantic-seg", "semantic", C)
    assert task_of(layout) is semantic.TASK and "tie to the lower class index" in layout.detail
    nhwc = detect_layout([("segmentation", (1, H, W, C))], input_size=(H, W))
    assert nhwc.kind == "semantic-seg" and nhwc.transposed
    # a same-size feature map of any other model stays numeric; --decoder semantic forces it
    assert detect_layout([("y", (1, C, H, W))], input_size=(H, W)).kind == "none"
    assert detect_layout([("seg_logits", (1, C, H, W))]).kind == "none"  # no input size: not guessed
    assert detect_layout([("y", (1, C, H, W))], "semantic").kind == "semantic-seg"
    with pytest.raises(InputError, match="--decoder semantic"):
        detect_layout([("y", (1, 10))], "semantic")


def test_ties_go_to_the_lower_class_index() -> None:
    scores = np.zeros((3, 1, 2))
    scores[:, 0, 0] = [0.2, 0.5, 0.5]  # classes 1 and 2 tie
    scores[:, 0, 1] = [0.7, 0.7, 0.1]  # classes 0 and 1 tie
    assert semantic.labels(scores).tolist() == [[1, 0]]


def test_class_iou_leaves_classes_absent_from_both_out_of_the_mean() -> None:
    ref = np.array([[0, 0, 1, 1]])
    cand = np.array([[0, 1, 1, 1]])
    ious = semantic.class_iou(ref, cand)
    assert ious == {0: 0.5, 1: 2 / 3}  # classes 2, 3 (absent from both) have no IoU
    delta = semantic.compare_label_maps(ref, cand)
    assert delta["changed_pixels"] == 1 and delta["changed_fraction"] == 0.25
    assert delta["mean_iou"] == pytest.approx((0.5 + 2 / 3) / 2) and delta["classes_judged"] == 2
    assert decision_changed(delta) and decision_finding(delta).terminal_text() == "1 px changed (25.00%), mIoU 0.583"
    assert decision_finding(delta).html().startswith('<span class="bad">')
    same = semantic.compare_label_maps(ref, ref)
    assert not decision_changed(same) and same["mean_iou"] == 1.0
    assert decision_finding(same).terminal_text() == "same label map"


def test_convert_gate_judges_label_maps(tmp_path: Path) -> None:
    model = seg_model(tmp_path / "seg.onnx")
    images = _images(3)
    ref = {f"g{i}": {"seg_logits": out} for i, out in enumerate(run_model(model, images))}
    limits = FidelitySection()
    same = measure(ref, ref, ("seg_logits",), ((1, C, H, W),), "none", limits, input_hw=(H, W))
    assert same.layout["kind"] == "semantic-seg" and same.decision["task"] == "semantic"
    gate = next(g for g in same.gates if g.gate == "decision")
    assert gate.passed and gate.value == 1.0
    # a quantized side whose labels flip on half the pixels of one input (class scores swapped there)
    flipped = {k: {"seg_logits": v["seg_logits"].copy()} for k, v in ref.items()}
    arr = flipped["g1"]["seg_logits"]
    arr[0, :, : H // 2] = arr[0, ::-1, : H // 2]
    changed = (semantic.labels(arr[0]) != semantic.labels(ref["g1"]["seg_logits"][0])).mean()
    assert changed > semantic.MAX_CHANGED_FRACTION
    bad = measure(flipped, ref, ("seg_logits",), ((1, C, H, W),), "none", limits, input_hw=(H, W))
    gate = next(g for g in bad.gates if g.gate == "decision")
    assert not gate.passed and gate.value == pytest.approx(2 / 3)
    entry = bad.decision["inputs"]["g1"]
    assert entry["agree"] == 0 and entry["changed_pixels"] > 0 and entry["mean_iou"] < 1.0
    assert bad.decision["inputs"]["g0"]["agree"] == 1


def test_near_ties_are_not_decision_changes() -> None:
    ref = np.zeros((2, 4, 4))
    ref[0] = 0.01  # class 0 ahead by a hair everywhere
    cand = ref[::-1].copy()  # every pixel flips to class 1
    limits = FidelitySection()
    out = semantic.compare_gate(ref, cand, limits)
    assert out["changed_pixels"] == 16 and out["changed_beyond_near_tie"] == 0 and out["agree"] == 1
    ref[0] = 5.0  # a clear winner: the same flip is a change
    assert semantic.compare_gate(ref, ref[::-1].copy(), limits)["agree"] == 0


def _result_set(path: Path, outputs: list[np.ndarray]) -> Path:
    b = ResultSetBuilder(path, [f"in{i}" for i in range(len(outputs))], ["seg_logits"])
    for entry in b.run["inputs"]:
        entry["shape"] = [1, 3, H, W]
    for i, out in enumerate(outputs):
        b.add(0, f"in{i}", [out])
    return b.close()


def test_diff_reports_changed_pixels_and_mean_iou(tmp_path: Path) -> None:
    model = seg_model(tmp_path / "seg.onnx")
    outs = run_model(model, _images(2))
    ref = _result_set(tmp_path / "ref", outs)
    moved = [o.copy() for o in outs]
    moved[1][0, :, 0, :] = moved[1][0, ::-1, 0, :]  # one row's scores reversed: its labels change
    board = _result_set(tmp_path / "board", moved)
    c = compare(board, ref, Tolerance())
    assert c.layout is not None and c.layout.kind == "semantic-seg"
    assert c.agrees is not None and c.agrees.decisions_changed == 1 and c.exit_code != 0
    delta = c.a.inputs["in1"].groups[next(iter(c.a.inputs["in1"].groups))].decision_vs_reference
    assert delta["kind"] == "semantic" and 0 < delta["changed_pixels"] <= W and delta["mean_iou"] < 1
    same = compare(_result_set(tmp_path / "again", outs), ref, Tolerance())
    assert same.agrees is not None and same.agrees.decisions_changed == 0 and same.exit_code == 0


def _png_pixels(uri: str) -> np.ndarray:
    """The RGB pixels of a data: URI PNG, read by Pillow (an independent decoder)."""
    import base64
    import io

    from PIL import Image

    assert uri.startswith("data:image/png;base64,")
    with Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))) as im:
        assert im.format == "PNG"
        return np.asarray(im.convert("RGB"))


def test_the_html_report_shows_where_pixels_changed(tmp_path: Path) -> None:
    """rkdet diff's HTML shows the changed pixels of a label map as an overlay: red exactly on the row
    whose scores were reversed (at the map's own size, H x W), grey elsewhere."""
    import re

    from rkdet.diff.report import write_reports

    model = seg_model(tmp_path / "seg.onnx")
    outs = run_model(model, _images(2))
    ref = _result_set(tmp_path / "ref", outs)
    moved = [o.copy() for o in outs]
    moved[1][0, :, 3, :] = moved[1][0, ::-1, 3, :]  # row 3's class scores reversed
    c = compare(_result_set(tmp_path / "board", moved), ref, Tolerance())
    delta = next(iter(c.a.inputs["in1"].groups.values())).decision_vs_reference
    assert delta["overlay"]["width"] == W and delta["overlay"]["height"] == H and delta["overlay"]["block"] == 1
    html = write_reports(c, tmp_path / "report")["html"].read_text()
    uris = re.findall(r'<img class="label-overlay"[^>]* src="(data:image/png;base64,[A-Za-z0-9+/=]+)"', html)
    assert len(uris) == 1, "one changed label map, one overlay"
    pixels = _png_pixels(uris[0])
    assert pixels.shape == (H, W, 3)
    red = np.all(pixels == semantic.label_overlay.CHANGED_RGB, axis=-1)
    expected = semantic.labels(moved[1][0]) != semantic.labels(outs[1][0])
    assert expected.any() and np.array_equal(red, expected)
    assert not red[np.arange(H) != 3].any()
    assert 'src="data:' in html and "http://" not in html.split("<style>")[1] and "https://" not in html


def test_the_overlay_is_bounded_and_a_crafted_one_is_not_shown() -> None:
    """A large map is shrunk to at most MAX_SIDE per side (a changed pixel keeps its block red); an overlay
    entry that is not base64 PNG (markup, another file type, too long) is left out of the HTML."""
    big = np.zeros((1000, 700), np.int64)
    cand = big.copy()
    cand[999, 0] = 5
    delta = semantic.compare_label_maps(big, cand)
    o = delta["overlay"]
    assert max(o["width"], o["height"]) <= semantic.label_overlay.MAX_SIDE and o["block"] == 8
    pixels = _png_pixels(semantic.label_overlay.data_uri(o))
    red = np.all(pixels == semantic.label_overlay.CHANGED_RGB, axis=-1)
    assert red.sum() == 1 and red[999 // 8, 0]
    assert 'class="label-overlay"' in decision_finding(delta).html()
    for crafted in ('"><script>alert(1)</script>', "R0lGODlhAQABAAAAACw=",  # markup; a GIF
                    "iVBORw0KGgo" + "A" * (semantic.label_overlay.MAX_PNG_BASE64 + 1), None, 5):
        finding = decision_finding(dict(delta, overlay={"png": crafted, "block": "x"}))
        assert "<img" not in finding.html() and "<script>" not in finding.html()
    assert semantic.compare_label_maps(big, big).get("overlay") is None  # nothing changed: no image


def test_a_report_keeps_a_bounded_number_of_overlays(tmp_path: Path) -> None:
    """Many distinct changed label maps: the first MAX_DECISION_IMAGES keep their overlay, the rest are left
    out and a note says so (a crafted result set cannot grow the reports without bound)."""
    from rkdet.diff.compare import MAX_DECISION_IMAGES

    model = seg_model(tmp_path / "seg.onnx")
    n = MAX_DECISION_IMAGES + 4
    outs = run_model(model, _images(n))
    moved = [o.copy() for o in outs]
    for o in moved:
        o[0, :, 0, :] = o[0, ::-1, 0, :]
    c = compare(_result_set(tmp_path / "board", moved), _result_set(tmp_path / "ref", outs), Tolerance())
    deltas = [g.decision_vs_reference for ia in c.a.inputs.values() for g in ia.groups.values()]
    changed = [d for d in deltas if d and d["changed"]]
    assert len(changed) > MAX_DECISION_IMAGES
    assert sum("overlay" in d for d in changed) == MAX_DECISION_IMAGES
    assert any(n.startswith("decision images: the first 16 changed decisions") for n in c.notes)
