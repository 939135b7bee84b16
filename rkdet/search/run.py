"""Build each variant of the search space in its fixed order; record options, fidelity and fingerprint.

Variants run cheapest first by estimate (rkdet/search/budget.py) within the time budget: each build's time
is measured, a build still running at the deadline is stopped, and what was left untried is recorded.
When `rkdet layers` says the loss accumulates (no single layer below fidelity.min_layer_cosine while the
whole model is), single-layer hybrids cannot fix it: the remedy stage is then a float16 build, labelled
as such (never an INT8 result). Every variant is a real `rkdet convert` of a validated config (the user's
plus the variant's keys) into a scratch folder beside the output; a failed one is kept just long enough to read its fidelity.json and
manifest.json (the fingerprint), then removed. The first variant that passes every gate is installed as the
build `<out>/<name>-<platform>`, exactly where `rkdet convert` would put it.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rkdet.config import RkdetConfig
from rkdet.convert.hermetic import BuildWatch, DeadlineReached
from rkdet.convert.images import list_images
from rkdet.convert.pipeline import convert, install_build
from rkdet.errors import ConversionError, InputError
from rkdet.records.fidelity import FILE as FIDELITY
from rkdet.records.fidelity import FidelityRecord, read_fidelity
from rkdet.records.manifest import read_manifest
from rkdet.search.budget import HYBRID_COST, LAYERS_COST, Budget, cheapest_first, format_duration, relative_cost
from rkdet.search.space import (
    MAX_HYBRID_K,
    Space,
    SearchVariant,
    float_variant,
    hybrid_ks,
    hybrid_variants,
    quantize_variants,
)
from rkdet.log import Log

if TYPE_CHECKING:
    from rkdet.layers.report import Layer

SCHEMA = "rkdet.search/2"  # 2: cost order, measured build seconds, budget, untried variants, loss shape
LAYERS_MAX_INPUTS = 2  # as `rkdet layers` by default: the golden inputs that stray furthest


@dataclass(frozen=True)
class Closest:
    """The gate a variant came closest to failing (or failed worst): margin < 0 is a failure."""

    gate: str
    subject: str
    value: float | None
    threshold: float | None
    margin: float | None


@dataclass
class Outcome:
    """What one variant's build gave."""

    variant: SearchVariant
    status: str  # "pass" | "fail" (a gate) | "error" (the toolkit or a check failed) | "stopped" (the budget ran out)
    options: dict[str, Any]
    build_seconds: float | None = None  # measured (the search's clock)
    estimated_seconds: float | None = None  # what the measured builds before it predicted
    relative_cost: float = 1.0
    message: str | None = None
    fingerprint: str | None = None
    fidelity_line: str | None = None
    gates: list[dict[str, Any]] = field(default_factory=list)
    slices: dict[str, Any] = field(default_factory=dict)
    closest: Closest | None = None
    no_effect: int | None = None  # the earlier variant whose fidelity this one equals to the last bit

    def fidelity_signature(self) -> tuple[tuple[str, str, Any], ...]:
        """Every gate's (gate, subject, value): two builds equal here changed nothing the gates measure."""
        return tuple((str(g.get("gate")), str(g.get("subject")), g.get("value")) for g in self.gates)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.variant.index, "stage": self.variant.stage, "changes": self.variant.changes,
                "options": self.options, "status": self.status, "message": self.message,
                "fingerprint": self.fingerprint, "fidelity_line": self.fidelity_line, "gates": self.gates,
                "slices": self.slices, "float_layers": self.options["float_layers"],
                "float_build": bool(self.options.get("force_fp16")),
                "build_seconds": self.build_seconds, "estimated_seconds": self.estimated_seconds,
                "relative_cost": self.relative_cost, "no_effect": self.no_effect,
                "closest": None if self.closest is None else asdict(self.closest)}


