"""Semantic segmentation: one class-score map, the decision a label per pixel (PaddleSeg, DeepLab, U-Net).

The decision is the per-pixel argmax over the class channel; a tie goes to the lower class index, as
the model zoo's post-processing does (numpy's argmax returns the first maximum). The same decision: the
same label at every pixel. The diff reports the changed-pixel fraction and the IoU of each class between
the two label maps; a class absent from both maps has no IoU (0/0) and is left out of the mean IoU, as
mIoU evaluators skip classes with an empty union. Convert's gate asks that at most
`MAX_CHANGED_FRACTION` of the pixels change label beyond a near tie, where a near tie is a pixel whose
FP32 probabilities of the two labels are within fidelity.score_tolerance (the classifier's rule, per pixel).

The layout (`semantic-seg`) is one output [1, C, H, W] (or channels last, [1, H, W, C]) with 2 <= C <=
`MAX_CLASSES`. Recognised by itself only when its H, W are the model input's and the output's name says
segmentation (`NAME_HINT`): a same-size feature map of any other model stays numeric; `--decoder
semantic` forces it for any such map.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from rkdet.decode.common import CONF_THRESHOLD, Layout
from rkdet.decode.tasks import label_overlay
from rkdet.decode.tasks.base import Arrays, DecisionTask, GateCount, GateLimits, SameDecision, marked_html

KIND = "semantic-seg"  # the layout
RECORD = "semantic"  # the records' "kind"
SAME = SameDecision("semantic", "pixel labels", None,
                    "same label at every pixel (per-pixel argmax, a tie to the lower class index); "
                    "the diff reports the changed-pixel fraction and per-class IoU")
MAX_CLASSES = 1024
MAX_CHANGED_FRACTION = 0.01  # convert's gate: an input agrees while at most 1 % of its pixels change label
NAME_HINT = re.compile(r"seg|semantic|parsing|label|class_?map|argmax", re.IGNORECASE)
MAX_LISTED_CLASSES = 20  # per-class IoUs listed in a record (worst first)


def _map_shape(shape: tuple[int, ...], hw: tuple[int, int] | None) -> tuple[int, bool] | None:
    """(classes, channels_last) of a class-score map, or None: not one."""
    if len(shape) != 4 or shape[0] != 1:
        return None
    _, a, b, c = shape
    if hw is not None and (b, c) == hw and 2 <= a <= MAX_CLASSES:
        return a, False
    if hw is not None and (a, b) == hw and 2 <= c <= MAX_CLASSES:
        return c, True
    if hw is None and 2 <= a <= MAX_CLASSES and b * c > 1:
        return a, False
    return None


def layout_of(outputs: list[tuple[str, tuple[int, ...]]], input_hw: tuple[int, int] | None, *,
              forced: bool = False) -> Layout | None:
    """The semantic layout of a model's outputs, or None; `forced` (--decoder semantic) drops the name hint."""
    if len(outputs) != 1:
        return None
    name, shape = outputs[0]
    found = _map_shape(shape, input_hw) or (_map_shape(shape, None) if forced else None)
    if found is None or not (forced or NAME_HINT.search(name)):
        return None
    classes, last = found
    hw = (shape[1], shape[2]) if last else (shape[2], shape[3])
    return Layout(KIND, f"semantic segmentation: {classes} classes per pixel over {hw[0]}x{hw[1]} "
                  f"({'NHWC' if last else 'NCHW'}), label = per-pixel argmax, a tie to the lower class index",
                  roles={name: "class_map"}, nc=classes, input_size=input_hw, transposed=last)


def class_map(layout: Layout, arrays: Arrays) -> np.ndarray:
    """The scores as (C, H, W) float64."""
    (name,) = layout.roles
    x = np.asarray(arrays[name], dtype=np.float64)[0]
    return np.moveaxis(x, -1, 0) if layout.transposed else x


