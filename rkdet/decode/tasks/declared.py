"""Declared decisions: the rule a user's app applies to each output, named in the config (`decision:`).

For a model whose outputs rkdet recognises no layout of (a two-head face classifier, a dense
probability map, ...), the app's own rule says what it decides, per output:
* ``argmax`` / ``pixel-argmax``: the index of the largest value along `axis` at every other position
  (a vector: one label, with its top-k; a map: a label per pixel); a tie goes to the lower index.
* ``threshold`` / ``pixel-threshold``: ``output[channel] > threshold`` along `axis` at every position
  (a vector: one yes/no; a map: a yes/no per pixel).
* ``boxes``: a box + score head: this output's scores ``[1, N, C]`` (classes along `axis`; ``[1, N]`` is
  one class) with the box output `boxes` ``[1, N, 4]`` (x1, y1, x2, y2): a detection per candidate whose
  best score > threshold (no NMS: the app's own is unknown), judged as detection is (same class, box
  IoU >= 0.5; the gate's score tolerance and pairing: rkdet/decode/tasks/detection.py).
The same decision: the same label / yes-no at every position of every declared output. The diff's
delta gives per output the positions changed, and for a map the IoU of the positive set (threshold)
or the mean class IoU (argmax; a class absent from both maps left out). Convert's gate: a golden input
agrees while, per output, at most `MAX_CHANGED_FRACTION` of the positions change beyond a near tie — one
decision of a vector is 100 % of its positions, so a flipped yes/no or top-1 beyond a near tie fails it.
A near tie: argmax, two labels' FP32 values within fidelity.score_tolerance; threshold, FP32 and the
candidate both inside the near-tie band around the threshold (`near_tie_band`: bounded by the rule's
declared `range`, so it never covers the confident scores; docs/ACCURACY.md, "The near-tie band").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Protocol

import numpy as np

from rkdet.decode.common import CONF_THRESHOLD, Detections, Layout
from rkdet.decode.tasks import detection
from rkdet.decode.tasks.base import Arrays, DecisionTask, GateCount, GateLimits, SameDecision, marked_html
from rkdet.errors import InputError
from rkdet.onboard import decisions as onboard_decisions  # THE per-position decision (the self-check's too)

KIND = "declared"  # the layout and the records' "kind"
SAME = SameDecision("declared", "declared rule", None,
                    "the same decision under the app's declared rule (config `decision:`) at every position")
MAX_CHANGED_FRACTION = 0.01  # convert's gate: per output, at most 1 % of a map's positions may change
RULES = onboard_decisions.RULES


class RuleSource(Protocol):
    """What a declared rule carries (rkdet.config.DecisionRule has it)."""

    rule: str
    axis: int
    channel: int | None
    threshold: float | None
    top_k: int
    boxes: str | None


@dataclass(frozen=True)
class Rule:
    """One output's declared rule, as records show it."""

    rule: str
    axis: int = 1
    channel: int | None = None
    threshold: float | None = None
    top_k: int = 1
    boxes: str | None = None  # rule boxes: the box output
    range: tuple[float, float] | None = None  # the output's value range ([0, 1]: probabilities); None: unknown

    @property
    def is_threshold(self) -> bool:
        return self.rule.endswith("threshold")

    def describe(self) -> str:
        if self.is_threshold:
            return f"{self.rule}: channel {self.channel} > {self.threshold:g} (axis {self.axis})"
        if self.rule == "boxes":
            return f"boxes from {self.boxes}, best score > {self.threshold:g} (classes on axis {self.axis})"
        return f"{self.rule} over axis {self.axis}" + (f", top-{self.top_k}" if self.top_k > 1 else "")


def _rule(name: str, r: RuleSource | Mapping[str, Any]) -> Rule:
    """A rule from the config model or from its JSON (a build manifest's resolved config)."""
    if not isinstance(r, Mapping):
        span = getattr(r, "range", None)
        return Rule(r.rule, r.axis, r.channel, r.threshold, r.top_k, getattr(r, "boxes", None),
                    None if span is None else (float(span[0]), float(span[1])))
    try:
        span = r.get("range")
        rule = Rule(str(r["rule"]), int(r.get("axis", 1)), None if r.get("channel") is None else int(r["channel"]),
                    None if r.get("threshold") is None else float(r["threshold"]), int(r.get("top_k", 1)),
                    None if r.get("boxes") is None else str(r["boxes"]),
                    None if span is None else (float(span[0]), float(span[1])))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(f"decision.outputs.{name}: not a rule ({exc.__class__.__name__}: {exc})") from None
    if rule.range is not None and not (rule.threshold is not None and rule.range[0] < rule.threshold < rule.range[1]):
        raise InputError(f"decision.outputs.{name}.range: {list(rule.range)} must hold the rule's threshold "
                         f"({rule.threshold}) strictly inside")
    if rule.is_threshold and (rule.channel is None or rule.threshold is None):
        raise InputError(f"decision.outputs.{name}: rule {rule.rule} needs channel and threshold")
    if rule.rule == "boxes" and (rule.boxes is None or rule.threshold is None):
        raise InputError(f"decision.outputs.{name}: rule boxes needs boxes and threshold")
    return rule


