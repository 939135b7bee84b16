"""Decoders for the detector families people deploy: PP-PicoDet, YOLOv5 (both layouts), YOLOv10's NMS-free
output, YOLO11 (v8's layout) and YOLOv8-seg masks.

Each family gets a tiny ONNX model made here (onnx.helper; its outputs are deterministic tensors plus
0 * mean(input), so they have exactly the family's structure) run by onnxruntime; the tensors are built
so the decoded result is known by construction (a box, a class, a score), and the assertions are on that
result. Then the decision comparison: the same detections (numeric noise only) and changed detections,
through `rkdet diff` (result sets on disk) and through convert's decision gate (fidelity.measure/gate).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from diff_helpers import ResultSetBuilder
from onnx import TensorProto, helper, numpy_helper

from rkdet.config import FidelitySection
from rkdet.convert import fidelity
from rkdet.convert.selfcheck_bundle import decision_summary
from rkdet.decode import SAME_DECISION, decode_detections, detect_layout
from rkdet.diff.api import compare
from rkdet.diff.decision import compare_detections
from rkdet.tolerance import Tolerance
from rkdet.errors import FidelityGateError, InputError


def constant_head_model(path: Path, outputs: dict[str, np.ndarray], hw: tuple[int, int]) -> Path:
    """A real ONNX model on a 1x3xHxW input whose outputs are `outputs` (+ 0 * mean(x), so they depend on the graph)."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0),
             helper.make_node("Mul", ["m", "zero"], ["z"])]
    inits = [numpy_helper.from_array(np.zeros((), np.float32), "zero")]
    infos = []
    for i, (name, value) in enumerate(outputs.items()):
        inits.append(numpy_helper.from_array(value.astype(np.float32), f"c{i}"))
        nodes.append(helper.make_node("Add", [f"c{i}", "z"], [name]))
        infos.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(value.shape)))
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, *hw])],
                              infos, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def run_model(path: Path, hw: tuple[int, int], seed: int = 0) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(seed).random((1, 3, *hw), dtype=np.float32)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))


def _layout(arrays: dict[str, np.ndarray], hw: tuple[int, int] | None):
    return detect_layout([(n, a.shape) for n, a in arrays.items()], input_size=hw)


# -- the families ------------------------------------------------------------------------------------

PICO_HW = (800, 608)  # H, W: the PP-PicoDet layout detector's input


def picodet_outputs(cell: tuple[int, int] = (10, 20), cls: int = 2, nc: int = 3) -> dict[str, np.ndarray]:
    """Paddle PicoDet export: 4 score outputs [1, HW, nc] then 4 box outputs [1, HW, 32] (reg_max 7);
    one object at stride 16, grid cell (row, col), distance 2 strides on every side."""
    outs: dict[str, np.ndarray] = {}
    grids = [(100, 76), (50, 38), (25, 19), (13, 10)]
    scores, boxes = [], []
    for i, (h, w) in enumerate(grids):
        s = np.full((1, h * w, nc), 0.01, np.float32)
        b = np.zeros((1, h * w, 32), np.float32)
        b[0, :, 2::8] = 20.0  # every side's distribution peaks at bin 2
        if i == 1:
            s[0, cell[0] * w + cell[1], cls] = 0.9
        scores.append(s)
        boxes.append(b)
    for i, s in enumerate(scores):
        outs[f"transpose_{2 * i}.tmp_0"] = s
    for i, b in enumerate(boxes):
        outs[f"transpose_{2 * i + 1}.tmp_0"] = b
    return outs


def test_picodet_800x608_decodes_the_constructed_box(tmp_path: Path) -> None:
    model = constant_head_model(tmp_path / "picodet.onnx", picodet_outputs(), PICO_HW)
    arrays = run_model(model, PICO_HW)
    layout = _layout(arrays, PICO_HW)
    assert layout.kind == "picodet" and layout.nc == 3 and layout.input_size == PICO_HW
    assert [b.stride for b in layout.branches] == [8, 16, 32, 64] and layout.branches[0].bins == 8
    assert layout.branches[1].size == (50, 38) and "PicoDet" in layout.detail
    dets = decode_detections(layout, arrays)
    assert len(dets) == 1 and dets.classes.tolist() == [2] and dets.scores[0] == pytest.approx(0.9)
    cx, cy = (20 + 0.5) * 16, (10 + 0.5) * 16  # cell centre, 2 strides each side
    assert np.allclose(dets.boxes[0], [cx - 32, cy - 32, cx + 32, cy + 32], atol=1e-3)


