"""`rkdet audit report`: the verification and the control charts of one pulled log, as one HTML file.

The charts (inline SVG, no script, nothing fetched) read the log's records: canary runs (0 same,
1 different), shadow periods (P99 absolute error of output 0, disagreement share), and latency (mean
per window of inference records), each with its center line, 1/2/3-sigma limits and the Western
Electric signals (rkdet.audit.spc). The board records no temperature in the audit log yet, so none is
charted (docs/AUDIT.md).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from rkdet.audit.chainlog import AuditFile
from rkdet.audit.spc import Limits, Signal, limits, western_electric
from rkdet.audit.verify import Verification

LATENCY_WINDOW = 100


@dataclass(frozen=True)
class Series:
    title: str
    unit: str
    times: list[float]
    values: list[float]

    @property
    def limits(self) -> Limits:
        return limits(self.values)

    @property
    def signals(self) -> list[Signal]:
        return western_electric(self.values, self.limits)


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def series_of(files: list[AuditFile]) -> list[Series]:
    canary_t, canary_v, p99_t, p99_v, dis_v, lat_t, lat_v = [], [], [], [], [], [], []
    window: list[float] = []
    for af in files:
        for line in af.lines:
            rec = line.record or {}
            t = _num(rec.get("t"))
            if t is None:
                continue
            kind = rec.get("kind")
            if kind == "canary":
                canary_t.append(t)
                canary_v.append(0.0 if rec.get("ok") is True else 1.0)
            elif kind == "shadow":
                errors = rec.get("errors")
                first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
                p99, samples, dis = _num(first.get("p99")), _num(rec.get("samples")), _num(rec.get("disagreements"))
                if p99 is not None and samples:
                    p99_t.append(t)
                    p99_v.append(p99)
                    dis_v.append((dis or 0.0) / samples)
            elif kind == "inference":
                us = _num(rec.get("latency_us"))
                if us is not None:
                    window.append(us)
                    if len(window) == LATENCY_WINDOW:
                        lat_t.append(t)
                        lat_v.append(sum(window) / len(window))
                        window = []
    return [Series("Canary runs differing from the baseline", "0 same / 1 different", canary_t, canary_v),
            Series("Shadow P99 absolute error, output 0", "abs error", p99_t, p99_v),
            Series("Shadow disagreement share", "share of samples", p99_t, dis_v),
            Series(f"Latency, mean of {LATENCY_WINDOW} inferences", "µs", lat_t, lat_v)]


def _chart(s: Series) -> str:
    w, h, pad = 720, 200, 36
    if not s.values:
        return f"<h2>{html.escape(s.title)}</h2><p>No points in this log.</p>"
    lim = s.limits
    lines = [lim.center + k * lim.sigma for k in (-3, -2, -1, 0, 1, 2, 3)]
    lo, hi = min(s.values + lines), max(s.values + lines)
    span = (hi - lo) or 1.0
    n = len(s.values)

    def x(i: int) -> float:
        return pad + (w - 2 * pad) * (i / (n - 1) if n > 1 else 0.5)

    def y(v: float) -> float:
        return h - pad - (h - 2 * pad) * (v - lo) / span

    flagged = {sig.index for sig in s.signals}
    parts = [f'<svg width="{w}" height="{h}" role="img" aria-label="{html.escape(s.title)}">']
    for k, v in zip((-3, -2, -1, 0, 1, 2, 3), lines):
        style = "stroke:#c00" if abs(k) == 3 else ("stroke:#333" if k == 0 else "stroke:#bbb;stroke-dasharray:3")
        parts.append(f'<line x1="{pad}" x2="{w - pad}" y1="{y(v):.1f}" y2="{y(v):.1f}" style="{style}"/>')
    pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(s.values))
    parts.append(f'<polyline points="{pts}" style="fill:none;stroke:#36c"/>')
    for i, v in enumerate(s.values):
        color = "#c00" if i in flagged else "#36c"
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{color}"/>')
    parts.append("</svg>")
    rows = "".join(f"<li>point {sig.index + 1}: rule {sig.rule}, {html.escape(sig.text)}</li>" for sig in s.signals)
    return (f"<h2>{html.escape(s.title)}</h2><p>{n} points ({html.escape(s.unit)}); center {lim.center:.6g}, "
            f"sigma {lim.sigma:.6g} (moving range)</p>" + "".join(parts) +
            (f"<ul class=signals>{rows}</ul>" if rows else "<p>No Western Electric signal.</p>"))


def render_report(folder_name: str, verification: Verification, files: list[AuditFile]) -> str:
    findings = "".join(f"<tr><td>{html.escape(f.kind)}</td><td>{html.escape(f.where)}</td>"
                       f"<td>{html.escape(f.message)}</td></tr>" for f in verification.findings)
    verdict = "chain broken or a check failed" if verification.failed else "chain intact, every check passed"
    counts = ", ".join(f"{html.escape(k)}: {v}" for k, v in sorted(verification.counts.items()))
    charts = "".join(_chart(s) for s in series_of(files))
    return ("<!doctype html><html><head><meta charset=utf-8><title>rkdet audit report</title></head><body>"
            f"<h1>Audit log {html.escape(folder_name)}</h1><p><b>{verdict}</b>; {verification.records} records "
            f"(seq {verification.first_seq}..{verification.last_seq}); {counts}</p>"
            f"<p>Anchor for the next pull: <code>{html.escape(str(verification.last_hash))}</code></p>"
            f"<table border=1><tr><th>finding</th><th>where</th><th>what</th></tr>{findings}</table>"
            f"{charts}</body></html>\n")
