"""One self-contained, offline HTML report: verdict first, then the per-input table, board-state
findings and the plots (PNG as data: URIs). No external URL, script or stylesheet is referenced.
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from rkdet.diff import plots
from rkdet.diff.compare import Comparison, SetAnalysis
from rkdet.diff.metrics import NumericStats
from rkdet.diff.report import SCHEMA, run_ranges

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#222;background:#fafafa}
.verdict{padding:14px 18px;border-radius:6px;font-size:17px;font-weight:600;color:#fff}
.same{background:#1a7f37}.different{background:#c62828}
table{border-collapse:collapse;width:100%;margin:8px 0 18px;background:#fff}
th,td{border:1px solid #ddd;padding:4px 7px;text-align:left;font-size:12.5px;vertical-align:top}
th{background:#eef2f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37;font-weight:600}.bad{color:#c62828;font-weight:600}.muted{color:#666}
img{max-width:100%;border:1px solid #ddd;background:#fff;margin:6px 0}
code{background:#eef2f7;padding:1px 4px;border-radius:3px}
.emulated{background:#fff3cd;border:1px solid #e0c060;padding:2px 6px;border-radius:3px}
"""


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _num(x: float | int | None, spec: str = ".3g") -> str:
    return "–" if x is None else escape(format(x, spec))


def _runs_text(runs: list[int], limit: int = 6) -> str:
    ranges = run_ranges(runs)
    parts = [f"{a}" if a == b else f"{a}–{b}" for a, b in ranges[:limit]]
    return ", ".join(parts) + (f", … ({len(ranges) - limit} more)" if len(ranges) > limit else "")


def _source(s: SetAnalysis) -> str:
    info = s.source.run_info
    emu = ' <span class="emulated">EMULATED</span>' if info.get("emulated") else ""
    detail = info.get("backend_detail") or info.get("backend") or s.source.kind
    return (f"<li><b>{s.role}</b>: <code>{escape(str(s.source.path))}</code> — {escape(str(detail))}{emu}; "
            f"{s.records} inferences, {len(s.inputs)} input(s), {s.runs} run(s); core_mask "
            f"{escape(str(info.get('core_mask')))}, affinity {escape(str(info.get('affinity')))}</li>")


def _stat_cells(st: NumericStats | None) -> str:
    if st is None:
        return '<td class="num">0</td><td class="num">0</td><td class="num">1</td><td class="num">0</td><td>–</td><td>–</td>'
    return (f'<td class="num">{st.max_ulp}</td><td class="num">{_num(st.max_abs)}</td>'
            f'<td class="num">{_num(st.cosine, ".6f")}</td><td class="num">{_num(st.rel_l2)}</td>'
            f'<td class="num">{_num(st.kl)}</td><td>{escape(st.direction)}</td>')


def _decision(d: dict[str, Any] | None) -> str:
    if not d:
        return "–"
    if d["kind"] == "detection":
        if not d["changed"] and not d["matched"]:
            return "no boxes either side"
        if not d["changed"]:
            return f"same {d['matched']} boxes, min IoU {_num(d['min_iou'], '.3f')}, |Δscore| ≤ {_num(d['max_abs_score_delta'])}"
        return (f'<span class="bad">{len(d["class_flips"])} class flip(s), {len(d["missing"])} missing, '
                f'{len(d["extra"])} extra</span> of {d["reference_count"]}')
    if d["top1_flip"]:
        return f'<span class="bad">top-1 flip {d["reference_top1"]} → {d["candidate_top1"]}</span>'
    return "top-k changed" if d["topk_changed"] else "same top-k"