def test_the_bundle_summary_decodes_picodet_with_the_fed_input_size() -> None:
    arrays = picodet_outputs()
    assert decision_summary(list(arrays.items()))["kind"] == "none"  # without the input size: not guessed
    summary = decision_summary(list(arrays.items()), PICO_HW)
    assert summary["kind"] == "picodet" and [d["class"] for d in summary["detections"]] == [2]


def test_picodet_flattened_grid_needs_the_input_size_or_says_none() -> None:
    shapes = [(n, a.shape) for n, a in picodet_outputs().items()]
    layout = detect_layout(shapes)  # 7600 cells: 100x76 or 76x100, the outputs cannot say
    assert layout.kind == "none" and "numeric comparison only" in layout.detail and "transpose_0" in layout.detail
    assert detect_layout(shapes, input_size=(640, 640)).kind == "none"  # grids that hold other cell counts
    with pytest.raises(InputError, match="--decoder picodet"):
        detect_layout([("x", (1, 3, 7))], "picodet")


def yolov5_maps(nc: int = 2, hw: tuple[int, int] = (64, 64)) -> dict[str, np.ndarray]:
    """rknn_model_zoo's YOLOv5: per stride [1, 3*(5+nc), H, W] logits; one object at stride 16, anchor 1
    (62x45), cell row 1 col 2, offsets and sizes at logit 0 (sigmoid 0.5), objectness and class 1 at logit 10."""
    outs = {}
    for i, s in enumerate((8, 16, 32)):
        h, w = hw[0] // s, hw[1] // s
        m = np.full((1, 3, 5 + nc, h, w), -10.0, np.float32)
        if s == 16:
            m[0, 1, 0:4, 1, 2] = 0.0
            m[0, 1, 4, 1, 2] = 10.0
            m[0, 1, 5 + 1, 1, 2] = 10.0
        outs[f"output{i}"] = m.reshape(1, 3 * (5 + nc), h, w)
    return outs


def test_yolov5_maps_decode_with_the_default_anchors(tmp_path: Path) -> None:
    arrays = run_model(constant_head_model(tmp_path / "v5.onnx", yolov5_maps(), (64, 64)), (64, 64))
    layout = _layout(arrays, (64, 64))
    assert layout.kind == "yolov5-split" and layout.nc == 2
    dets = decode_detections(layout, arrays)
    sig10 = 1 / (1 + np.exp(-10.0))
    assert len(dets) == 1 and dets.classes.tolist() == [1] and dets.scores[0] == pytest.approx(sig10 * sig10)
    cx, cy = (2 + 0.5) * 16, (1 + 0.5) * 16  # (2 * 0.5 - 0.5 + cell) * stride
    assert np.allclose(dets.boxes[0], [cx - 31, cy - 22.5, cx + 31, cy + 22.5], atol=1e-6)


def test_yolov5_single_output_multiplies_objectness(tmp_path: Path) -> None:
    n = 3 * (64 + 16 + 4)  # 3 anchors x the cells of strides 8/16/32 at 64x64
    out = np.zeros((1, n, 7), np.float32)
    out[0, 5] = [30, 20, 10, 8, 0.9, 0.2, 0.8]
    out[0, 9] = [40, 40, 10, 10, 0.2, 0.0, 0.9]  # 0.18 < 0.25: objectness keeps it out
    arrays = run_model(constant_head_model(tmp_path / "v5s.onnx", {"output0": out}, (64, 64)), (64, 64))
    layout = _layout(arrays, None)
    assert layout.kind == "yolov5-single" and layout.input_size == (64, 64)
    dets = decode_detections(layout, arrays)
    assert dets.classes.tolist() == [1] and dets.scores[0] == pytest.approx(0.72)
    assert np.allclose(dets.boxes[0], [25, 16, 35, 24])