@dataclass(frozen=True)
class Untried:
    """A variant the budget left out: its place, what it would change, its estimated cost."""

    variant: SearchVariant
    relative_cost: float
    estimated_seconds: float | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"index": self.variant.index, "stage": self.variant.stage, "changes": self.variant.changes,
                "relative_cost": self.relative_cost, "estimated_seconds": self.estimated_seconds, "reason": self.reason}


@dataclass(frozen=True)
class LossShape:
    """What `rkdet layers` says about where the loss comes from: one layer (a hybrid fixes it) or everywhere."""

    accumulates: bool  # no single layer below the threshold while the entire model is
    threshold: float
    min_single_cosine: float | None
    first_loss: str | None  # ONNX label of the first layer whose entire cosine is below the threshold
    first_loss_cosine: float | None
    min_output_cosine: float | None

    def sentence(self) -> str:
        if not self.accumulates:
            return "rkdet layers: single layers cause the loss (single-layer float16 can fix it)"
        if self.first_loss:
            where = f"first below {self.threshold:g} at {self.first_loss} (entire cosine {self.first_loss_cosine:.4g})"
        elif self.min_output_cosine is not None and self.min_output_cosine < self.threshold:
            where = f"outputs down to cosine {self.min_output_cosine:.4g}"
        else:
            where = "the gate fails on the whole model's decisions"
        return (f"rkdet layers: the loss accumulates: {where} while no single layer is below {self.threshold:g} "
                f"(lowest single cosine {self.min_single_cosine:.4g}), so no few float16 layers can fix it")


@dataclass
class SearchResult:
    platform: str
    space: Space
    search_all: bool
    outcomes: list[Outcome]
    worst_single: list[dict[str, Any]] | None  # from `rkdet layers` (None: the hybrid stage was not reached)
    layers_error: str | None
    build: Path | None  # the installed build of the first passing variant
    budget_seconds: float = 0.0
    elapsed_seconds: float = 0.0
    untried: list[Untried] = field(default_factory=list)
    loss: LossShape | None = None

    @property
    def out_of_budget(self) -> bool:
        return bool(self.untried) or any(o.status == "stopped" for o in self.outcomes)

    @property
    def passed(self) -> Outcome | None:
        return next((o for o in self.outcomes if o.status == "pass"), None)

    def to_json(self, searched_config: str | None) -> dict[str, Any]:
        first = self.passed
        return {"schema": SCHEMA, "platform": self.platform, "space": self.space.to_json(),
                "search_all": self.search_all, "passed": None if first is None else first.variant.index,
                "fingerprint": None if first is None else first.fingerprint, "searched_config": searched_config,
                "worst_single": self.worst_single, "layers_error": self.layers_error,
                "budget_seconds": self.budget_seconds, "elapsed_seconds": self.elapsed_seconds,
                "untried": [u.to_json() for u in self.untried],
                "loss": None if self.loss is None else asdict(self.loss),
                "variants": [o.to_json() for o in self.outcomes]}


def apply(cfg: RkdetConfig, changes: dict[str, Any]) -> RkdetConfig:
    """The config with the dotted keys changed, validated like a loaded config."""
    doc = cfg.resolved_dict()
    for dotted, value in changes.items():
        section, key = dotted.split(".", 1)
        doc[section][key] = value
    return RkdetConfig.model_validate(doc)


def _options(cfg: RkdetConfig, calibration_images: int) -> dict[str, Any]:
    q = cfg.quantize
    return {"algorithm": q.algorithm, "method": q.method, "max_images": q.max_images,
            "calibration_images": calibration_images, "float_layers": list(q.float_layers),
            "force_fp16": q.force_fp16}


def _closest(gates: list[dict[str, Any]]) -> Closest | None:
    best = None
    for g in gates:
        if not g.get("binding") or g.get("value") is None or g.get("threshold") is None:
            continue
        margin = (g["threshold"] - g["value"]) if g["gate"] == "saturation" else (g["value"] - g["threshold"])
        if best is None or margin < best.margin:
            best = Closest(g["gate"], g["subject"], g["value"], g["threshold"], margin)
    return best