def rules_of(declared: Mapping[str, RuleSource | Mapping[str, Any]]) -> dict[str, Rule]:
    return {str(name): _rule(str(name), r) for name, r in declared.items()}


def layout_of(outputs: list[tuple[str, tuple[int, ...]]], declared: Mapping[str, Any]) -> Layout:
    """The declared layout; a rule naming no output, or an axis or channel the output lacks, is one line."""
    shapes = dict(outputs)
    rules = rules_of(declared)
    for name, rule in rules.items():
        if rule.rule not in RULES:
            raise InputError(f"decision.outputs.{name}.rule: {rule.rule!r}; expected one of {', '.join(RULES)}")
        if name not in shapes:
            raise InputError(f"decision.outputs.{name}: the model has no output {name!r} "
                             f"(its outputs: {', '.join(shapes) or 'none'})")
        shape = shapes[name]
        if not -len(shape) <= rule.axis < len(shape):
            raise InputError(f"decision.outputs.{name}.axis: {rule.axis} is outside output {name}'s shape {list(shape)}")
        size = shape[rule.axis]
        if rule.rule == "boxes":
            box = shapes.get(rule.boxes or "")
            if box is None or len(box) < 2 or box[-1] != 4 or int(np.prod(box[:-1])) != int(np.prod(shape)) // size:
                raise InputError(f"decision.outputs.{name}.boxes: {rule.boxes!r} is not a box output [1, N, 4] with "
                                 f"one box per candidate of {name} {list(shape)} (outputs: "
                                 f"{', '.join(f'{n} {list(s)}' for n, s in shapes.items())})")
        if rule.is_threshold and not (rule.channel is not None and 0 <= rule.channel < size):
            raise InputError(f"decision.outputs.{name}.channel: {rule.channel} is outside axis {rule.axis} "
                             f"(size {size}) of output {name} {list(shape)}")
    detail = "declared decisions: " + "; ".join(f"{n}: {r.describe()}" for n, r in rules.items())
    return Layout(KIND, detail, roles={n: r.rule for n, r in rules.items()}, rules=rules)


def _along(rule: Rule, array: np.ndarray) -> np.ndarray:
    """The output with the rule's axis last (float64)."""
    return onboard_decisions.along(rule.axis, array)


def decide_output(rule: Rule, array: np.ndarray) -> np.ndarray:
    """The decision at every position: a label (argmax; the first maximum) or a bool (threshold), as the
    on-board self-check decides it (rkdet/onboard/decisions.py)."""
    return onboard_decisions.decide(rule.rule, rule.axis, rule.channel, rule.threshold, array)


def decide_boxes(rule: Rule, scores: np.ndarray, boxes: np.ndarray, floor: float | None = None) -> Detections:
    """Detections of a box + score head: every candidate whose best score > `floor` (the rule's threshold)."""
    x = _along(rule, scores)
    x = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x.reshape(-1, 1)
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    best = np.argmax(x, axis=1)
    score = x[np.arange(x.shape[0]), best]
    assert rule.threshold is not None
    keep = np.flatnonzero(score > (rule.threshold if floor is None else floor))
    keep = keep[np.argsort(-score[keep], kind="stable")]
    return Detections(b[keep], score[keep], best[keep].astype(np.int64))


@dataclass(frozen=True)
class Band:
    """The near-tie band around a rule's threshold: a flip with both scores in [low, high] is a near tie."""

    low: float
    high: float
    bounded: bool  # False: the output's range is unknown (no `range` declared), the band is ± the tolerance

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def describe(self) -> str:
        what = f"near-tie band {self.low:.4g}..{self.high:.4g}"
        return what if self.bounded else what + " (unbounded: no decision range declared, e.g. [0, 1] for probabilities)"