def _table(c: Comparison) -> str:
    head = ("<tr><th>set</th><th>vs</th><th>input</th><th>output (role)</th><th>distinct / runs</th><th>runs "
            "differing</th><th>max ULP</th><th>max abs</th><th>cosine</th><th>rel L2</th><th>KL</th><th>direction</th>"
            "<th>decision</th><th>status</th></tr>")
    rows = [head]
    plans: list[tuple[SetAnalysis, str, str]] = []
    if c.b is not None:
        plans.append((c.a, "vs_reference", "B"))
    plans += [(s, "vs_first", "run 0") for s in (c.a, c.b) if s is not None and (s.runs > 1 or c.b is None)]
    for s, attr, against in plans:
        dec_attr = "decision_vs_reference" if attr == "vs_reference" else "decision_vs_first"
        for ia in s.inputs.values():
            decisions = [_decision(getattr(g, dec_attr)) for g in ia.groups.values() if getattr(g, dec_attr)]
            decision = "<br>".join(dict.fromkeys(decisions)) or "–"
            for oa in ia.outputs.values():
                measured = [v for v in oa.variants.values() if getattr(v, attr) is not None]
                worst = max(measured, key=lambda v: (not getattr(v, attr).within, getattr(v, attr).max_ulp), default=None)
                st = getattr(worst, attr) if worst else None
                differing = sorted(r for v in measured for r in v.runs)
                ok = st is None or st.within
                status = '<span class="ok">same</span>' if st is None else (
                    '<span class="ok">within</span>' if ok else '<span class="bad">OUT</span>')
                rows.append(f"<tr><td>{s.role}</td><td>{against}</td><td>{escape(ia.name)}</td><td>{escape(oa.name)} "
                            f"({escape(oa.role)})</td><td>{len(oa.variants)} / {ia.runs}</td>"
                            f"<td>{escape(_runs_text(differing)) or '–'}</td>{_stat_cells(st)}<td>{decision}</td>"
                            f"<td>{status}</td></tr>")
                if worst is not None:
                    for name, sl in getattr(worst, "slices_" + attr).items():
                        rows.append(f"<tr class='muted'><td></td><td></td><td></td><td>↳ {escape(oa.name)}[{escape(name)}]"
                                    f"</td><td></td><td></td>{_stat_cells(sl)}<td></td><td>"
                                    f"{'<span class=ok>within</span>' if sl.within else '<span class=bad>OUT</span>'}"
                                    f"</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def _findings(c: Comparison) -> str:
    items = []
    for s in (c.a, c.b):
        if s is None:
            continue
        for point, what in ((s.first_difference, "first difference vs B"), (s.first_divergence, "first run-to-run divergence")):
            if point:
                items.append(f"<li><b>{s.role} {what}</b>: run {point['run']}, input <code>{escape(point['input'])}</code>, "
                             f"output <code>{escape(point['output'])}</code>, element {point['index']} "
                             f"{escape(str(point['position']))}: {escape(repr(point['reference']))} → "
                             f"{escape(repr(point['candidate']))} (max {point['max_ulp']} ULP)</li>")
        for f in s.correlation:
            items.append(f"<li><b>{s.role} board state</b>: {escape(f)}</li>")
    return "<ul>" + "".join(items) + "</ul>" if items else "<p class='muted'>No divergence to locate.</p>"


def render_html(c: Comparison) -> str:
    """The whole report as one HTML string."""
    cls = "same" if c.exit_code == 0 else "different"
    latency = {f"{s.role} {ia.name}": ia.latencies for s in (c.a, c.b) if s is not None for ia in s.inputs.values()}
    figs = [_img(plots.latency_plot(latency), "latency over runs"),
            _img(plots.board_plot(c.a.snapshots, c.a.runs), "temperature and NPU frequency over runs"),
            _img(plots.histogram_plot(c.abs_hist), "histogram of absolute differences")]
    if c.overlay is not None:
        o = c.overlay
        figs.append(f"<h3>Detections on input <code>{escape(o['input'])}</code> (set {o['set']} run {o['run']} vs "
                    f"{escape(o['reference_label'])})</h3>" + _img(plots.detection_plot(
                        o.get("image"), o["reference"], o["candidate"], c.layout.input_size,
                        f"reference ({o['reference_label']})", f"set {o['set']} run {o['run']}"), "detections"))
    notes = "".join(f"<li>{escape(n)}</li>" for n in c.notes)
    sources = "".join(_source(s) for s in (c.a, c.b) if s is not None)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rkdet diff: {escape(c.verdict[:80])}</title>
<style>{_CSS}</style></head><body>
<div class="verdict {cls}">{escape(c.verdict)}</div>
<p>Exit code <b>{c.exit_code}</b> · tolerance <code>{escape(c.tolerance.describe())}</code>
({escape(", ".join(f"{k}={v}" for k, v in c.tolerance.as_dict().items()))}) · mode {c.mode} · report schema {SCHEMA}</p>
<h2>Compared</h2><ul>{sources}</ul>
<ul class="muted">{notes}</ul>
<h2>Per input</h2>{_table(c)}
<h2>Where and why</h2>{_findings(c)}
<h2>Plots</h2>{"".join(figs)}
</body></html>
"""
