"""Build fidelity: simulator (quantized) outputs against ONNX FP32, per output and per meaningful slice.

Why slices: whole-output cosine of the stock YOLOv8 output reads 0.9995 while INT8 has zeroed every
class score, because the box rows dominate the norm. So class-score and box parts are judged apart,
and a build whose class scores collapse fails (exit 4) instead of shipping.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rkdet.config import FidelitySection
from rkdet.errors import ConversionError

SCORE_HIGH = 0.5  # a confident FP32 class score
SCORE_KEPT = 0.25  # what a faithful build still shows for it


@dataclass(frozen=True)
class Slice:
    """A named part of an output: which output, which kind, which channel rows."""

    output: str
    kind: str  # "scores" | "boxes" | "all"
    rows: slice | None  # along axis 1 (channels), None for the whole output


def slices_for(output_names: tuple[str, ...], output_shapes: tuple[tuple[int, ...], ...], prepare: str) -> list[Slice]:
    """The slices worth judging apart for this model's outputs."""
    result: list[Slice] = []
    for name, shape in zip(output_names, output_shapes):
        if prepare == "yolov8-split-head":
            result.append(Slice(name, "scores" if name.startswith("cls") else "boxes", None))
        elif len(shape) == 3 and shape[1] > 4 and shape[2] > shape[1]:  # Ultralytics [1, 4+nc, N]
            result += [Slice(name, "boxes", slice(0, 4)), Slice(name, "scores", slice(4, None))]
        else:
            result.append(Slice(name, "all", None))
    return result


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a64), np.linalg.norm(b64)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a64, b64) / (na * nb))


def _part(array: np.ndarray, rows: slice | None) -> np.ndarray:
    return array if rows is None else array[:, rows]


def measure(sim: dict[str, dict[str, np.ndarray]], ref: dict[str, dict[str, np.ndarray]],
            slices: list[Slice]) -> dict:
    """Per slice over all golden inputs: cosine (min over inputs), max abs diff, score recall."""
    report: dict[str, dict] = {}
    for sl in slices:
        key = sl.output if sl.rows is None else f"{sl.output}[{sl.kind}]"
        cosines, max_abs, high, kept, sim_max, ref_max = [], 0.0, 0, 0, 0.0, 0.0
        for name in ref:
            r = _part(ref[name][sl.output], sl.rows).astype(np.float32)
            s = _part(sim[name][sl.output], sl.rows).astype(np.float32)
            cosines.append(_cosine(s, r))
            max_abs = max(max_abs, float(np.max(np.abs(s - r))))
            sim_max, ref_max = max(sim_max, float(s.max())), max(ref_max, float(r.max()))
            if sl.kind == "scores":
                mask = r > SCORE_HIGH
                high += int(mask.sum())
                kept += int((s[mask] > SCORE_KEPT).sum())
        entry = {"kind": sl.kind, "output": sl.output, "min_cosine": min(cosines), "max_abs": max_abs,
                 "sim_max": sim_max, "ref_max": ref_max}
        if sl.kind == "scores":
            entry["confident_ref_scores"] = high
            entry["score_recall"] = (kept / high) if high else None
        report[key] = entry
    return report


def gate(report: dict, limits: FidelitySection, platform: str) -> list[str]:
    """Raise ConversionError when a slice fails; return warnings worth printing."""
    warnings = []
    for key, entry in report.items():
        if entry["kind"] == "scores":
            if entry["ref_max"] > SCORE_KEPT and entry["sim_max"] <= 0.0:
                raise ConversionError(f"{platform}: class scores collapsed in {key} (FP32 max {entry['ref_max']:.3f}, "
                                      "quantized max 0): quantize class scores apart from boxes "
                                      "(model.prepare: yolov8-split-head) or build FP16 (quantize.force_fp16: true)")
            recall = entry.get("score_recall")
            if recall is not None and recall < limits.min_score_recall:
                raise ConversionError(f"{platform}: class scores lost in {key}: only {recall:.0%} of confident FP32 "
                                      f"scores survive quantization (fidelity.min_score_recall {limits.min_score_recall:.0%})")
            if recall is None:
                warnings.append(f"{key}: no FP32 score above {SCORE_HIGH} on the golden inputs; score recall not judged")
        limit = limits.min_slice_cosine if entry["kind"] != "all" else limits.min_cosine
        if entry["min_cosine"] < limit:
            raise ConversionError(f"{platform}: {key} ({entry['kind']}) cosine {entry['min_cosine']:.4f} against ONNX "
                                  f"FP32 is below {limit} (fidelity section of the config)")
    return warnings


_ACTIVATION_DTYPES = {"w8a8": ("int8", "uint8"), "w4a16": ("int16",), "w8a16": ("int16",),
                      "w16a16i": ("int16",), "w16a16i_dfp": ("int16",)}


def quantization_gate(header: dict, dtype: str, quantized: bool, platform: str) -> None:
    """A quantized build must have quantized inputs and outputs: no silent float fallback."""
    tensors = header.get("inputs", []) + header.get("outputs", [])
    if quantized:
        wanted = _ACTIVATION_DTYPES.get(dtype, ("int8",))
        floating = [f"{t['name']} ({t['dtype']})" for t in tensors if t["dtype"] not in wanted]
        if floating:
            raise ConversionError(f"{platform}: the toolkit left tensors unquantized: {', '.join(floating)}; "
                                  f"expected {'/'.join(wanted)} for quantize.dtype {dtype} (force_fp16 is false)")
    else:
        integer = [t["name"] for t in tensors if not str(t["dtype"]).startswith("float")]
        if integer:
            raise ConversionError(f"{platform}: quantize.force_fp16 is true but tensors are integer: {', '.join(integer)}")
