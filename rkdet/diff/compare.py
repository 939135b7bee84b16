"""The diff engine: stream one or two result sets, compare bitwise, then numerically, then by decision.

Hashes come first: index.jsonl already names every output by content hash, so only a hash that
differs from its reference ever gets loaded and measured, once per distinct hash. Every set is
analysed run-to-run (against its own run 0 per input); in A-vs-B mode A is also measured against
B's run 0 per input (B is the reference: golden data or another board).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rkdet.decode import Layout, detect_layout, input_hw
from rkdet.decode.tasks import DecisionTask, decision_changed, task_of, task_of_record
from rkdet.diff.correlate import correlate, run_setting_differences
from rkdet.diff.metrics import HIST_EDGES, NumericStats, compare_arrays, reference_norm2
from rkdet.diff.resultset import OutputRef, Record, ResultSource
from rkdet.records.verdict import VerdictRecord
from rkdet.textsafe import plain_value
from rkdet.tolerance import Tolerance, cross_cpu_phrase, cross_cpu_tolerance
from rkdet.errors import EXIT_DIFFERENT, EXIT_OK, InputError


@dataclass
class OutputVariant:
    """One distinct content (hash) of one output of one input, and the runs that produced it."""

    hash: str
    runs: list[int] = field(default_factory=list)
    vs_first: NumericStats | None = None  # against this set's run 0 (None: identical)
    vs_reference: NumericStats | None = None  # against B's run 0 (None: identical or no B)
    slices_vs_first: dict[str, NumericStats] = field(default_factory=dict)
    slices_vs_reference: dict[str, NumericStats] = field(default_factory=dict)


@dataclass
class OutputAnalysis:
    """Everything seen for one output of one input across the runs."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    first_hash: str
    reference_hash: str | None
    variants: dict[str, OutputVariant] = field(default_factory=dict)


@dataclass
class Group:
    """One distinct whole-inference result (all outputs' hashes) of an input and its decision deltas."""

    signature: tuple[str, ...]
    runs: list[int] = field(default_factory=list)
    decision_vs_first: dict[str, Any] | None = None
    decision_vs_reference: dict[str, Any] | None = None


@dataclass
class InputAnalysis:
    name: str
    outputs: dict[str, OutputAnalysis] = field(default_factory=dict)
    groups: dict[tuple[str, ...], Group] = field(default_factory=dict)
    latencies: list[tuple[int, float]] = field(default_factory=list)
    reference_decision: dict[str, Any] | None = None  # decoded run 0 / B reference (detections or top-k)

    @property
    def runs(self) -> int:
        return sum(len(g.runs) for g in self.groups.values())


@dataclass
class Failure:
    """One (set, input, output, distinct hash) outside the tolerance; the first run names it."""

    set: str  # "A" | "B"
    against: str  # "run 0" | "B"
    input: str
    output: str
    runs: list[int]
    stats: NumericStats
    slice_reasons: dict[str, list[str]] = field(default_factory=dict)

    @property
    def first_run(self) -> int:
        return self.runs[0]