def _read(folder: Path) -> tuple[str | None, FidelityRecord | None]:
    fp, fid = None, None
    try:
        fp = read_manifest(folder / "manifest.json").fingerprint
    except (OSError, InputError):
        pass
    try:
        fid = read_fidelity(folder / FIDELITY)  # the one fidelity.json reader (bounded, strict)
    except (OSError, InputError):
        pass
    return fp, fid


def _fidelity_line(fid: FidelityRecord, platform: str) -> str | None:
    """The convert's one-line fidelity summary, from a kept build's fidelity.json."""
    from rkdet.convert.fidelity import FidelityReport, summary_line

    try:
        return summary_line(FidelityReport(dict(fid.layout), list(fid.gates)),
                            platform)
    except (TypeError, ValueError):
        return None


def build_variant(cfg: RkdetConfig, variant: SearchVariant, platform: str, scratch: Path, progress: Log,
                  watch: BuildWatch | None = None) -> tuple[Outcome, Path | None]:
    """Convert one variant into `scratch/<index>/`; returns its outcome and, when it passed, its build folder
    (`watch`: the toolkit's progress lines and the budget's deadline)."""
    vcfg = apply(cfg, variant.changes)
    count = len(list_images(vcfg.quantize.dataset, "quantize.dataset", vcfg.quantize.max_images))
    outcome = Outcome(variant, "error", _options(vcfg, count))
    out = scratch / f"{variant.index:03d}"
    try:
        result = convert(vcfg, out, [platform], keep_failed=True,
                         progress=lambda m: progress(f"variant {variant.index}: {m}"), watch=watch)[0]
    except DeadlineReached as err:
        outcome.status, outcome.message = "stopped", str(err)
        shutil.rmtree(out, ignore_errors=True)
        return outcome, None
    except (ConversionError, InputError) as err:  # a gate (FidelityGateError), the toolkit, a refused layer name
        if isinstance(err, InputError) and not variant.changes:
            raise  # the config itself is wrong (exit 2): every variant would say so
        outcome.message = str(err)
        fp, fid = _read(out / f"{vcfg.name}-{platform}.failed")
        if fid is not None and any(g.failed for g in fid.gates):
            outcome.status = "fail"
        outcome.fingerprint = fp
        if fid is not None:
            outcome.gates, outcome.slices = [g.to_json() for g in fid.gates], dict(fid.slices)
            outcome.fidelity_line = _fidelity_line(fid, platform)
        outcome.closest = _closest(outcome.gates)
        shutil.rmtree(out, ignore_errors=True)
        return outcome, None
    folder = result.folder
    outcome.status, outcome.fidelity_line = "pass", result.fidelity_line
    fp, fid = _read(folder)
    outcome.fingerprint = fp or result.fingerprint
    if fid is not None:
        outcome.gates, outcome.slices = [g.to_json() for g in fid.gates], dict(fid.slices)
    outcome.closest = _closest(outcome.gates)
    return outcome, folder


def loss_shape(singles: list[float | None], first_loss: tuple[str, float] | None, outputs: list[float],
               threshold: float, gate_failed: bool = False) -> LossShape:
    """Accumulating loss: the entire model is lost (a layer's accumulated cosine or an output's below
    `threshold`, or the build fails its gate: the search reaches this stage only then) while every single
    layer (fed float inputs) stays at or above it: no layer to put in float16 stands out."""
    measured = [c for c in singles if c is not None]
    low_single = min(measured) if measured else None
    low_output = min(outputs) if outputs else None
    entire_low = first_loss is not None or (low_output is not None and low_output < threshold) or gate_failed
    accumulates = bool(entire_low and low_single is not None and low_single >= threshold)
    return LossShape(accumulates, threshold, low_single, first_loss[0] if first_loss else None,
                     first_loss[1] if first_loss else None, low_output)