def labels(scores: np.ndarray) -> np.ndarray:
    """Per-pixel argmax of (C, H, W) scores; a tie goes to the lower class index (numpy's first maximum)."""
    return np.argmax(scores, axis=0).astype(np.int64)


def class_overlaps(reference: np.ndarray, candidate: np.ndarray) -> dict[int, tuple[int, int]]:
    """(intersection, union) pixel counts of each class present in either label map: THE IoU rule's parts.
    A class absent from both has no entry (0/0: not judged). Summed over a data set they give the data
    set's IoU per class (rkdet accuracy's mIoU against label maps uses them so)."""
    out: dict[int, tuple[int, int]] = {}
    for c in np.union1d(np.unique(reference), np.unique(candidate)).tolist():
        r, k = reference == c, candidate == c
        out[int(c)] = (int(np.logical_and(r, k).sum()), int(np.logical_or(r, k).sum()))
    return out


def iou_of(overlaps: dict[int, tuple[int, int]]) -> dict[int, float]:
    """IoU of each class from its (intersection, union); a class with an empty union has no entry."""
    return {c: i / u for c, (i, u) in overlaps.items() if u > 0}


def mean_iou(ious: dict[int, float]) -> float:
    """The mean over the judged classes (an empty map: 1.0, nothing differs)."""
    return float(np.mean(list(ious.values()))) if ious else 1.0


def class_iou(reference: np.ndarray, candidate: np.ndarray) -> dict[int, float]:
    """IoU of each class between two label maps; a class absent from both has no entry (not judged)."""
    return iou_of(class_overlaps(reference, candidate))


def compare_label_maps(reference: np.ndarray, candidate: np.ndarray) -> dict[str, Any]:
    """The diff's delta between two label maps (JSON-ready): changed pixels, per-class IoU, mean IoU, and
    where the pixels changed (`overlay`, a small PNG: rkdet/decode/tasks/label_overlay.py) when any did."""
    if reference.shape != candidate.shape:
        raise ValueError(f"label maps {reference.shape} and {candidate.shape} differ in shape")
    moved = reference != candidate
    changed = int(moved.sum())
    ious = class_iou(reference, candidate)
    worst = sorted(ious.items(), key=lambda kv: (kv[1], kv[0]))[:MAX_LISTED_CLASSES]
    delta = {"kind": RECORD, "task": SAME.task, "pixels": int(reference.size), "changed_pixels": changed,
             "changed_fraction": changed / reference.size if reference.size else 0.0,
             "mean_iou": mean_iou(ious),
             "classes_judged": len(ious), "class_iou": {str(c): v for c, v in worst}, "changed": changed > 0}
    if changed and reference.ndim == 2:
        delta["overlay"] = label_overlay.encode(reference, moved)
    return delta