@dataclass
class SetAnalysis:
    role: str
    source: ResultSource
    inputs: dict[str, InputAnalysis] = field(default_factory=dict)
    records: int = 0
    runs: int = 0
    first_divergence: dict[str, Any] | None = None  # run-to-run, execution order
    first_difference: dict[str, Any] | None = None  # against B, execution order
    correlation: list[str] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Verdict:
    """One named verdict and the real distance behind it (reported even when it holds).

    `repeatable`: every run of A gave bit-identical outputs per input (always bitwise: the determinism
    claim). `agrees`: A against B's run 0 (the reference), by the tolerance and at decision level (same
    detections / same top-1)."""

    name: str  # "repeatable" | "agrees"
    ok: bool
    reference: str | None = None  # agrees: the reference set's name (simulator, onnx-fp32, or its label)
    tolerance: str = "bitwise"
    outputs_differing: int = 0  # distinct (input, output, hash) that are not bit-identical
    outputs_outside: int = 0  # of those, outside the tolerance
    decisions_changed: int | None = 0  # distinct results whose detections / top-1 differ; None: no decoder ran
    max_abs: float = 0.0
    max_ulp: int = 0
    max_lsb: float | None = None  # in quantization steps, where the output's step is known
    min_cosine: float | None = None
    reason: str = ""
    caveat: str = ""  # the reference build failed its gates at convert (rkdet.records.gates): said on every line
    cross_cpu: str = ""  # agrees: the reference was made on another CPU class, so judged numerically (the line says why)

    @property
    def decisions_judged(self) -> bool:
        return self.decisions_changed is not None

    def record(self) -> VerdictRecord:
        """The verdict as deploy.json keeps it and the fleet reads it (rkdet/records/verdict.py)."""
        return VerdictRecord(ok=self.ok, reference=self.reference, tolerance=self.tolerance,
                             outputs_differing=self.outputs_differing, outputs_outside=self.outputs_outside,
                             decisions_changed=self.decisions_changed, decisions_judged=self.decisions_judged,
                             max_abs=self.max_abs, max_ulp=self.max_ulp, max_lsb=self.max_lsb,
                             min_cosine=self.min_cosine, reason=self.reason, caveat=self.caveat or None,
                             cross_cpu=self.cross_cpu or None)

    def to_json(self) -> dict[str, Any]:
        return self.record().to_json()

    def line(self) -> str:
        """`repeatable: YES (…)` / `agrees with the reference: NO (…)`: one line for terminals and logs."""
        label = "repeatable" if self.name == "repeatable" else "agrees with the reference"
        if self.name == "agrees":
            label += f" ({self.reference})"
        dist = (f"max {self.max_ulp} ULP, max abs {self.max_abs:.3g}"
                + (f", max {self.max_lsb:g} LSB" if self.max_lsb is not None else "")
                + (f", min cosine {self.min_cosine:.6f}" if self.min_cosine is not None else "")
                + (f", {self.decisions_changed} decision(s) changed" if self.decisions_changed is not None
                   else ", decisions not judged (no decoder ran: unknown, not zero)"))
        state = "bit-identical" if self.outputs_differing == 0 else f"{self.outputs_differing} output(s) not bit-identical ({dist})"
        return (f"{label}: {'YES' if self.ok else 'NO'} [{self.tolerance}]: {state}{'; ' + self.reason if self.reason else ''}"
                + (f"; {self.cross_cpu}" if self.cross_cpu else "") + (f" [{self.caveat}]" if self.caveat else ""))


@dataclass
class Comparison:
    """The result of `rkdet diff`: what was compared, how, every finding, and the verdict."""

    a: SetAnalysis
    b: SetAnalysis | None
    tolerance: Tolerance
    layout: Layout
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    abs_hist: list[int] = field(default_factory=lambda: [0] * (len(HIST_EDGES) + 1))
    overlay: dict[str, Any] | None = None  # detection overlay for the HTML report
    exit_code: int = EXIT_OK
    verdict: str = ""
    repeatable: Verdict = field(default_factory=lambda: Verdict("repeatable", True))
    agrees: Verdict | None = None  # only with a reference B
    caveat: str | None = None  # the reference build failed its gates at convert (rkdet.records.gates)
    cross_cpu: str | None = None  # A and the reference B were computed on two CPU classes: why A-vs-B is numeric

    @property
    def mode(self) -> str:
        return "a-vs-b" if self.b is not None else "run-to-run"


def _where(element: int | None, shape: tuple[int, ...]) -> str:
    if element is None:
        return "?"
    if not shape:
        return "scalar"
    return f"{element} {list(int(i) for i in np.unravel_index(element, shape))}"


def _input_hw(src: ResultSource) -> tuple[int, int] | None:
    """The model input's H, W as the result set's run.json records its inputs (a flattened grid needs it)."""
    shape = src.run_info.first_input_shape  # integers (the run.json reader checked them)
    return None if shape is None else input_hw(list(shape))


def _decision_delta(task: DecisionTask | None, ref: Any, cand: Any) -> dict[str, Any] | None:
    if task is None or ref is None or cand is None:
        return None
    return task.compare(ref, cand)


MAX_DECISION_IMAGES = 16  # changed-pixel overlays kept per comparison (each at most ~50 kB of base64 PNG)


def _decision_summary(task: DecisionTask | None, dec: Any) -> dict[str, Any] | None:
    return None if task is None or dec is None else task.summary(dec)