def near_tie_band(name: str, rule: Rule, tol: float) -> Band:
    """THE near-tie band of a threshold t: t ± w, both scores of a flip inside it make a near tie.

    Why this width: fidelity.score_tolerance is stated for a threshold in the middle of the output's
    range, where a score has the most room on either side; a threshold nearer an end has less room on that
    side, and a fixed ± tolerance there covers every confident score (0.9 ± 0.15 holds all of 0.9..1.0, so
    an INT8 build that lost every rotation of PaddleOCR's classifier passed). So with a declared range
    [lo, hi] the band covers the same share of the room at every threshold: w = tol * d / ((hi - lo) / 2),
    d = min(t - lo, hi - t) — ±0.15 at 0.5, ±0.09 at 0.3, ±0.03 at 0.9 for the default 0.15; never wider
    than the tolerance, and short of the range's end while tol < (hi - lo) / 2 (a larger one is refused:
    the band would reach the end). Both sides must lie in it: a marginal FP32 score that the candidate
    moves far across the threshold is a changed decision, not a tie. Without a range (raw logits) no bound
    is known: the band is t ± tol, and the gate's record says it is unbounded."""
    assert rule.threshold is not None
    t = rule.threshold
    if rule.range is None:
        return Band(t - tol, t + tol, False)
    low, high = rule.range
    half_range = (high - low) / 2
    if tol >= half_range:
        raise InputError(f"fidelity.score_tolerance {tol:g} is at least half of decision.outputs.{name}.range "
                         f"[{low:g}, {high:g}]: the near-tie band around {t:g} would reach the range's end; "
                         f"set it below {half_range:g}")
    w = tol * min(t - low, high - t) / half_range
    return Band(t - w, t + w, True)


@dataclass(frozen=True)
class _BandLimits:
    """Detection's gate limits with the score tolerance narrowed to a rule's near-tie band."""

    match_iou: float
    score_tolerance: float
    top_k: int


def _inside(band: Band, values: np.ndarray) -> np.ndarray:
    return (values >= band.low) & (values <= band.high)


def _near_tie(rule: Rule, ref: np.ndarray, cand: np.ndarray, ref_dec: np.ndarray, cand_dec: np.ndarray,
              tol: float, band: Band | None) -> np.ndarray:
    """Positions whose flip is a near tie: threshold, FP32 and candidate both in the band; argmax, the
    two labels' FP32 values within `tol` of each other."""
    x = _along(rule, ref)
    if rule.is_threshold:
        assert band is not None
        return _inside(band, x[..., rule.channel]) & _inside(band, _along(rule, cand)[..., rule.channel])
    a = np.take_along_axis(x, ref_dec[..., None], axis=-1)[..., 0]
    b = np.take_along_axis(x, cand_dec[..., None], axis=-1)[..., 0]
    return (a - b) <= tol


def _overlap(rule: Rule, ref: np.ndarray, cand: np.ndarray) -> float | None:
    """A map's overlap: IoU of the positive set (threshold) or mean class IoU (argmax); None for one position."""
    if ref.size <= 1:
        return None
    if rule.is_threshold:
        union = int(np.logical_or(ref, cand).sum())
        return float(np.logical_and(ref, cand).sum()) / union if union else 1.0
    ious = []
    for c in np.union1d(np.unique(ref), np.unique(cand)).tolist():  # classes absent from both: not judged
        r, k = ref == c, cand == c
        ious.append(float(np.logical_and(r, k).sum()) / float(np.logical_or(r, k).sum()))
    return float(np.mean(ious))


def compare_output(rule: Rule, ref: np.ndarray, cand: np.ndarray) -> dict[str, Any]:
    changed = int((ref != cand).sum())
    entry: dict[str, Any] = {"rule": rule.rule, "positions": int(ref.size), "changed_positions": changed,
                             "overlap": _overlap(rule, ref, cand)}
    if ref.size == 1:
        entry["reference"] = ref.reshape(-1)[0].item()
        entry["candidate"] = cand.reshape(-1)[0].item()
    return entry


def _compare_boxes(ref: Detections, cand: Detections) -> dict[str, Any]:
    """The diff's entry of a box + score head: detection's delta, its changed boxes as the positions."""
    delta = detection.compare_detections(detection.TASK, ref, cand)
    changed = len(delta["class_flips"]) + len(delta["missing"]) + len(delta["extra"])
    return {"rule": "boxes", "positions": max(len(ref), len(cand), 1), "changed_positions": changed,
            "overlap": delta["min_iou"], "detections": delta}


def _gate_boxes(rule: Rule, ref: Arrays, sim: Arrays, out: str, limits: GateLimits) -> dict[str, Any]:
    """Convert's gate on a box + score head: detection's rule at the declared threshold (both sides decoded
    down to threshold - score_tolerance, so a score moved just across it still pairs)."""
    assert rule.threshold is not None and rule.boxes is not None
    band = near_tie_band(out, rule, limits.score_tolerance)
    floor = band.low
    r = decide_boxes(rule, ref[out], ref[rule.boxes], floor)
    c = decide_boxes(rule, sim[out], sim[rule.boxes], floor)
    banded = _BandLimits(limits.match_iou, band.half_width, limits.top_k)  # score deltas judged by the band
    got = detection.compare_detection_decisions(detection.TASK, r, c, banded, conf=rule.threshold)
    units, agreed = got["detections"], got["agree"]
    return {"rule": "boxes", "positions": units, "changed_positions": units - agreed, "overlap": None,
            "near_tie_band": band.describe(), "disagreements": got["disagreements"],
            "agree": units == 0 or agreed / units >= 1 - MAX_CHANGED_FRACTION}


