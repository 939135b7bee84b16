"""The board bisection: run the build, then cut models, on the board; compare each with its reference.

`--against simulator`: each model's outputs against the reference the rule picks for the board
(the backend's reference rule, rkdet.backends: the toolkit simulator of that very cut for an NPU, the FP32 ONNX cut for
the emulated CPU runtime), by the build's tolerances. `run0`: every run against the board's own run 0,
bitwise. `core-mask=M`: the run with the build's core mask against a run with mask M, by the tolerances.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from rkdet.bisection.on_board import BoardResult, BoardRunner
from rkdet.bisection.cuts import CutBuilder
from rkdet.bisection.plan import CutPoint, bisect, cut_points, max_cut_builds
from rkdet.choices import CORE_MASKS
from rkdet.diff.metrics import compare_arrays
from rkdet.diff.resultset import ResultSetDir
from rkdet.errors import InputError
from rkdet.layers.report import BisectionReport, BisectStep
from rkdet.backends.registry import backend
from rkdet.tolerance import Tolerance


@dataclass(frozen=True)
class Against:
    """What the board is compared with."""

    kind: str  # "simulator" | "run0" | "core-mask"
    core_mask: str | None = None

    @property
    def label(self) -> str:
        return f"core-mask={self.core_mask}" if self.kind == "core-mask" else self.kind


def parse_against(text: str) -> Against:
    """simulator | run0 | core-mask=M; anything else is one line, exit 2."""
    if text in ("simulator", "run0"):
        return Against(text)
    key, sep, mask = text.partition("=")
    if key == "core-mask" and sep and mask in CORE_MASKS:
        return Against("core-mask", mask)
    raise InputError(f"--against {text!r}: use simulator, run0 or core-mask=M with M one of {', '.join(CORE_MASKS)}")


@dataclass(frozen=True)
class CutVerdict:
    departs: bool
    tensor: str | None  # the worst departing tensor (or the worst one when none departs)
    cosine: float | None
    max_abs: float | None
    why: str


def judge(pairs: list[tuple[str, dict[str, np.ndarray], dict[str, np.ndarray]]], tol: Tolerance) -> CutVerdict:
    """Compare (input, reference, board) output dicts; departs when any tensor of any input is outside `tol`."""
    worst: tuple[float, str, float | None, float | None] | None = None
    departing: tuple[float, str, float | None, float | None, str] | None = None
    for input_name, ref, got in pairs:
        for name, expected in ref.items():
            actual = got.get(name)
            if actual is None:
                return CutVerdict(True, name, None, None, f"{input_name}: the board gave no tensor {name}")
            if actual.shape != expected.shape and actual.size == expected.size:
                actual = actual.reshape(expected.shape)
            if actual.shape != expected.shape:
                return CutVerdict(True, name, None, None, f"{input_name}: {name} has shape {list(actual.shape)}, "
                                 f"the reference {list(expected.shape)}")
            if actual.dtype != expected.dtype:
                actual, expected = actual.astype(np.float32), expected.astype(np.float32)
            st = compare_arrays(expected, actual, tol.for_output(name))  # its entry, else the default
            key = st.cosine if st.cosine is not None else -2.0
            if worst is None or key < worst[0]:
                worst = (key, name, st.cosine, st.max_abs)
            if not st.within and (departing is None or key < departing[0]):
                departing = (key, name, st.cosine, st.max_abs, f"{input_name}: {'; '.join(st.reasons) or 'outside'}")
    if departing is not None:
        return CutVerdict(True, departing[1], departing[2], departing[3], departing[4])
    if worst is None:
        return CutVerdict(False, None, None, None, "nothing compared")
    return CutVerdict(False, worst[1], worst[2], worst[3], f"within {tol.describe()}")


def _golden(build: Path, kind: str) -> dict[str, dict[str, np.ndarray]]:
    src = ResultSetDir(build / "golden" / kind)
    return {rec.input: {ref.name: src.load_fresh(ref) for ref in rec.outputs} for rec in src.records() if rec.run == 0}


def bisect_on_board(builder: CutBuilder, runner: BoardRunner, against: Against, core_mask: str, tol: Tolerance,
                    progress: Callable[[str], None], *, source: str, board: str) -> BisectionReport:
    """Locate the first tensor where the board departs; every step is recorded in the report."""
    started = time.monotonic()
    onnx_bytes = (builder.build / "model.onnx").read_bytes()
    points = cut_points(onnx_bytes)
    if not points:
        raise InputError(f"{builder.build / 'model.onnx'}: no node with a float output to cut at")
    steps: dict[int, BisectStep] = {}

    def departs(pos: int) -> bool:
        point = points[pos]
        last = pos == len(points) - 1
        if last:
            folder, cached, build_s, changed, how = builder.build, True, 0.0, 0, "the build's own model"
            tag = "full"
        else:
            cut = builder.get(point)
            folder, cached, build_s, changed = cut.folder, cut.cached, cut.build_s, cut.quant_changed
            how = "cut (cached)" if cached else "cut (built)"
            tag = f"cut-{folder.name}"
        progress(f"board run {runner.runs + 1}: {how} ending at {point.node} ({point.op}), "
                 f"{len(point.frontier)} tensor(s)")
        result = runner.run(folder, tag, core_mask)
        pairs = _pairs(result, against, builder, point, last, runner, folder, tag)
        verdict = judge(pairs, Tolerance() if against.kind == "run0" else tol)
        steps[pos] = BisectStep(pos, point.node, point.op, list(point.frontier), verdict.departs, how, build_s,
                                result.board_s, verdict.tensor, verdict.cosine, verdict.max_abs, verdict.why, changed)
        progress(f"  {'DEPARTS' if verdict.departs else 'agrees'} at {point.node}: {verdict.why}")
        return verdict.departs

    located = bisect(len(points), departs)
    first = points[located.first_departing] if located.first_departing is not None else None
    last = points[located.last_agreeing] if located.last_agreeing is not None else None
    built = sum(1 for s in steps.values() if s.model == "cut (built)")
    cached = sum(1 for s in steps.values() if s.model == "cut (cached)")
    first_step = steps.get(located.first_departing) if located.first_departing is not None else None
    return BisectionReport(
        source=source, board=board, against=against.label, fingerprint=builder.fingerprint,
        toolkit=builder.toolkit or "not needed (every model cached)", tolerance=tol.describe(),
        layers=len(points), bound=max_cut_builds(len(points)),
        first_departing=_where(first, first_step.worst_tensor if first_step else None) if first is not None else None,
        last_agreeing=_where(last, None) if first is not None else None,
        op_between=f"{first.node} ({first.op})" if first is not None else None,
        steps=[steps[k] for k in sorted(steps)], board_runs=runner.runs, cut_builds=built, cut_cache_hits=cached,
        timings={"wall_s": time.monotonic() - started, "board_s": runner.seconds,
                 "cut_build_s": sum(s.build_s for s in steps.values())},
        warnings=list(runner.notes))


def _where(point: CutPoint | None, tensor: str | None) -> dict | None:
    if point is None:
        return {"position": None, "node": None, "op": None, "tensors": ["graph input"]}
    return {"position": point.position, "node": point.node, "op": point.op,
            "tensors": [tensor] if tensor in point.tensors else list(point.tensors)}


def _pairs(result: BoardResult, against: Against, builder: CutBuilder, point: CutPoint, last: bool,
           runner: BoardRunner, folder: Path, tag: str) -> list[tuple[str, dict, dict]]:
    pairs = []
    if against.kind == "simulator":
        kind = backend(result.backend).reference(result.emulated, result.emulates_npu)
        if last:
            refs = _golden(builder.build, kind)
        else:
            cut = builder.get(point)
            refs = {name: cut.reference(kind, name) for name in result.inputs}
        for name in result.inputs:
            if name not in refs:
                raise InputError(f"{builder.build}: golden input {name} has no {kind} reference")
            pairs += [(f"{name} run {r}", refs[name], got) for r, got in enumerate(result.runs(name))]
    elif against.kind == "run0":
        for name in result.inputs:
            runs = result.runs(name)
            pairs += [(f"{name} run {r}", runs[0], got) for r, got in enumerate(runs) if r > 0]
    else:
        other = runner.run(folder, tag, against.core_mask or "auto")
        for name in result.inputs:
            pairs += [(f"{name} core-mask {against.core_mask}", other.runs(name)[0], got) for got in result.runs(name)]
    return pairs