def _worst_single(cfg: RkdetConfig, platform: str, scratch: Path, progress: Log, top: int
                  ) -> tuple[list[dict[str, Any]], int, LossShape]:
    """`rkdet layers` on the config as given: its worst layers by single error, how many layers it measured,
    and whether the loss comes from single layers or accumulates."""
    from rkdet.layers.rebuild import BuildSource, rebuild_and_analyse
    from rkdet.layers.report import build_report, onnx_label

    src = BuildSource(cfg, platform, None, None)
    rebuilt = rebuild_and_analyse(src, None, lambda m: progress(f"layers: {m}"), log_to=scratch / "toolkit-layers.log",
                                  max_inputs=LAYERS_MAX_INPUTS)
    threshold = cfg.fidelity.min_layer_cosine
    report = build_report(rebuilt.analyses, rebuilt.model.onnx_bytes, threshold, top,
                          source="search", toolkit=rebuilt.toolkit, fingerprint=rebuilt.fingerprint,
                          build_fingerprint=None, timings=rebuilt.timings, output_cosine=rebuilt.output_cosine)
    measured = [x for x in report.layers if x.op != "Input"]
    first = report.first_loss
    shape = loss_shape([x.single.cosine for x in measured],
                       (onnx_label(first), float(first.entire.cosine)) if first and first.entire.cosine is not None
                       else None, list(report.output_cosine.values()), threshold, gate_failed=True)
    return worst_entries(report.worst_single, report.layers), len(measured), shape


def worst_entries(worst: list[Layer], layers: list[Layer]) -> list[dict[str, Any]]:
    """search.json's worst_single: each ranked layer, and the float16 request it becomes (`float16`: the
    layer itself, the nearest ONNX layer the toolkit honours for a layer it added, or None with why)."""
    from rkdet.layers.report import onnx_label  # onnx: imported when the hybrid stage runs
    from rkdet.search import float16_requests

    return [{"layer": x.index, "rknn_name": x.rknn_name, "onnx": onnx_label(x), "single_cosine": x.single.cosine,
             "float16": r.requested, "float16_why": r.why}
            for x, r in zip(worst, float16_requests.requests(worst, layers))]


def hybrid_requests(worst: list[dict[str, Any]], progress: Log) -> list[str]:
    """The layer names the hybrid variants ask float16 for, in rank order; a mapped or dropped request is
    said once on the progress log."""
    names = []
    for w in worst:
        asked = w.get("float16", w["rknn_name"])
        if asked != w["rknn_name"]:
            progress(f"hybrid stage: float16 for {w['rknn_name']} "
                     + (f"asked as {asked}: {w['float16_why']}" if asked else f"not asked: {w['float16_why']}"))
        if asked:
            names.append(asked)
    return names