def probabilities(scores: np.ndarray) -> np.ndarray:
    """Per-pixel class probabilities of (C, H, W) scores: kept when they already are (a Softmax in the
    model), else the softmax over the class axis."""
    if scores.min() >= 0 and scores.max() <= 1 and np.allclose(scores.sum(axis=0), 1, atol=1e-2):
        return scores
    e = np.exp(scores - scores.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def compare_gate(ref: np.ndarray, cand: np.ndarray, limits: GateLimits) -> dict[str, Any]:
    """Convert's gate on one input: pixels whose label changed beyond a near tie, against MAX_CHANGED_FRACTION."""
    rl, cl = labels(ref), labels(cand)
    flipped = rl != cl
    p = probabilities(ref)
    rows, cols = np.nonzero(flipped)
    margins = p[rl[rows, cols], rows, cols] - p[cl[rows, cols], rows, cols]
    beyond = int((margins > limits.score_tolerance).sum())
    fraction = beyond / rl.size
    delta = compare_label_maps(rl, cl)
    return {"pixels": int(rl.size), "changed_pixels": int(flipped.sum()), "changed_beyond_near_tie": beyond,
            "changed_fraction": fraction, "mean_iou": delta["mean_iou"], "class_iou": delta["class_iou"],
            "agree": int(fraction <= MAX_CHANGED_FRACTION), "detections": 1}


@dataclass(frozen=True)
class SemanticFinding:
    """What a difference did to a label map (one distinct result against its reference)."""

    changed: bool
    changed_pixels: int
    pixels: int
    mean_iou: float
    kind: str = RECORD
    overlay: str | None = None  # a data: URI of the PNG where pixels changed (label_overlay.data_uri checked it)
    block: int = 1  # each overlay pixel is a block x block square of the label map

    def terminal_text(self) -> str:
        if not self.changed:
            return "same label map"
        return f"{self.changed_pixels} px changed ({100 * self.changed_pixels / self.pixels:.2f}%), mIoU {self.mean_iou:.3f}"

    def html(self) -> str:
        """The marked line and, when pixels changed, the overlay: reference labels grey, changed pixels red."""
        line = marked_html(self)
        if self.overlay is None:
            return line
        scale = f", each pixel a {self.block}x{self.block} block" if self.block > 1 else ""
        return (f'{line}<br><img class="label-overlay" style="image-rendering:pixelated;min-width:96px" '
                f'alt="changed pixels in red over the reference labels in grey{scale}" src="{self.overlay}">')


class SemanticSegmentation(DecisionTask):
    name = "semantic"
    record_kind = RECORD
    kinds = (KIND,)
    same = SAME
    decoder = "semantic"

    def recognise(self, outputs: list[tuple[str, tuple[int, ...]]], input_hw: tuple[int, int] | None) -> Layout | None:
        return layout_of(outputs, input_hw) if input_hw is not None else None

    def forced_layout(self, outputs: list[tuple[str, tuple[int, ...]]], input_hw: tuple[int, int] | None) -> Layout | None:
        return layout_of(outputs, input_hw, forced=True)

    def decide(self, layout: Layout, arrays: Arrays, conf: float = CONF_THRESHOLD) -> np.ndarray:
        return labels(class_map(layout, arrays))

    def summary(self, decided: np.ndarray) -> dict[str, Any]:
        values, counts = np.unique(decided, return_counts=True)
        return {"kind": RECORD, "task": SAME.task, "shape": [int(d) for d in decided.shape],
                "class_pixels": {str(int(v)): int(n) for v, n in zip(values, counts)}}

    def bundle_summary(self, layout: Layout, arrays: Arrays) -> dict[str, Any]:
        return self.summary(self.decide(layout, arrays))

    def compare(self, reference: np.ndarray, candidate: np.ndarray) -> dict[str, Any]:
        return compare_label_maps(reference, candidate)

    def changed(self, delta: dict[str, Any]) -> bool:
        return bool(delta.get("changed"))

    def finding(self, delta: dict[str, Any]) -> SemanticFinding:
        overlay = delta.get("overlay")
        block = overlay.get("block") if isinstance(overlay, dict) else None
        return SemanticFinding(bool(delta["changed"]), int(delta["changed_pixels"]), int(delta["pixels"]),
                               float(delta["mean_iou"]), overlay=label_overlay.data_uri(overlay),
                               block=block if isinstance(block, int) and 1 <= block <= 1 << 20 else 1)

    def gate(self, layout: Layout, ref: dict[str, Arrays], sim: dict[str, Arrays], limits: GateLimits) -> GateCount:
        per_input = {name: compare_gate(class_map(layout, ref[name]), class_map(layout, sim[name]), limits)
                     for name in sorted(ref)}
        agree = sum(v["agree"] for v in per_input.values())
        return GateCount(per_input, len(per_input), agree,
                         f"{agree}/{len(per_input)} golden inputs keep their label maps (at most "
                         f"{100 * MAX_CHANGED_FRACTION:g}% of pixels change beyond a near tie)")

    def gate_match_iou(self, limits: GateLimits) -> float | None:
        return None

    def decided_outputs(self, layout: Layout, output_names: tuple[str, ...]) -> set[str]:
        return set(layout.roles)


TASK = SemanticSegmentation()
