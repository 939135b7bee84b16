"""Terminal report: a compact rich table (only what differs, one line per identical input) and the verdict.

Every string that comes from a result set (input/output names, notes quoting run.json, board-state
findings quoting snapshot node names, the verdict naming input and output) is passed as a rich Text
through rkdet.textsafe: shown literally, never parsed as markup, control characters escaped.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rkdet.diff.compare import Comparison, OutputAnalysis, SetAnalysis, Variant
from rkdet.diff.metrics import NumericStats
from rkdet.textsafe import literal

_SAME = Text("same", style="green")
_WITHIN = Text("within", style="green")
_OUT = Text("OUT", style="red")


def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _worst(oa: OutputAnalysis, attr: str) -> tuple[Variant, NumericStats] | None:
    measured = [(v, getattr(v, attr)) for v in oa.variants.values() if getattr(v, attr) is not None]
    if not measured:
        return None
    return max(measured, key=lambda vs: (not vs[1].within, vs[1].max_ulp))


def _decision_text(ia, attr: str) -> str:
    parts = []
    for g in ia.groups.values():
        d = getattr(g, attr)
        if not d:
            continue
        if d["kind"] == "detection":
            if d["changed"]:
                parts.append(f"{len(d['class_flips'])} flip/{len(d['missing'])} miss/{len(d['extra'])} extra")
            elif d["matched"]:
                parts.append(f"same {d['matched']} boxes (IoU>={_fmt(d['min_iou'], '.3f')})")
            else:
                parts.append("no boxes either side")
        else:
            parts.append("top-1 flip" if d["top1_flip"] else ("top-k changed" if d["topk_changed"] else "same top-k"))
    return "; ".join(dict.fromkeys(parts)) or "-"


def _rows(table: Table, s: SetAnalysis, attr: str, against: str) -> None:
    for ia in s.inputs.values():
        rows = [(oa, _worst(oa, attr)) for oa in ia.outputs.values()]
        rows = [(oa, w) for oa, w in rows if w is not None]
        k, n = len(ia.groups), ia.runs
        if not rows:
            table.add_row(s.role, against, literal(ia.name), f"all {len(ia.outputs)}", f"{k}/{n}", "0", "0", "1", "0",
                          "-", "-", "-", _SAME)
            continue
        decision = _decision_text(ia, "decision_vs_reference" if attr == "vs_reference" else "decision_vs_first")
        for oa, (var, st) in rows:
            diverged = sum(len(v.runs) for v in oa.variants.values() if getattr(v, attr) is not None)
            table.add_row(s.role, against, literal(ia.name), literal(f"{oa.name} ({oa.role})"),
                          f"{k}/{n} ({diverged} differ)", str(st.max_ulp), _fmt(st.max_abs), _fmt(st.cosine, ".6f"),
                          _fmt(st.rel_l2), _fmt(st.kl), st.direction, decision, _WITHIN if st.within else _OUT)
            for name, sl in getattr(var, "slices_" + attr).items():
                table.add_row("", "", "", literal(f"  {oa.name}[{name}]"), "", str(sl.max_ulp), _fmt(sl.max_abs),
                              _fmt(sl.cosine, ".6f"), _fmt(sl.rel_l2), _fmt(sl.kl), sl.direction, "",
                              _WITHIN if sl.within else _OUT)


def render_terminal(c: Comparison, console: Console | None = None) -> None:
    """Print notes, the tolerance, the table, correlations and the one-line verdict."""
    console = console or Console()
    console.print(Text.assemble(("tolerance", "bold"), f": {c.tolerance.describe()}  ", ("mode", "bold"), f": {c.mode}"))
    for note in c.notes:
        console.print(literal(f"note: {note}", "dim"))
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col in ("set", "vs", "input", "output", "distinct/runs", "max ULP", "max abs", "cosine", "rel L2", "KL",
                "direction", "decision", "status"):
        table.add_column(col, overflow="fold")
    if c.b is not None:
        _rows(table, c.a, "vs_reference", "B")
    for s in (c.a, c.b):
        if s is not None and (s.runs > 1 or c.b is None):
            _rows(table, s, "vs_first", "run 0")
    console.print(table)
    for s in (c.a, c.b):
        if s is None:
            continue
        for point, what in ((s.first_difference, "first difference vs B"), (s.first_divergence, "first divergence")):
            if point:
                console.print(literal(f"{s.role} {what}: run {point['run']}, input {point['input']}, output "
                                      f"{point['output']}, element {point['index']} {point['position']}: "
                                      f"{point['reference']!r} -> {point['candidate']!r}"))
        for finding in s.correlation:
            console.print(literal(f"{s.role} board state: {finding}"))
    style = "bold green" if c.exit_code == 0 else "bold red"
    console.print(literal(c.verdict, style), soft_wrap=True)