class _Engine:
    """Holds the per-comparison state while records stream by."""

    def __init__(self, tolerance: Tolerance, decoder: str, declared: Mapping[str, Any] | None = None) -> None:
        self.tolerance = tolerance
        self.decoder = decoder
        self.declared = declared  # the config's decision.outputs: the app's rule per output
        self.layout: Layout | None = None
        self.failures: list[Failure] = []
        self.hist = np.zeros(len(HIST_EDGES) + 1, dtype=np.int64)
        self.overlay: dict[str, Any] | None = None
        self.decision_images = 0  # decision deltas that kept their image ("overlay"), at most MAX_DECISION_IMAGES
        self.notes: list[str] = []
        self.norms: dict[tuple[str, str], float] = {}  # |reference|^2 per reference hash
        self.cross_cpu = False  # the reference B was made on another CPU class: A-vs-B within the cross-CPU bound passes

    # -- layout ----------------------------------------------------------------------------
    def layout_for(self, record: Record, src: ResultSource) -> Layout:
        if self.layout is None:
            self.layout = detect_layout([(o.name, o.shape) for o in record.outputs], self.decoder, _input_hw(src),
                                        self.declared)
        return self.layout

    # -- per-pair numerics -----------------------------------------------------------------
    def measure(self, ref_src: ResultSource, ref: OutputRef, cand_src: ResultSource, cand: OutputRef,
                where: str, against_b: bool = False) -> tuple[NumericStats, dict[str, NumericStats]]:
        if ref.shape != cand.shape:
            raise InputError(f"{where}: output {cand.name} is {list(cand.shape)} but its reference is {list(ref.shape)}; "
                             f"the two sides come from different models or layouts")
        r, c = ref_src.load(ref), cand_src.load(cand)
        if r.dtype != c.dtype:
            r, c = r.astype(np.float64), c.astype(np.float64)
        key = (ref.hash, str(r.dtype))
        if key not in self.norms:
            self.norms[key] = reference_norm2(r)
        lsb = ref_src.quant_steps.get(ref.name) or cand_src.quant_steps.get(cand.name)
        tolerance = self.tolerance.for_output(cand.name)  # its own entry, else the default
        if against_b and self.cross_cpu and r.dtype.kind == "f":  # another CPU class's FP32 kernels: numeric
            finite = np.abs(r[np.isfinite(r)])
            tolerance = cross_cpu_tolerance(tolerance, float(finite.max(initial=0.0)))
        stats = compare_arrays(r, c, tolerance, ref_norm2=self.norms[key], lsb=lsb)
        slices = {}
        assert self.layout is not None
        for slice_name, index in self.layout.slices.get(cand.name, {}).items():
            slices[slice_name] = compare_arrays(r[index], c[index], tolerance, lsb=lsb)
        self.hist += np.asarray(stats.abs_hist, dtype=np.int64)
        return stats, slices

    @property
    def task(self) -> DecisionTask | None:
        """The decision task of the layout (None: no decoder, numeric comparison only)."""
        return None if self.layout is None else task_of(self.layout)

    def decisions(self, src: ResultSource, record: Record, *, pin: bool = False) -> Any:
        """Decode a record (its task's decision); `pin` marks it as a reference whose arrays stay loaded
        (one run's worth)."""
        assert self.layout is not None
        arrays = {o.name: src.load(o, pin=pin) for o in record.outputs}
        task = self.task
        return None if task is None else task.decide(self.layout, arrays)

    # -- one set -----------------------------------------------------------------------------
    def analyse(self, analysis: SetAnalysis, reference: dict[str, tuple[ResultSource, Record]] | None) -> None:
        src = analysis.source
        firsts: dict[str, Record] = {}
        first_decisions: dict[str, Any] = {}
        ref_decisions: dict[str, Any] = {}
        for rec in self._prefetching(src, analysis):
            layout = self.layout_for(rec, src)
            analysis.records += 1
            analysis.runs = max(analysis.runs, rec.run + 1)
            ia = analysis.inputs.get(rec.input)
            if ia is None:  # run 0 of each input is pinned; the LRU holds the record being compared
                _size_cache(src, rec, 1)
            ref_rec: Record | None = None
            ref_src: ResultSource | None = None
            if reference is not None:
                if rec.input not in reference:
                    raise InputError(f"{src.label}: input {rec.input!r} has no counterpart in B "
                                     f"(B has {', '.join(sorted(reference)) or 'none'})")
                ref_src, ref_rec = reference[rec.input]
                ref_rec = _align(rec, ref_rec, src.label)
            if ia is None:
                ia = analysis.inputs[rec.input] = InputAnalysis(rec.input)
                firsts[rec.input] = rec
                for o in rec.outputs:
                    ref_hash = None
                    if ref_rec is not None:
                        ref_hash = next(x.hash for x in ref_rec.outputs if x.name == o.name)
                    ia.outputs[o.name] = OutputAnalysis(o.name, o.shape, o.dtype, layout.roles.get(o.name, "output"),
                                                        o.hash, ref_hash)
                first_decisions[rec.input] = self.decisions(src, rec, pin=True)
                if ref_rec is not None and ref_src is not None:
                    ref_decisions[rec.input] = self.decisions(ref_src, ref_rec, pin=True)
                ia.reference_decision = _decision_summary(self.task, ref_decisions.get(rec.input, first_decisions[rec.input]))
            first = firsts[rec.input]
            if [o.name for o in rec.outputs] != [o.name for o in first.outputs]:
                raise InputError(f"{src.label}: run {rec.run} input {rec.input!r} has outputs "
                                 f"{[o.name for o in rec.outputs]}, run {first.run} had {[o.name for o in first.outputs]}")
            if rec.latency_ms is not None:
                ia.latencies.append((rec.run, float(rec.latency_ms)))
            group = ia.groups.get(rec.signature)
            if group is None:
                group = ia.groups[rec.signature] = Group(rec.signature)
                self._new_group(analysis, src, rec, first, ref_src, ref_rec, ia, group,
                                first_decisions.get(rec.input), ref_decisions.get(rec.input))
            group.runs.append(rec.run)
            for o in rec.outputs:
                ia.outputs[o.name].variants[o.hash].runs.append(rec.run)
            self._note_divergence(analysis, rec, first, ref_rec)
        if analysis.records == 0:
            raise InputError(f"{src.label}: index.jsonl holds no complete inference record")
        divergent = {r for ia in analysis.inputs.values() for sig, g in ia.groups.items()
                     if sig != firsts[ia.name].signature for r in g.runs}
        analysis.snapshots = src.snapshots(limit=analysis.runs + 3)
        analysis.correlation = correlate(divergent, analysis.runs, analysis.snapshots)

    @staticmethod
    def _prefetching(src: ResultSource, analysis: SetAnalysis) -> Iterator[Record]:
        """Yield `src`'s records while a worker thread loads and hash-verifies the *next* record's unseen
        outputs, so file reads and sha256 (both release the GIL) overlap the metrics of this one."""

        def unseen(rec: Record) -> list[OutputRef]:
            ia = analysis.inputs.get(rec.input)
            if ia is None:
                return []  # a new input: its run 0 is loaded (and pinned) on the main thread
            return [o for o in rec.outputs if o.name in ia.outputs and o.hash not in ia.outputs[o.name].variants]

        def fetch(refs: list[OutputRef]) -> list[tuple[OutputRef, np.ndarray]]:
            return [(ref, src.load_fresh(ref)) for ref in refs]

        pending: tuple[Record, Future] | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rkdet-diff-prefetch") as pool:
            for rec in src.records():
                future = pool.submit(fetch, unseen(rec))
                if pending is not None:
                    for ref, arr in pending[1].result():
                        src.cache.put(ref.hash, arr)
                    yield pending[0]
                pending = (rec, future)
            if pending is not None:
                for ref, arr in pending[1].result():
                    src.cache.put(ref.hash, arr)
                yield pending[0]

    def _bound_image(self, delta: dict[str, Any] | None) -> None:
        """Keep a delta's image (a label map's changed-pixel overlay) for the first MAX_DECISION_IMAGES deltas
        only, so a result set of many distinct results cannot grow the reports without bound."""
        if not delta or "overlay" not in delta:
            return
        if self.decision_images < MAX_DECISION_IMAGES:
            self.decision_images += 1
            return
        del delta["overlay"]
        note = (f"decision images: the first {MAX_DECISION_IMAGES} changed decisions carry one in the reports; "
                "later ones are left out")
        if note not in self.notes:
            self.notes.append(note)

    def _new_group(self, analysis: SetAnalysis, src: ResultSource, rec: Record, first: Record, ref_src: ResultSource | None,
                   ref_rec: Record | None, ia: InputAnalysis, group: Group, first_dec: Any, ref_dec: Any) -> None:
        """Measure every new hash of a new distinct result, and its decision deltas."""
        where = f"{src.label}: run {rec.run} input {rec.input!r}"
        for o, f in zip(rec.outputs, first.outputs):
            oa = ia.outputs[o.name]
            if o.hash in oa.variants:
                continue
            var = oa.variants[o.hash] = OutputVariant(o.hash)
            if ref_rec is not None and ref_src is not None:  # against B first: the verdict names B before run 0
                r = next(x for x in ref_rec.outputs if x.name == o.name)
                if o.hash != r.hash:
                    var.vs_reference, var.slices_vs_reference = self.measure(ref_src, r, src, o, where, against_b=True)
                    self._check(analysis.role, "B", rec, o.name, var.vs_reference, var.slices_vs_reference, var)
            if o.hash != f.hash:
                var.vs_first, var.slices_vs_first = self.measure(src, f, src, o, where)
                self._check(analysis.role, "run 0", rec, o.name, var.vs_first, var.slices_vs_first, var)
        changed_vs_first = rec.signature != first.signature
        changed_vs_ref = ref_rec is not None and rec.signature != ref_rec.signature
        if self.layout is None or self.layout.kind == "none" or not (changed_vs_first or changed_vs_ref):
            return
        cand = self.decisions(src, rec)
        if changed_vs_first:
            group.decision_vs_first = _decision_delta(self.task, first_dec, cand)
        if changed_vs_ref:
            group.decision_vs_reference = _decision_delta(self.task, ref_dec, cand)
        for d in (group.decision_vs_first, group.decision_vs_reference):
            self._bound_image(d)
        delta = group.decision_vs_reference or group.decision_vs_first
        score = None if self.task is None or delta is None else self.task.plot_score(delta)
        if score is not None:
            ref_det = ref_dec if changed_vs_ref else first_dec
            if self.overlay is None or score > self.overlay["score"]:
                self.overlay = {"score": score, "set": analysis.role, "input": rec.input, "run": rec.run,
                                "reference": ref_det, "candidate": cand,
                                "reference_label": "B" if changed_vs_ref else "run 0",
                                "image_sources": [s for s in (ref_src, src) if s is not None]}

    def _check(self, role: str, against: str, rec: Record, output: str, stats: NumericStats,
               slices: dict[str, NumericStats], var: OutputVariant) -> None:
        bad_slices = {k: s.reasons for k, s in slices.items() if not s.within}
        if not stats.within or bad_slices:
            self.failures.append(Failure(role, against, rec.input, output, var.runs, stats, bad_slices))

    def _note_divergence(self, analysis: SetAnalysis, rec: Record, first: Record, ref_rec: Record | None) -> None:
        ia = analysis.inputs[rec.input]
        if analysis.first_divergence is None and rec.signature != first.signature:
            analysis.first_divergence = _first_point(rec, first, ia, "vs_first")
        if analysis.first_difference is None and ref_rec is not None and rec.signature != ref_rec.signature:
            analysis.first_difference = _first_point(rec, ref_rec, ia, "vs_reference")


