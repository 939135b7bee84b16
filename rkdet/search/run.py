"""Build each variant of the search space in its fixed order; record options, fidelity and fingerprint.

Every variant is a real `rkdet convert` of a validated config (the user's plus the variant's keys) into a
scratch folder beside the output; a failed one is kept just long enough to read its fidelity.json and
manifest.json (the fingerprint), then removed. The first variant that passes every gate is installed as the
build `<out>/<name>-<platform>`, exactly where `rkdet convert` would put it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rkdet.config import RkdetConfig
from rkdet.convert.images import list_images
from rkdet.convert.pipeline import convert
from rkdet.errors import ConversionError, InputError
from rkdet.records.io import identifier, read_json_object
from rkdet.search.space import MAX_HYBRID_K, Space, Variant, hybrid_ks, hybrid_variants, quantize_variants

Progress = Callable[[str], None]
SCHEMA = "rkdet.search/1"
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

    variant: Variant
    status: str  # "pass" | "fail" (a gate) | "error" (the toolkit or a check failed)
    options: dict[str, Any]
    message: str | None = None
    fingerprint: str | None = None
    fidelity_line: str | None = None
    gates: list[dict[str, Any]] = field(default_factory=list)
    slices: dict[str, Any] = field(default_factory=dict)
    closest: Closest | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.variant.index, "stage": self.variant.stage, "changes": self.variant.changes,
                "options": self.options, "status": self.status, "message": self.message,
                "fingerprint": self.fingerprint, "fidelity_line": self.fidelity_line, "gates": self.gates,
                "slices": self.slices, "float_layers": self.options["float_layers"],
                "closest": None if self.closest is None else asdict(self.closest)}


@dataclass
class SearchResult:
    platform: str
    space: Space
    search_all: bool
    outcomes: list[Outcome]
    worst_single: list[dict[str, Any]] | None  # from `rkdet layers` (None: the hybrid stage was not reached)
    layers_error: str | None
    build: Path | None  # the installed build of the first passing variant

    @property
    def passed(self) -> Outcome | None:
        return next((o for o in self.outcomes if o.status == "pass"), None)

    def as_dict(self, searched_config: str | None) -> dict[str, Any]:
        first = self.passed
        return {"schema": SCHEMA, "platform": self.platform, "space": self.space.as_dict(),
                "search_all": self.search_all, "passed": None if first is None else first.variant.index,
                "fingerprint": None if first is None else first.fingerprint, "searched_config": searched_config,
                "worst_single": self.worst_single, "layers_error": self.layers_error,
                "variants": [o.as_dict() for o in self.outcomes]}


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
            "calibration_images": calibration_images, "float_layers": list(q.float_layers)}


def _closest(gates: list[dict[str, Any]]) -> Closest | None:
    best = None
    for g in gates:
        if not g.get("binding") or g.get("value") is None or g.get("threshold") is None:
            continue
        margin = (g["threshold"] - g["value"]) if g["gate"] == "saturation" else (g["value"] - g["threshold"])
        if best is None or margin < best.margin:
            best = Closest(g["gate"], g["subject"], g["value"], g["threshold"], margin)
    return best


def _read(folder: Path) -> tuple[str | None, dict[str, Any] | None]:
    fp, fid = None, None
    try:
        fp = identifier(read_json_object(folder / "manifest.json").get("fingerprint"), folder / "manifest.json",
                        "fingerprint")
    except (OSError, InputError):
        pass
    try:
        fid = read_json_object(folder / "fidelity.json")
    except (OSError, InputError):
        pass
    return fp, fid


def _fidelity_line(fid: dict[str, Any], platform: str) -> str | None:
    """The convert's one-line fidelity summary, from a kept build's fidelity.json."""
    from rkdet.convert.fidelity import FidelityReport, GateResult, summary_line

    try:
        return summary_line(FidelityReport(fid.get("layout", {}), [GateResult(**g) for g in fid.get("gates", [])]),
                            platform)
    except (TypeError, ValueError):
        return None


def build_variant(cfg: RkdetConfig, variant: Variant, platform: str, scratch: Path, progress: Progress) -> tuple[Outcome, Path | None]:
    """Convert one variant into `scratch/<index>/`; returns its outcome and, when it passed, its build folder."""
    vcfg = apply(cfg, variant.changes)
    count = len(list_images(vcfg.quantize.dataset, "quantize.dataset", vcfg.quantize.max_images))
    outcome = Outcome(variant, "error", _options(vcfg, count))
    out = scratch / f"{variant.index:03d}"
    try:
        result = convert(vcfg, out, [platform], keep_failed=True,
                         progress=lambda m: progress(f"variant {variant.index}: {m}"))[0]
    except (ConversionError, InputError) as err:  # a gate (FidelityGateError), the toolkit, a refused layer name
        if isinstance(err, InputError) and not variant.changes:
            raise  # the config itself is wrong (exit 2): every variant would say so
        outcome.message = str(err)
        fp, fid = _read(out / f"{vcfg.name}-{platform}.failed")
        if fid is not None and any(g.get("binding") and g.get("passed") is False for g in fid.get("gates", [])):
            outcome.status = "fail"
        outcome.fingerprint = fp
        if fid is not None:
            outcome.gates, outcome.slices = fid.get("gates", []), fid.get("slices", {})
            outcome.fidelity_line = _fidelity_line(fid, platform)
        outcome.closest = _closest(outcome.gates)
        shutil.rmtree(out, ignore_errors=True)
        return outcome, None
    folder = result.folder
    outcome.status, outcome.fidelity_line = "pass", result.fidelity_line
    fp, fid = _read(folder)
    outcome.fingerprint = fp or result.fingerprint
    if fid is not None:
        outcome.gates, outcome.slices = fid.get("gates", []), fid.get("slices", {})
    outcome.closest = _closest(outcome.gates)
    return outcome, folder


def _worst_single(cfg: RkdetConfig, platform: str, scratch: Path, progress: Progress, top: int
                  ) -> tuple[list[dict[str, Any]], int]:
    """`rkdet layers` on the config as given: its worst layers by single error, and how many layers it measured."""
    from rkdet.layers.rebuild import Source, rebuild_and_analyse
    from rkdet.layers.report import build_report, onnx_label

    src = Source(cfg, platform, None, None)
    rebuilt = rebuild_and_analyse(src, None, lambda m: progress(f"layers: {m}"), log_to=scratch / "toolkit-layers.log",
                                  max_inputs=LAYERS_MAX_INPUTS)
    report = build_report(rebuilt.analyses, rebuilt.model.onnx_bytes, cfg.fidelity.min_layer_cosine, top,
                          source="search", toolkit=rebuilt.toolkit, fingerprint=rebuilt.fingerprint,
                          build_fingerprint=None, timings=rebuilt.timings, output_cosine=rebuilt.output_cosine)
    measured = [x for x in report.layers if x.op != "Input"]
    return ([{"layer": x.index, "rknn_name": x.rknn_name, "onnx": onnx_label(x), "single_cosine": x.single.cosine}
             for x in report.worst_single], len(measured))


def _install(folder: Path, final: Path) -> None:
    if final.exists():
        trash = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.rename(final, trash)
        os.rename(folder, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(folder, final)


def search(cfg: RkdetConfig, platform: str, out: Path, space: Space, search_all: bool, progress: Progress
           ) -> SearchResult:
    """Try the variants in order; stop at the first that passes every gate unless `search_all`."""
    count = len(list_images(cfg.quantize.dataset, "quantize.dataset", cfg.quantize.max_images))
    variants = quantize_variants(space, cfg.quantize.algorithm, cfg.quantize.method, count)
    outcomes: list[Outcome] = []
    installed: Path | None = None
    worst: list[dict[str, Any]] | None = None
    layers_error = None
    scratch = Path(tempfile.mkdtemp(prefix=f".search-{cfg.name}-{platform}-", dir=out))
    try:
        def run(variant: Variant) -> bool:
            nonlocal installed
            progress(f"variant {variant.index}: {variant.label()}")
            outcome, folder = build_variant(cfg, variant, platform, scratch, progress)
            outcomes.append(outcome)
            progress(f"variant {variant.index}: {outcome.status}")
            if folder is not None and installed is None:
                installed = out / f"{cfg.name}-{platform}"
                _install(folder, installed)
            elif folder is not None:
                shutil.rmtree(folder.parent, ignore_errors=True)
            return outcome.status == "pass"

        for variant in variants:
            if run(variant) and not search_all:
                break
        else:
            if space.hybrid != ():
                top = max(space.hybrid) if space.hybrid else MAX_HYBRID_K
                try:
                    progress("hybrid stage: rkdet layers on the config as given (the worst layers by single error)")
                    worst, measured = _worst_single(cfg, platform, scratch, progress, top)
                except (ConversionError, InputError) as err:
                    layers_error = str(err)
                    measured = 0
                ks = hybrid_ks(space, measured, len(worst or []))
                names = [w["rknn_name"] for w in worst or []]
                for variant in hybrid_variants(len(variants), ks, names, list(cfg.quantize.float_layers)):
                    if run(variant) and not search_all:
                        break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return SearchResult(platform, space, search_all, outcomes, worst, layers_error, installed)
