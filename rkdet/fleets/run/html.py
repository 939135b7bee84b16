"""`report.html` of a fleet run: one self-contained, offline page (the diff report's styles; no
script, no external URL): the verdict, a boards × cells grid coloured by determinism class, each
board's state (SoC, kernel, librknnrt, clocks at run start, hottest temperatures), the classes, the
first difference of each pair of classes, and drift from the history. Every board-sourced string
is HTML-escaped; run folders are relative links.
"""

from __future__ import annotations

from urllib.parse import quote

from rkdet.diff.html import _CSS
from rkdet.textsafe import html_text as escape  # controls/bidi made visible, then HTML-escaped
from rkdet.fleets.run.records import COMPLETE, SKIPPED, BoardResult, CellResult, FleetResult

# class colours: the majority green, then distinct hues
_PALETTE = ("#1a7f37", "#c62828", "#1565c0", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#5d4037")
_CSS_FLEET = """
td.cls{color:#fff;font-weight:600;text-align:center}td.skip{color:#666;text-align:center;background:#eee}
td.err{background:#fff0f0;color:#c62828;text-align:center}a.run{color:inherit}
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _colour(fleet: FleetResult, klass: str | None) -> str:
    names = [k.name for k in fleet.classes]
    return _PALETTE[names.index(klass) % len(_PALETTE)] if klass in names else "#999"


def _cell(fleet: FleetResult, c: CellResult) -> str:
    if c.status == SKIPPED:
        return f'<td class="skip" title="{_e(c.reason)}">skipped</td>'
    if c.status != COMPLETE:
        return f'<td class="err" title="{_e(c.reason)}">{_e(c.status)}</td>'
    mark = "" if c.deploy_exit == 0 else " ✗"
    report = f"cells/{c.run.result_set}/report.html" if c.run is not None and c.run.result_set else "report.html"
    link = f'<a class="run" href="{_e(quote(c.folder or ""))}/{_e(quote(report))}">{_e(c.klass)}{mark}</a>'
    return f'<td class="cls" style="background:{_colour(fleet, c.klass)}" title="{_e(c.verdict)}">{link}</td>'


def _grid(fleet: FleetResult) -> str:
    head = "".join(f"<th>{_e(c.name)}</th>" for c in fleet.cells)
    rows = []
    for b in fleet.boards:
        by_cell = {c.cell: c for c in b.cells}
        cells = "".join(_cell(fleet, by_cell[c]) if c in by_cell else '<td class="err">not run</td>'
                        for c in fleet.cells)
        rows.append(f"<tr><th>{_e(b.board.name)}</th><td>{_e(b.state.soc or b.board.soc or '?')}</td>{cells}</tr>")
    return f'<table class="grid"><tr><th>board</th><th>SoC</th>{head}</tr>{"".join(rows)}</table>'


def _board_row(b: BoardResult) -> str:
    s = b.state
    clocks = "<br>".join(f"{_e(k)}: {_e(v)}" for k, v in s.clocks) or "-"
    temps = "<br>".join(f"{_e(z)}: {mc / 1000:.1f} °C" for z, mc in s.max_temp_mc) or "-"
    status = _e(b.status) + (f": {_e(b.reason)}" if b.reason else "")
    return (f"<tr><th>{_e(b.board.name)}</th><td>{_e(b.board.address)}{':' + _e(b.board.port) if b.board.port else ''}"
            f"</td><td>{status}</td><td>{_e(s.kernel or '?')}</td><td>{_e(s.runtime or '?')}</td>"
            f"<td>{_e(s.driver or '?')}</td><td>{clocks}</td><td>{temps}</td><td class=\"num\">{b.seconds:.1f}</td></tr>")


def render_html(fleet: FleetResult) -> str:
    ok = fleet.exit_code == 0
    classes = "".join(
        f'<tr><td class="cls" style="background:{_colour(fleet, k.name)}">{_e(k.name)}</td><td class="num">'
        f"{len(k.members)}</td><td>{'yes' if k.repeatable else 'NO'}</td><td><code>{', '.join(_e(f[:16]) for f in k.fingerprints)}</code></td>"
        f"<td>{', '.join(_e(f'{m.board} {m.cell}') for m in k.members)}</td></tr>" for k in fleet.classes)
    diffs = "".join(
        f"<tr><td>{_e(d.b)} vs {_e(d.a)}</td><td>{_e(d.input or '-')}</td><td>{_e(d.output or '-')}</td>"
        f"<td>{_e(d.position or d.index if d.index is not None else '-')}</td><td>{_e(d.value_a)}</td>"
        f"<td>{_e(d.value_b)}</td><td class=\"num\">{_e(d.max_ulp)}</td><td class=\"num\">{d.outputs_differing}</td>"
        f"<td>{_e({True: 'DIFFERS', False: 'same', None: '?'}[d.decision_differs])}</td><td>{_e(d.note)}</td></tr>"
        for d in fleet.differences)
    drift = "".join(f"<li>{_e(n.line())}</li>" for n in fleet.drift) or "<li>no drift from the history baselines</li>"
    boards = "".join(_board_row(b) for b in fleet.boards)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rkdet fleet {_e(fleet.fleet_run_id)}</title>
<style>{_CSS}{_CSS_FLEET}</style></head><body>
<h1>rkdet fleet deploy <code>{_e(fleet.fleet_run_id)}</code></h1>
<div class="verdict {'same' if ok else 'different'}">{_e(fleet.verdict)} (exit {fleet.exit_code})</div>
<h2>Boards × cells (colour: determinism class; ✗: that deploy was not repeatable or outside tolerance)</h2>
{_grid(fleet)}
<h2>Determinism classes</h2>
<table><tr><th>class</th><th>size</th><th>repeatable</th><th>build</th><th>members (board cell)</th></tr>{classes}</table>
<h2>First difference of each pair of classes</h2>
<table><tr><th>pair</th><th>input</th><th>output</th><th>element</th><th>value (first)</th><th>value (second)</th>
<th>ULP</th><th>outputs differing</th><th>decision</th><th>note</th></tr>{diffs or '<tr><td colspan="10">one class: nothing differs</td></tr>'}</table>
<h2>Drift from the history</h2><ul>{drift}</ul>
<h2>Boards</h2>
<table><tr><th>board</th><th>address</th><th>status</th><th>kernel</th><th>librknnrt</th><th>rknpu driver</th>
<th>clocks at run start</th><th>hottest</th><th>seconds</th></tr>{boards}</table>
<p class="muted">fleet.json (schema rkdet.fleet/1, docs/FORMATS.md) beside this page holds every value shown.</p>
</body></html>
"""