def _first_point(rec: Record, ref: Record, ia: InputAnalysis, attr: str) -> dict[str, Any]:
    """Run, input, output, element and both values of the first differing output of a record."""
    for o, r in zip(rec.outputs, ref.outputs):
        if o.hash != r.hash:
            stats: NumericStats | None = getattr(ia.outputs[o.name].variants[o.hash], attr)
            assert stats is not None
            return {"run": rec.run, "input": rec.input, "output": o.name, "index": stats.first_index,
                    "position": _where(stats.first_index, o.shape).split(" ", 1)[-1] if o.shape else "scalar",
                    "reference": stats.first_reference, "candidate": stats.first_candidate,
                    "max_ulp": stats.max_ulp, "max_abs": stats.max_abs}
    raise AssertionError("signatures differ but no output does")


def _align(rec: Record, ref: Record, label: str) -> Record:
    """Reorder the reference's outputs to the candidate's names (or pair by position when exactly one side
    is a bare .npy)."""
    names = [o.name for o in rec.outputs]
    by_name = {o.name: o for o in ref.outputs}
    if set(names) == set(by_name):
        aligned = Record(ref.run, ref.input, tuple(by_name[n] for n in names), ref.latency_ms, ref.t_unix)
    elif len(ref.outputs) == len(rec.outputs) and (names == ["output"] or list(by_name) == ["output"]):
        aligned = Record(ref.run, ref.input, tuple(
            OutputRef(n, o.hash, o.shape, o.dtype) for n, o in zip(names, ref.outputs)), ref.latency_ms, ref.t_unix)
    else:
        raise InputError(f"{label}: input {rec.input!r} has outputs {sorted(names)} but B has {sorted(by_name)}; "
                         f"compare results of the same model")
    for o, r in zip(rec.outputs, aligned.outputs):
        if o.shape != r.shape:
            raise InputError(f"{label}: input {rec.input!r} output {o.name} is {list(o.shape)} but B's is "
                             f"{list(r.shape)}; compare results of the same model and input size")
    return aligned


