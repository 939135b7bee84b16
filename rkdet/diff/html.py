"""One self-contained, offline HTML report: the verdict and the two named verdicts (repeatable, agrees)
first, a compact inputs × outputs grid, the per-input table folded (<details>), board-state findings and the plots (PNG as data: URIs). No external URL, script or stylesheet is referenced.

A presenter of the findings tree (rkdet.diff.findings): it reads only `Findings`, as the terminal and
report.json do.
"""

from __future__ import annotations

import base64
from pathlib import Path

from rkdet.diff import plots
from rkdet.textsafe import html_text as escape  # controls/bidi made visible, then HTML-escaped
from rkdet.textsafe import plain_value
from rkdet.diff.findings import (
    SCHEMA,
    Decision,
    Findings,
    SetFinding,
    run_ranges,
    shown_path,
)
from rkdet.diff.metrics import NumericStats

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
.verdicts{display:flex;gap:10px;margin:10px 0}.verdicts div{flex:1;padding:8px 12px;border-radius:6px;color:#fff}
table.grid{width:auto}table.grid td{text-align:center;font-family:monospace}
details summary{cursor:pointer;font-weight:600;margin:8px 0}
"""


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _num(x: float | int | None, spec: str = ".3g") -> str:
    return "–" if x is None else escape(format(x, spec))


def _runs_text(runs: list[int], limit: int = 6) -> str:
    ranges = run_ranges(runs)
    parts = [f"{a}" if a == b else f"{a}–{b}" for a, b in ranges[:limit]]
    return ", ".join(parts) + (f", … ({len(ranges) - limit} more)" if len(ranges) > limit else "")


def _source(s: SetFinding, base: Path | None) -> str:
    info = s.run_info
    emu = ' <span class="emulated">EMULATED</span>' if info.emulated else ""
    detail = info.backend_detail or info.backend or s.kind
    return (f"<li><b>{s.role}</b>: <code>{escape(shown_path(s.path, base))}</code> — {escape(str(detail))}{emu}; "
            f"{s.records} inferences, {len(s.inputs)} input(s), {s.runs} run(s); core_mask "
            f"{escape(plain_value(info.core_mask))}, affinity {escape(plain_value(info.setting('affinity')))}</li>")


def _stat_cells(st: NumericStats | None) -> str:
    if st is None:
        return '<td class="num">0</td><td class="num">0</td><td class="num">1</td><td class="num">0</td><td>–</td><td>–</td>'
    return (f'<td class="num">{st.max_ulp}</td><td class="num">{_num(st.max_abs)}</td>'
            f'<td class="num">{_num(st.cosine, ".6f")}</td><td class="num">{_num(st.rel_l2)}</td>'
            f'<td class="num">{_num(st.kl)}</td><td>{escape(st.direction)}</td>')


def _decision(d: Decision) -> str:
    return d.html()  # the task's line (rkdet/decode/tasks/)


_STATUS = {"same": '<span class="ok">same</span>', "within": '<span class="ok">within</span>',
           "OUT": '<span class="bad">OUT</span>'}


def _table(f: Findings) -> str:
    head = ("<tr><th>set</th><th>vs</th><th>input</th><th>output (role)</th><th>distinct / runs</th><th>runs "
            "differing</th><th>max ULP</th><th>max abs</th><th>cosine</th><th>rel L2</th><th>KL</th><th>direction</th>"
            "<th>decision</th><th>status</th></tr>")
    rows = [head]
    for section in f.sections:
        for inp in section.inputs:
            decision = "<br>".join(dict.fromkeys(_decision(d) for d in inp.decisions)) or "–"
            for o in inp.outputs:
                rows.append(f"<tr><td>{section.set}</td><td>{section.against}</td><td>{escape(inp.name)}</td>"
                            f"<td>{escape(o.name)} ({escape(o.role)})</td><td>{o.distinct} / {inp.runs}</td>"
                            f"<td>{escape(_runs_text(o.differing_runs)) or '–'}</td>{_stat_cells(o.worst)}"
                            f"<td>{decision}</td><td>{_STATUS[o.status]}</td></tr>")
                for sl in o.slices:
                    rows.append(f"<tr class='muted'><td></td><td></td><td></td><td>↳ {escape(o.name)}[{escape(sl.name)}]"
                                f"</td><td></td><td></td>{_stat_cells(sl.stats)}<td></td><td>"
                                f"{'<span class=ok>within</span>' if sl.stats.within else '<span class=bad>OUT</span>'}"
                                f"</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


_WHAT = {"first difference vs B": "first difference vs B", "first divergence": "first run-to-run divergence"}


def _findings(f: Findings) -> str:
    items = []
    for loc in f.locations:
        items.append(f"<li><b>{loc.set} {_WHAT[loc.what]}</b>: run {loc.run}, input <code>{escape(loc.input)}</code>, "
                     f"output <code>{escape(loc.output)}</code>, element {loc.index} "
                     f"{escape(loc.position)}: {escape(repr(loc.reference))} → "
                     f"{escape(repr(loc.candidate))} (max {loc.max_ulp} ULP)</li>")
    for role, text in f.board_state:
        items.append(f"<li><b>{role} board state</b>: {escape(text)}</li>")
    for section in f.sections:
        for req in section.requirements:
            items.append(f"<li><b>minimum tolerance, {section.set} vs {section.against}</b>, output "
                         f"<code>{escape(req.output)}</code>: {escape(req.line())}</li>")
    return "<ul>" + "".join(items) + "</ul>" if items else "<p class='muted'>No divergence to locate.</p>"


def _verdicts(f: Findings) -> str:
    """The two named verdicts, side by side, each with its measured distance."""
    boxes = []
    for v in (f.repeatable, f.agrees):
        if v is not None:
            boxes.append(f'<div class="{"same" if v.ok else "different"}">{escape(v.line())}</div>')
    return f'<div class="verdicts">{"".join(boxes)}</div>'


def _grid(tree: Findings) -> str:
    """Inputs × outputs of set A: repeatable (● all runs bit-identical, ✗ they vary) and, against the
    reference, = bit-identical, ≈ within tolerance, ✗ outside it."""
    failed = {(f.input, f.output, f.against) for f in tree.failures if f.set == "A"}
    outputs = list(dict.fromkeys(o for ia in tree.a.inputs for o in ia.outputs))
    head = "<tr><th>input</th>" + "".join(f"<th>{escape(o)}</th>" for o in outputs) + "</tr>"
    rows = [head]
    for ia in tree.a.inputs:
        cells = []
        for name in outputs:
            oa = ia.outputs.get(name)
            if oa is None:
                cells.append("<td>–</td>")
                continue
            rep = "●" if len(oa.variants) == 1 else '<span class="bad">✗</span>'
            mark = ""
            if tree.b is not None:
                differs = any(v.vs_reference is not None for v in oa.variants.values())
                mark = (" " + ('<span class="bad">✗</span>' if (ia.name, name, "B") in failed else
                               "≈" if differs else "="))
            cells.append(f"<td>{rep}{mark}</td>")
        rows.append(f"<tr><td>{escape(ia.name)}</td>{''.join(cells)}</tr>")
    legend = ("● repeatable (all runs bit-identical), ✗ runs differ" +
              ("; vs the reference: = bit-identical, ≈ within tolerance, ✗ outside" if tree.b is not None else ""))
    return f'<table class="grid">{"".join(rows)}</table><p class="muted">{legend}</p>'


def render_html(tree: Findings, base: Path | None = None) -> str:
    """The whole report as one HTML string (result-set paths relative to `base`, the report's folder)."""
    cls = "same" if tree.exit_code == 0 else "different"
    latency = {s.role: {ia.name: ia.latencies for ia in s.inputs} for s in tree.sets}
    figs = [_img(plots.latency_plot(latency), "latency over runs: median, IQR and min-max per run; a box per input"),
            _img(plots.board_plot(tree.a.snapshots, tree.a.runs), "temperature and NPU frequency over runs"),
            _img(plots.histogram_plot(tree.abs_hist), "histogram of absolute differences")]
    if tree.overlay is not None:
        o = tree.overlay
        figs.append(f"<h3>Detections on input <code>{escape(o['input'])}</code> (set {o['set']} run {o['run']} vs "
                    f"{escape(o['reference_label'])})</h3>" + _img(plots.detection_plot(
                        o.get("image"), o["reference"], o["candidate"], tree.layout.input_size,
                        f"reference ({o['reference_label']})", f"set {o['set']} run {o['run']}"), "detections"))
    notes = "".join(f"<li>{escape(n)}</li>" for n in tree.notes)
    sources = "".join(_source(s, base) for s in tree.sets)
    bounds = tree.bounds
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rkdet diff: {escape(tree.verdict[:80])}</title>
<style>{_CSS}</style></head><body>
<div class="verdict {cls}">{escape(tree.verdict)}</div>
{_verdicts(tree)}
<h2>Inputs × outputs</h2>{_grid(tree)}
<p>Exit code <b>{tree.exit_code}</b> · tolerance <code>{escape(tree.tolerance)}</code>
({escape(", ".join(f"{k}={plain_value(v)}" for k, v in bounds.to_json().items()))}) · mode {tree.mode} · report schema {SCHEMA}</p>
<h2>Compared</h2><ul>{sources}</ul>
<ul class="muted">{notes}</ul>
<details><summary>Per input and output: every record's distance ({sum(len(ia.outputs) for ia in tree.a.inputs)} rows for set A)</summary>{_table(tree)}</details>
<h2>Where and why</h2>{_findings(tree)}
<h2>Plots</h2>{"".join(figs)}
</body></html>
"""