def test_yolov10_end_to_end_keeps_overlaps_without_nms(tmp_path: Path) -> None:
    out = np.zeros((1, 300, 6), np.float32)
    out[0, 0] = [12, 12, 48, 58, 0.8, 3]
    out[0, 1] = [10, 10, 50, 60, 0.9, 3]  # IoU 0.83 with row 0: NMS would drop one; YOLOv10 already did its own
    out[0, 2] = [0, 0, 5, 5, 0.1, 1]
    arrays = run_model(constant_head_model(tmp_path / "v10.onnx", {"output0": out}, (64, 64)), (64, 64))
    layout = _layout(arrays, (64, 64))
    assert layout.kind == "yolov10" and "NMS-free" in layout.detail
    dets = decode_detections(layout, arrays)
    assert dets.classes.tolist() == [3, 3] and np.allclose(dets.scores, [0.9, 0.8])
    assert np.allclose(dets.boxes, [[10, 10, 50, 60], [12, 12, 48, 58]])


def yolo11_output(nc: int = 2, side: int = 256) -> np.ndarray:
    n = 21 * (side // 32) ** 2
    out = np.zeros((1, 4 + nc, n), np.float32)
    out[0, :, 100] = [100, 80, 40, 20, 0.1, 0.95]
    return out


def test_yolo11_is_v8s_layout_and_named(tmp_path: Path) -> None:
    arrays = run_model(constant_head_model(tmp_path / "y11.onnx", {"output0": yolo11_output()}, (256, 256)), (256, 256))
    layout = _layout(arrays, (256, 256))
    assert layout.kind == "yolov8-single" and "YOLO11" in layout.detail
    dets = decode_detections(layout, arrays)
    assert dets.classes.tolist() == [1] and np.allclose(dets.boxes[0], [80, 70, 120, 90])
    split = detect_layout([(f"{k}{i}", (1, 64 if k == "box" else 80, 80 >> i, 80 >> i)) for i in range(3)
                           for k in ("box", "cls")])
    assert split.kind == "yolov8-split" and "YOLO11" in split.detail


def seg_outputs(region: tuple[int, int] = (2, 10), nc: int = 2) -> dict[str, np.ndarray]:
    """YOLOv8-seg at 64x64: one detection (anchor 0) box (8, 8, 40, 40) class 0, coefficient 0 = 10;
    prototype 0 = +1 on rows/cols region[0]..region[1]-1 of the 16x16 grid, -1 elsewhere."""
    det = np.zeros((1, 4 + nc + 32, 84), np.float32)
    det[0, 0:4, 0] = [24, 24, 32, 32]
    det[0, 4, 0] = 0.9
    det[0, 4 + nc, 0] = 10.0
    proto = np.full((1, 32, 16, 16), -1.0, np.float32)
    proto[0, 0, region[0]:region[1], region[0]:region[1]] = 1.0
    return {"output0": det, "output1": proto}


def test_segmentation_mask_is_the_prototype_region_inside_the_box(tmp_path: Path) -> None:
    arrays = run_model(constant_head_model(tmp_path / "seg.onnx", seg_outputs(), (64, 64)), (64, 64))
    layout = _layout(arrays, (64, 64))
    assert layout.kind == "yolov8-seg" and layout.task == "segmentation" and layout.mask_coefs == 32 and layout.nc == 2
    dets = decode_detections(layout, arrays)
    assert len(dets) == 1 and dets.classes.tolist() == [0] and np.allclose(dets.boxes[0], [8, 8, 40, 40])
    assert dets.masks is not None and dets.masks.shape == (1, 16, 16) and dets.mask_stride == 4
    expected = np.zeros((16, 16), bool)
    expected[2:10, 2:10] = True  # pixel centres 10..38: inside the box
    assert np.array_equal(dets.masks[0], expected)
    assert decision_summary(list(arrays.items()))["detections"][0]["mask_pixels"] == 64  # what the bundle carries


def test_same_box_different_mask_is_a_changed_decision() -> None:
    ref_arrays, cand_arrays = seg_outputs(), seg_outputs(region=(6, 14))
    layout = _layout(ref_arrays, (64, 64))
    ref, cand = decode_detections(layout, ref_arrays), decode_detections(layout, cand_arrays)
    assert np.allclose(ref.boxes, cand.boxes)  # box IoU 1
    delta = compare_detections(ref, cand)  # mask IoU 16/64 = 0.25 < SAME_DECISION's 0.5
    assert SAME_DECISION["segmentation"].min_iou == 0.5 and delta["task"] == "segmentation"
    assert delta["changed"] and delta["missing"] and delta["extra"]
    assert not compare_detections(ref, decode_detections(layout, seg_outputs(region=(2, 9))))["changed"]  # IoU 49/64


# -- the decision comparison through the diff and the gate -------------------------------------------------

def _noisy(arrays: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Numeric noise that moves no decision (what a faithful INT8 build does): relative, so signs stay."""
    rng = np.random.default_rng(seed)
    return {n: (a * (1 + rng.normal(0, 1e-3, a.shape))).astype(np.float32) for n, a in arrays.items()}


CASES = {  # family: (reference outputs, changed outputs, input H, W)
    "picodet": (picodet_outputs(), picodet_outputs(cls=1), PICO_HW),
    "yolov5-split": (yolov5_maps(), {k: (v if k != "output1" else np.full_like(v, -10.0)) for k, v in yolov5_maps().items()},
                     (64, 64)),
    "yolov10": None,
    "yolov8-single": ({"output0": yolo11_output()}, {"output0": yolo11_output()[:, [0, 1, 2, 3, 5, 4]]}, (256, 256)),
    "yolov8-seg": (seg_outputs(), seg_outputs(region=(6, 14)), (64, 64)),
}
_v10 = np.zeros((1, 300, 6), np.float32)
_v10[0, 0] = [10, 10, 50, 60, 0.9, 3]
_v10_moved = _v10.copy()
_v10_moved[0, 0, :4] = [40, 40, 60, 62]
CASES["yolov10"] = ({"output0": _v10}, {"output0": _v10_moved}, (64, 64))


def _result_set(path: Path, arrays: dict[str, np.ndarray], hw: tuple[int, int]) -> Path:
    b = ResultSetBuilder(path, ["img"], list(arrays))
    b.run["inputs"][0]["shape"] = [1, hw[0], hw[1], 3]  # as the runner records the fed input
    b.add(0, "img", list(arrays.values()))
    return b.close()


@pytest.mark.parametrize("family", sorted(CASES))
def test_diff_counts_changed_decisions_per_family(family: str, tmp_path: Path) -> None:
    ref, changed, hw = CASES[family]
    golden = _result_set(tmp_path / "ref", ref, hw)
    same = compare(_result_set(tmp_path / "same", _noisy(ref, 1), hw), golden, Tolerance(max_abs=0.5))
    assert same.layout.kind == family and same.agrees is not None
    assert same.agrees.ok and same.agrees.decisions_changed == 0 and same.exit_code == 0
    moved = compare(_result_set(tmp_path / "moved", changed, hw), golden, Tolerance(max_abs=100.0))
    assert moved.agrees is not None and not moved.agrees.ok and moved.agrees.decisions_changed == 1
    assert moved.exit_code == 1 and "change a decision" in moved.agrees.reason


@pytest.mark.parametrize("family", sorted(CASES))
def test_convert_gate_judges_decisions_per_family(family: str) -> None:
    ref, changed, hw = CASES[family]
    names, shapes = tuple(ref), tuple(a.shape for a in ref.values())
    limits = FidelitySection()
    ok = fidelity.measure({"p": _noisy(ref, 2)}, {"p": ref}, names, shapes, "none", limits, input_hw=hw)
    decision = next(g for g in ok.gates if g.gate == "decision")
    assert ok.layout["kind"] == family and decision.passed is True and decision.value == 1.0
    assert ok.decision["task"] == ("segmentation" if family == "yolov8-seg" else "detection")
    bad = fidelity.measure({"p": changed}, {"p": ref}, names, shapes, "none", limits, input_hw=hw)
    decision = next(g for g in bad.gates if g.gate == "decision")
    assert decision.passed is False and decision.value == 0.0
    with pytest.raises(FidelityGateError, match="decision agreement 0"):
        fidelity.gate(bad, "rk3588")