def _size_cache(src: ResultSource, rec: Record, records: int) -> None:
    """Bound a source's array cache to `records` records of this shape (plus 1 MiB of slack)."""
    size = sum(int(np.prod(o.shape, dtype=np.int64)) * np.dtype(o.dtype).itemsize for o in rec.outputs)
    src.cache.max_bytes = records * size + (1 << 20)


def _reference_records(b: ResultSource) -> dict[str, tuple[ResultSource, Record]]:
    refs: dict[str, tuple[ResultSource, Record]] = {}
    for rec in b.records():
        if rec.input not in refs:
            refs[rec.input] = (b, rec)
            _size_cache(b, rec, 1)
    if not refs:
        raise InputError(f"{b.label}: index.jsonl holds no complete inference record")
    return refs


def run_comparison(a: ResultSource, b: ResultSource | None, tolerance: Tolerance, decoder: str = "auto",
                   declared: Mapping[str, Any] | None = None) -> Comparison:
    """Analyse `a` (run-to-run, and against `b`'s run 0 when given) and `b` (run-to-run); `declared`: the
    app's decision rule per output (config `decision.outputs`; absent: a build's own, from its manifest)."""
    if declared is None:
        declared = next((s.declared for s in (b, a) if s is not None and s.declared), None)
    engine = _Engine(tolerance, decoder, declared)
    notes = [s.note for s in (a, b) if s is not None and s.note]
    a_analysis = SetAnalysis("A", a)
    b_analysis = SetAnalysis("B", b) if b is not None else None
    reference = None
    if b is not None:
        reference = _reference_records(b)
        a_inputs = {rec.input for rec in a.records()}
        if len(a_inputs) == 1 and len(reference) == 1 and a_inputs != set(reference):
            (only,) = a_inputs
            (ref_name,) = reference
            notes.append(f"single inputs paired by position: A {only!r} vs B {ref_name!r}")
            reference = {only: reference[ref_name]}
        missing = sorted(set(reference) - a_inputs)
        if missing:
            notes.append(f"B has input(s) A lacks: {', '.join(missing)} (not compared)")
        notes.extend(run_setting_differences(a.run_info, b.run_info))
        cross_cpu = cross_cpu_line(a, b)
        if cross_cpu:
            engine.cross_cpu = True
            notes.append(cross_cpu)
    for role, src in (("A", a), ("B", b)):
        if src is not None and src.run_info.emulated:
            notes.append(f"{role} results are EMULATED: {src.run_info.backend_detail or src.run_info.backend}")
        status = src.run_info.status if src is not None else None
        if status not in (None, "complete"):
            error = src.run_info.error if src is not None else None
            notes.append(f"{role} run status is {plain_value(status)}{f' ({error})' if error else ''}: only its completed "
                         f"inferences are compared")
    engine.analyse(a_analysis, reference)
    if b_analysis is not None:
        engine.analyse(b_analysis, None)
        if b is not None and any(f.against == "B" for f in engine.failures):
            a_analysis.correlation += [f"A differs from B, and {d}" for d in run_setting_differences(a.run_info, b.run_info)]
    layout = engine.layout or detect_layout([], "none")
    seen = {name for s in (a_analysis, b_analysis) if s is not None for ia in s.inputs.values() for name in ia.outputs}
    unmatched = [name for name in tolerance.outputs if name not in seen]
    if unmatched:  # a typo in a per-output tolerance would otherwise silently judge by the default
        notes.append(f"the tolerance names output(s) these result sets lack: {', '.join(unmatched)} "
                     f"(outputs: {', '.join(sorted(seen))})")
    notes.append(f"decoder: {layout.detail}")
    comparison = Comparison(a_analysis, b_analysis, tolerance, layout, engine.failures, notes + engine.notes,
                            engine.hist.tolist())
    comparison.cross_cpu = cross_cpu_line(a, b) if b is not None else None
    comparison.overlay = _finish_overlay(engine.overlay, a_analysis, b_analysis)
    decoded = layout.kind != "none"
    comparison.repeatable = _repeatable(a_analysis, decoded)
    comparison.agrees = _agrees(comparison, decoded) if b_analysis is not None else None
    failed = not comparison.repeatable.ok or (comparison.agrees is not None and not comparison.agrees.ok)
    comparison.exit_code = EXIT_DIFFERENT if comparison.failures or failed else EXIT_OK
    comparison.verdict = verdict_line(comparison)
    if comparison.cross_cpu and comparison.agrees is not None and comparison.agrees.outputs_differing:
        comparison.verdict += f"; {comparison.cross_cpu}"
    caveat = next((s.build_caveat for s in (b, a) if s is not None and s.build_caveat), None)
    if caveat:  # a build that failed its gates at convert: every verdict line says so
        comparison.caveat = caveat
        comparison.notes.append(caveat)
        for v in (comparison.repeatable, comparison.agrees):
            if v is not None:
                v.caveat = caveat
        comparison.verdict += f" [{caveat}]"
    return comparison