@dataclass(frozen=True)
class DeclaredFinding:
    """What a difference did to the declared decisions (one distinct result against its reference)."""

    changed: bool
    outputs: tuple[tuple[str, int, int], ...]  # (output, changed positions, positions) of changed outputs
    kind: str = KIND

    def terminal_text(self) -> str:
        if not self.changed:
            return "same declared decisions"
        return "; ".join(f"{n}: {c}/{p} changed" for n, c, p in self.outputs)

    def html(self) -> str:
        return marked_html(self)


class Declared(DecisionTask):
    name = "declared"
    record_kind = KIND
    kinds = (KIND,)
    same = SAME

    def decide(self, layout: Layout, arrays: Arrays, conf: float = CONF_THRESHOLD) -> dict[str, Any]:
        return {n: decide_boxes(r, arrays[n], arrays[r.boxes or ""]) if r.rule == "boxes" else decide_output(r, arrays[n])
                for n, r in layout.rules.items()}

    def summary(self, decided: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for n, d in decided.items():
            if isinstance(d, Detections):
                out[n] = {"detections": d.as_list()}
                continue
            values, counts = np.unique(d, return_counts=True)
            out[n] = {"shape": [int(s) for s in d.shape],
                      "counts": {str(v.item()).lower(): int(c) for v, c in zip(values, counts)}}
        return {"kind": KIND, "task": SAME.task, "outputs": out}

    def bundle_summary(self, layout: Layout, arrays: Arrays) -> dict[str, Any]:
        return self.summary(self.decide(layout, arrays))

    def compare(self, reference: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
        outputs = {n: _compare_boxes(reference[n], candidate[n]) if isinstance(reference[n], Detections) else
                   compare_output(Rule("threshold" if reference[n].dtype == bool else "argmax"), reference[n], candidate[n])
                   for n in reference}
        return {"kind": KIND, "task": SAME.task, "outputs": outputs,
                "changed": any(o["changed_positions"] for o in outputs.values())}

    def changed(self, delta: dict[str, Any]) -> bool:
        return bool(delta.get("changed"))

    def finding(self, delta: dict[str, Any]) -> DeclaredFinding:
        rows = tuple((str(n), int(o["changed_positions"]), int(o["positions"]))
                     for n, o in delta["outputs"].items() if o["changed_positions"])
        return DeclaredFinding(bool(delta["changed"]), rows)

    def gate(self, layout: Layout, ref: dict[str, Arrays], sim: dict[str, Arrays], limits: GateLimits) -> GateCount:
        per_input: dict[str, Any] = {}
        bands = {out: near_tie_band(out, rule, limits.score_tolerance)
                 for out, rule in layout.rules.items() if rule.is_threshold or rule.rule == "boxes"}
        for name in sorted(ref):
            outs, agree = {}, True
            for out, rule in layout.rules.items():
                if rule.rule == "boxes":
                    outs[out] = entry = _gate_boxes(rule, ref[name], sim[name], out, limits)
                    agree = agree and entry["agree"]
                    continue
                r, s = decide_output(rule, ref[name][out]), decide_output(rule, sim[name][out])
                entry = compare_output(rule, r, s)
                flipped = r != s
                tie = _near_tie(rule, ref[name][out], sim[name][out], r, s, limits.score_tolerance, bands.get(out))
                beyond = int((flipped & ~tie).sum())
                if out in bands:
                    entry["near_tie_band"] = bands[out].describe()
                entry["changed_beyond_near_tie"] = beyond
                entry["agree"] = beyond / max(r.size, 1) <= MAX_CHANGED_FRACTION
                agree = agree and entry["agree"]
                outs[out] = entry
            per_input[name] = {"outputs": outs, "agree": int(agree), "detections": 1}
        agreed = sum(v["agree"] for v in per_input.values())
        bands_said = "; ".join(f"{out}: {band.describe()}" for out, band in bands.items())
        return GateCount(per_input, len(per_input), agreed,
                         f"{agreed}/{len(per_input)} golden inputs keep the declared decisions"
                         + (f" ({bands_said})" if bands_said else ""))

    def gate_match_iou(self, limits: GateLimits) -> float | None:
        return None

    def decided_outputs(self, layout: Layout, output_names: tuple[str, ...]) -> set[str]:
        return set(layout.rules) | {r.boxes for r in layout.rules.values() if r.boxes}


def rules_json(layout: Layout) -> dict[str, Any]:
    return {n: asdict(r) for n, r in layout.rules.items()}


TASK = Declared()
