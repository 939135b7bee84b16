"""Machine-readable report (schema ``rkdet.diff/3``, documented in docs/DIFF_REPORT.md) and
`write_reports`, the one call deploy makes to leave report.json and report.html beside a result set.

`report_json` is a presenter like the terminal and the HTML: it takes only the findings tree
(rkdet.diff.findings), never the Comparison; the Comparison-taking calls below build the tree once.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from rkdet.diff.compare import Comparison, Failure, OutputVariant
from rkdet.diff.findings import SCHEMA, Findings, SetFinding, findings, report_base, run_ranges, shown_path
from rkdet.diff.metrics import HIST_EDGES, NumericStats
from rkdet.errors import InputError
from rkdet.records.io import write_atomic

def _stats(s: NumericStats | None) -> dict[str, Any] | None:
    return None if s is None else s.to_json()


def _variant(v: OutputVariant) -> dict[str, Any]:
    return {"hash": v.hash, "run_count": len(v.runs), "runs": run_ranges(v.runs),
            "vs_first": _stats(v.vs_first), "vs_reference": _stats(v.vs_reference),
            "slices_vs_first": {k: s.to_json() for k, s in v.slices_vs_first.items()},
            "slices_vs_reference": {k: s.to_json() for k, s in v.slices_vs_reference.items()}}


def _latency(values: list[tuple[int, float]]) -> dict[str, float] | None:
    if not values:
        return None
    ms = sorted(v for _, v in values)
    return {"min": ms[0], "median": ms[len(ms) // 2], "max": ms[-1]}


def _set(s: SetFinding | None, base: Path | None) -> dict[str, Any] | None:
    if s is None:
        return None
    info = s.run_info
    return {
        "path": shown_path(s.path, base), "kind": s.kind, "note": s.note,
        "backend": info.backend, "backend_detail": info.backend_detail,
        "emulated": info.emulated, "core_mask": info.core_mask, "affinity": info.setting("affinity"),
        "status": info.status, "records": s.records, "runs": s.runs,
        "first_divergence": s.first_divergence, "first_difference": s.first_difference,
        "correlation": s.correlation,
        "inputs": [{
            "name": ia.name, "runs": ia.runs, "distinct": len(ia.groups),
            "latency_ms": _latency(ia.latencies), "reference_decision": ia.reference_decision,
            "groups": [{"run_count": len(g.runs), "runs": run_ranges(g.runs),
                        "decision_vs_first": g.decision_vs_first, "decision_vs_reference": g.decision_vs_reference}
                       for g in ia.groups.values()],
            "outputs": [{"name": oa.name, "shape": list(oa.shape), "dtype": oa.dtype, "role": oa.role,
                         "first_hash": oa.first_hash, "reference_hash": oa.reference_hash,
                         "distinct": len(oa.variants), "variants": [_variant(v) for v in oa.variants.values()]}
                        for oa in ia.outputs.values()],
        } for ia in s.inputs],
    }


def _failure(f: Failure) -> dict[str, Any]:
    return {"set": f.set, "against": f.against, "input": f.input, "output": f.output, "first_run": f.first_run,
            "run_count": len(f.runs), "runs": run_ranges(f.runs), "reasons": f.stats.reasons,
            "slice_reasons": f.slice_reasons, "stats": f.stats.to_json()}


def report_json(tree: Findings, base: Path | None = None) -> dict[str, Any]:
    """The findings as plain JSON types with stable field names (paths relative to `base`): report.json."""
    first = tree.first_failure
    bounds = tree.bounds
    return {
        "schema": SCHEMA,
        "verdict": tree.verdict,
        "exit_code": tree.exit_code,
        "same": tree.exit_code == 0,
        "repeatable": tree.repeatable.to_json(),
        "agrees": tree.agrees.to_json() if tree.agrees is not None else None,
        "mode": tree.mode,
        "tolerance": {**bounds.to_json(), "bitwise": bounds.bitwise, "description": tree.tolerance},
        "layout": tree.layout.to_json(),
        "notes": tree.notes,
        "build_failed_gates": tree.caveat,  # null, or: the reference build failed its gates at convert
        "first_failure": _failure(first) if first else None,
        "failures": [_failure(f) for f in tree.failures],
        "abs_diff_histogram": {"edges": list(HIST_EDGES), "counts": tree.abs_hist,
                               "counted": "differing elements, once per distinct output"},
        "sets": {"A": _set(tree.a, base), "B": _set(tree.b, base)},
        "minimum_tolerance": [{"set": sec.set, "against": sec.against, **req.to_json()}
                              for sec in tree.sections for req in sec.requirements],
    }


def to_json(c: Comparison, base: Path | None = None) -> dict[str, Any]:
    """`report_json` of a comparison's findings."""
    return report_json(findings(c), base)


def write_report_file(path: Path, data: str | bytes) -> Path:
    """Write one report with rkdet's one atomic writer (rkdet.records.io.write_atomic): a regular file is
    replaced atomically; /dev/null, /dev/stdout and FIFOs are written through; a symlink's target is
    written; a directory is exit 2 naming the path."""
    path = Path(path)
    try:
        if not os.path.lexists(path):
            path.parent.mkdir(parents=True, exist_ok=True)
        return Path(write_atomic(str(path), data))
    except OSError as err:
        raise InputError(f"{path}: cannot write the report ({err.strerror or err}); give a file path, "
                         f"/dev/stdout or a FIFO") from None


def _finite(value: Any) -> Any:
    """JSON has no inf/NaN: non-finite numbers become null (docs/DIFF_REPORT.md says what that means)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def report_text(tree: Findings, base: Path | None = None) -> str:
    """report.json's text: sorted keys, two-space indent, non-finite numbers as null."""
    return json.dumps(_finite(report_json(tree, base)), indent=2, sort_keys=True, allow_nan=False,
                      default=_json_default) + "\n"


def json_text(c: Comparison, base: Path | None = None) -> str:
    return report_text(findings(c), base)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def write_json(c: Comparison | Findings, path: Path) -> Path:
    tree = c if isinstance(c, Findings) else findings(c)
    return write_report_file(path, report_text(tree, report_base(path)))


def write_html(c: Comparison | Findings, path: Path) -> Path:
    from rkdet.diff.html import render_html  # matplotlib only when HTML is asked for (html never imports report)

    tree = c if isinstance(c, Findings) else findings(c)
    return write_report_file(path, render_html(tree, report_base(path)))


def write_reports(comparison: Comparison, out_dir: str | Path) -> dict[str, Path]:
    """Write report.json and report.html into `out_dir` from one findings tree; returns {"json": path, "html": path}."""
    out = Path(out_dir)
    tree = findings(comparison)
    return {"json": write_json(tree, out / "report.json"), "html": write_html(tree, out / "report.html")}