def cross_cpu_line(a: ResultSource, b: ResultSource) -> str | None:
    """Why A against the reference B is judged numerically: both record the CPU class their FP32 outputs were
    computed on (run.json backend_options, a build's manifest) and the two differ; None when the classes are
    equal or either is unknown (then bitwise, as declared). docs/FORMATS.md "CPU class"."""
    theirs, ours = b.cpu_class, a.cpu_class
    if not theirs or not ours or theirs == ours:
        return None
    return (f"reference made on CPU class {plain_value(theirs, 80)!r}, this run on {plain_value(ours, 80)!r}: compared "
            f"numerically ({cross_cpu_phrase()}), not bitwise (FP32 kernels round differently across CPU classes)")


def _finish_overlay(overlay: dict[str, Any] | None, a: SetAnalysis, b: SetAnalysis | None) -> dict[str, Any] | None:
    """Pick the input image for the detection plot: the changed input, else the first decoded input."""
    if overlay is None:
        ia = next(iter(a.inputs.values()), None)
        ref = ia.reference_decision if ia else None
        task = task_of_record(ref)
        drawn = None if task is None or not ref else task.plotted(ref)
        if drawn is None:
            return None
        overlay = {"score": 0, "set": "A", "input": ia.name, "run": 0, "reference": drawn,
                   "candidate": None, "reference_label": "B" if b is not None else "run 0",
                   "image_sources": [s.source for s in (b, a) if s is not None]}
    image = None
    for src in overlay.pop("image_sources"):
        image = src.input_image(overlay["input"])
        if image is not None:
            break
    overlay["image"] = image
    return overlay