def search(cfg: RkdetConfig, platform: str, out: Path, space: Space, search_all: bool, progress: Log,
           budget: Budget, toolkit_progress: Log | None = None) -> SearchResult:
    """Try the variants cheapest first within `budget`; stop at the first that passes every gate unless
    `search_all`. `toolkit_progress` receives the toolkit's own progress lines while a variant builds."""
    budget.start()
    count = len(list_images(cfg.quantize.dataset, "quantize.dataset", cfg.quantize.max_images))
    algorithm = cfg.quantize.algorithm
    variants = cheapest_first(quantize_variants(space, algorithm, cfg.quantize.method, count), algorithm, count)
    outcomes: list[Outcome] = []
    untried: list[Untried] = []
    installed: Path | None = None
    worst: list[dict[str, Any]] | None = None
    layers_error = None
    loss: LossShape | None = None
    scratch = Path(tempfile.mkdtemp(prefix=f".search-{cfg.name}-{platform}-", dir=out))

    def skip(variant: SearchVariant, relative: float, reason: str) -> None:
        untried.append(Untried(variant, relative, budget.estimate(relative), reason))

    def run(variant: SearchVariant) -> bool:
        nonlocal installed
        relative = relative_cost(variant, algorithm, count)
        if outcomes and not budget.fits(relative):
            guess = budget.estimate(relative)
            skip(variant, relative, "the budget is spent" if budget.remaining() <= 0 else
                 f"estimated {format_duration(guess or 0)}, {format_duration(budget.remaining())} of the budget left")
            return False
        guess = budget.estimate(relative)
        progress(f"variant {variant.index}: {variant.label()}"
                 + (f" (estimated {format_duration(guess)}, {format_duration(budget.remaining())} left)" if guess else ""))
        started = budget.clock()
        watch = BuildWatch(toolkit_progress, budget.deadline, budget.clock)
        outcome, folder = build_variant(cfg, variant, platform, scratch, progress, watch)
        outcome.build_seconds, outcome.estimated_seconds = budget.clock() - started, guess
        outcome.relative_cost = relative
        if outcome.status != "stopped":
            budget.record(variant, outcome.build_seconds, relative)
        same = next((o for o in outcomes if outcome.status == "fail" and o.status == "fail" and outcome.gates
                     and o.fidelity_signature() == outcome.fidelity_signature()), None)
        if same is not None:  # measured, not assumed: the toolkit ignored the change (e.g. a layer it added)
            outcome.no_effect = same.variant.index
        outcomes.append(outcome)
        progress(f"variant {variant.index}: {outcome.status} in {format_duration(outcome.build_seconds)}"
                 + (f"; no effect: every gate value equals variant {same.variant.index}'s to the last bit"
                    if same is not None else ""))
        if folder is not None and installed is None:
            installed = out / f"{cfg.name}-{platform}"
            install_build(folder, installed)
        elif folder is not None:
            shutil.rmtree(folder.parent, ignore_errors=True)
        return outcome.status == "pass"

    try:
        passed = False
        diagnosis = LAYERS_COST + HYBRID_COST  # what the hybrid stage needs at least: rkdet layers and one build
        for i, variant in enumerate(variants):
            relative = relative_cost(variant, algorithm, count)
            if outcomes and space.hybrid != () and budget.fits(relative) and not budget.fits(relative + diagnosis):
                # one more quantization variant would leave no time to ask `rkdet layers` where the loss is
                for rest in variants[i:]:
                    skip(rest, relative_cost(rest, algorithm, count),
                         "left for the hybrid stage (rkdet layers and a remedy build need the rest of the budget)")
                break
            if run(variant) and not search_all:
                passed = True
                break
        if not passed and space.hybrid != ():
            top = max(space.hybrid) if space.hybrid else MAX_HYBRID_K
            start = len(variants)
            if not budget.fits(LAYERS_COST):
                skip(SearchVariant(start, "hybrid", {"quantize.float_layers": ["(the worst layers by rkdet layers)"]}),
                     LAYERS_COST, "the hybrid stage needs `rkdet layers` first; the budget does not cover it")
            else:
                try:
                    progress("hybrid stage: rkdet layers on the config as given (the worst layers by single error)")
                    worst, measured, loss = _worst_single(cfg, platform, scratch, progress, top)
                except (ConversionError, InputError) as err:
                    layers_error = str(err)
                    measured = 0
                if loss is not None and loss.accumulates and cfg.quantize.force_fp16:
                    stage = []  # the config is already the float build: nothing left to try that it did not use
                elif loss is not None and loss.accumulates:
                    progress(f"{loss.sentence()}: trying a float16 build instead of single-layer hybrids")
                    stage = [float_variant(start, bool(cfg.quantize.float_layers))]
                else:
                    ks = hybrid_ks(space, measured, len(worst or []))
                    stage = hybrid_variants(start, ks, hybrid_requests(worst or [], progress),
                                            list(cfg.quantize.float_layers))
                for variant in stage:
                    if run(variant) and not search_all:
                        break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return SearchResult(platform, space, search_all, outcomes, worst, layers_error, installed,
                        budget.seconds, budget.elapsed(), untried, loss)
