"""The accuracy record (`accuracy.json`) as one offline HTML page: the terminal's table, for a release note.

A presenter of `rkdet.records.accuracy.AccuracyRecord` only, as `table.terminal_lines` is: the same
columns (each variant, its metric, the delta against FP32, the side metrics, each MLPerf line), each
board row with the backend label its result set gave it. The record may come from anyone (its reader
bounds every string and checks the table's arithmetic); every string from it is shown through
`textsafe.html_text` (controls and bidi made visible, then HTML-escaped). No script, stylesheet or URL.
"""

from __future__ import annotations

from rkdet.accuracy.table import PERCENT
from rkdet.records.accuracy import BOARD_PREFIX, EMULATED_BOARD, LINES, REFERENCE, AccuracyRecord, AccuracyRow
from rkdet.textsafe import html_text as escape

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;background:#fafafa}
table{border-collapse:collapse;width:100%;margin:8px 0 18px;background:#fff}
th,td{border:1px solid #ddd;padding:4px 7px;text-align:left;font-size:13px;vertical-align:top}
th{background:#eef2f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37;font-weight:600}.bad{color:#c62828;font-weight:600}.muted{color:#666}
.emulated{background:#fff3cd;border:1px solid #e0c060;padding:1px 5px;border-radius:3px}
.verdict{padding:12px 16px;border-radius:6px;font-size:16px;font-weight:600;color:#fff}
.pass{background:#1a7f37}.fail{background:#c62828}
code{background:#eef2f7;padding:1px 4px;border-radius:3px}
"""


def _pct(x: float) -> str:
    return escape(f"{100 * x:.2f}%")


def _side(key: str, row: AccuracyRow) -> str:
    value = row.others.get(key)
    if value is None:
        return "–"
    return _pct(value) if key in PERCENT else escape(f"{value:g}")


def _variant(row: AccuracyRow) -> str:
    """The row's name; a board's row marked as such, an emulated one flagged (never mistaken for an NPU)."""
    name = escape(row.variant)
    if not row.variant.startswith(BOARD_PREFIX):
        return name
    flag = ' <span class="emulated">EMULATED: not an NPU</span>' if row.variant.endswith(EMULATED_BOARD) else ""
    return f"{name}{flag}"


def _line_cell(row: AccuracyRow, line: float, ok: bool) -> str:
    if row.variant == REFERENCE:
        return '<td class="muted">(reference)</td>'
    return f'<td class="{"ok" if ok else "bad"}">{"pass" if ok else "FAIL"}</td>'


def render_accuracy_html(record: AccuracyRecord, require: float = LINES[0]) -> str:
    """The page: the verdict against `require` (one of LINES), the table, each row's detail, the notes."""
    rows = list(record.rows)
    others = list(rows[0].others)
    failing = [r for r in rows if any(not ok for line, ok in r.lines if abs(line - require) < 1e-12)]
    verdict = (f"every row holds {100 * require:g}% of FP32's {rows[0].metric}" if not failing else
               f"{len(failing)} row(s) below {100 * require:g}% of FP32's {rows[0].metric}: "
               + ", ".join(r.variant for r in failing))
    heads = [rows[0].metric, "delta vs FP32", *others, *(f"≥ {100 * line:g}% FP32" for line in LINES)]
    out = ["<!doctype html><html><head><meta charset=\"utf-8\">",
           f"<title>rkdet accuracy: {escape(record.build)}</title><style>{_CSS}</style></head><body>",
           f"<h1>Accuracy against labels: {escape(record.build)}</h1>",
           f'<div class="verdict {"fail" if failing else "pass"}">{escape(verdict)}</div>',
           "<p>build fingerprint <code>" + escape(record.fingerprint) + "</code>; labels <code>"
           + escape(record.labels) + "</code> (sha256 <code>" + escape(record.labels_sha256 or "not recorded")
           + f"</code>), {record.samples} labelled image(s). MLPerf Inference accepts a quantized result at "
           "99 % of the FP32 reference's accuracy (99.9 % in its high-accuracy category).</p>",
           "<table><tr><th>variant</th>" + "".join(f"<th>{escape(h)}</th>" for h in heads) + "</tr>"]
    for row in rows:
        cells = [f'<td class="num">{_pct(row.value)}</td>', f'<td class="num">{escape(f"{100 * row.delta:+.2f}%")}</td>',
                 *(f'<td class="num">{_side(k, row)}</td>' for k in others),
                 *(_line_cell(row, line, ok) for line, ok in row.lines)]
        out.append(f"<tr><td>{_variant(row)}</td>{''.join(cells)}</tr>")
    out.append("</table><h2>How each row was computed</h2><table><tr><th>variant</th><th>metric</th><th>detail</th></tr>")
    for row in rows:
        out.append(f"<tr><td>{_variant(row)}</td><td>{escape(row.metric)}</td><td>{escape(row.detail)}</td></tr>")
    out.append("</table>")
    if record.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in record.notes) + "</ul>")
    out.append('<p class="muted">Written by rkdet accuracy (docs/ACCURACY.md); schema rkdet.accuracy.</p></body></html>')
    return "\n".join(out)