def _decision_changed(delta: dict[str, Any] | None) -> bool:
    """Same detections / same top-1: a class flip, a missing or extra box, or a top-1 flip (the task says)."""
    return decision_changed(delta)


def _distance(v: Verdict, stats: list[NumericStats]) -> Verdict:
    v.outputs_differing = len(stats)
    v.max_abs = max((s.max_abs for s in stats), default=0.0)
    v.max_ulp = max((s.max_ulp for s in stats), default=0)
    lsbs = [s.max_lsb for s in stats if s.max_lsb is not None]
    v.max_lsb = max(lsbs) if lsbs else (None if stats else 0.0)
    cosines = [s.cosine for s in stats if s.cosine is not None]
    v.min_cosine = min(cosines) if cosines else (None if stats else 1.0)
    return v


def _repeatable(a: SetAnalysis, decoded: bool = True) -> Verdict:
    """Every run of every input bit-identical to run 0 (bitwise whatever the tolerance). `decoded`: a decoder
    ran (else decisions are not judged: None, not 0)."""
    stats = [var.vs_first for ia in a.inputs.values() for oa in ia.outputs.values() for var in oa.variants.values()
             if var.vs_first is not None]
    changed = sum(_decision_changed(g.decision_vs_first) for ia in a.inputs.values() for g in ia.groups.values())
    v = _distance(Verdict("repeatable", not stats), stats)
    v.outputs_outside = len(stats)
    v.decisions_changed = changed if decoded else None
    if stats:
        d = a.first_divergence or {}
        v.reason = (f"not repeatable: run {d.get('run')} input {d.get('input')} output {d.get('output')} "
                    f"differs from run 0 at element {d.get('index')}")
    return v


def _agrees(c: Comparison, decoded: bool = True) -> Verdict:
    """A against B's run 0 by the tolerance, and at decision level (when a decoder ran)."""
    assert c.b is not None
    stats = [var.vs_reference for ia in c.a.inputs.values() for oa in ia.outputs.values()
             for var in oa.variants.values() if var.vs_reference is not None]
    outside = [f for f in c.failures if f.set == "A" and f.against == "B"]
    changed = sum(_decision_changed(g.decision_vs_reference) for ia in c.a.inputs.values() for g in ia.groups.values())
    ref = c.b.source.path.name if c.b.source.path.parent.name == "golden" else c.b.source.short_label
    v = _distance(Verdict("agrees", not outside and not changed, ref, c.tolerance.describe()), stats)
    v.outputs_outside = len(outside)
    v.decisions_changed = changed if decoded else None
    if c.cross_cpu:
        v.cross_cpu = c.cross_cpu
        v.tolerance = f"{v.tolerance}, or within the cross-CPU bound"
    if outside:
        f = outside[0]
        v.reason = f"input {f.input} output {f.output} outside tolerance ({'; '.join(f.stats.reasons) or 'slices'})"
    elif changed:
        v.reason = f"{changed} distinct result(s) change a decision (detections / top-1)"
    return v


def verdict_line(c: Comparison) -> str:
    """One line: SAME/DIFFERENT, the tolerance, where the first failure is, and which verdict failed."""
    failed = [(n, v) for n, v in (("not repeatable", c.repeatable), ("disagrees with the reference", c.agrees))
              if v is not None and not v.ok]
    if not failed:
        return _verdict_core(c)
    which = " and ".join(n for n, _ in failed)
    if not c.failures:  # within tolerance, yet a verdict failed: bitwise repeatability or a changed decision
        return f"DIFFERENT ({c.tolerance.describe()}): {which}: {failed[0][1].reason}"
    return f"{_verdict_core(c)} [{which}]"


def _verdict_core(c: Comparison) -> str:
    tol = c.tolerance.describe()
    total = c.a.records + (c.b.records if c.b else 0)
    versus = f" against B ({c.b.source.short_label})" if c.b else " run-to-run"
    if not c.failures:
        crossed = c.cross_cpu is not None and c.agrees is not None and c.agrees.outputs_differing > 0
        what = "bit-identical" if c.tolerance.bitwise and not crossed else "within tolerance"
        distinct = max((len(ia.groups) for ia in c.a.inputs.values()), default=1)
        extra = "" if distinct == 1 else f" ({distinct} distinct results per input at most)"
        return f"SAME ({tol}): {c.a.records} inferences of {len(c.a.inputs)} input(s){versus}: all outputs {what}{extra}"
    f = min(c.failures, key=lambda x: (x.set, x.first_run))
    s = f.stats
    bad_runs = {(x.set, x.input, r) for x in c.failures for r in x.runs}
    where = s.first_index
    owner = c.a if f.set == "A" or c.b is None else c.b
    shape = owner.inputs[f.input].outputs[f.output].shape
    why = "; ".join(s.reasons) if s.reasons else "; ".join(f"{k}: {', '.join(v)}" for k, v in f.slice_reasons.items())
    return (f"DIFFERENT ({tol}): set {f.set} run {f.first_run}, input {f.input}, output {f.output}, element "
            f"{_where(where, shape)}: {s.first_reference!r} vs {s.first_candidate!r} at {f.against} "
            f"(max {s.max_ulp} ULP, max abs {s.max_abs:.3g}); {why}; {len(bad_runs)} of {total} inferences "
            f"outside tolerance")
