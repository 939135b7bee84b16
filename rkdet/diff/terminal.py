"""Terminal report: a compact rich table (only what differs, one line per identical input) and the verdict.

Every string that comes from a result set (input/output names, notes quoting run.json, board-state
findings quoting snapshot node names, the verdict naming input and output) is passed as a rich Text
through rkdet.textsafe: shown literally, never parsed as markup, control characters escaped.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rkdet.diff.compare import Comparison
from rkdet.diff.findings import Decision, Findings, InputFinding, Section, findings
from rkdet.textsafe import literal
from rkdet.log import output_console

_STATUS = {"same": Text("same", style="green"), "within": Text("within", style="green"), "OUT": Text("OUT", style="red")}


def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _decision_text(decisions: list[Decision]) -> str:
    return "; ".join(dict.fromkeys(d.terminal_text() for d in decisions)) or "-"


def _rows(table: Table, section: Section, inp: InputFinding) -> None:
    k, n = inp.distinct, inp.runs
    if inp.identical:  # one line per identical input
        table.add_row(section.set, section.against, literal(inp.name), f"all {len(inp.outputs)}", f"{k}/{n}",
                      "0", "0", "1", "0", "-", "-", "-", _STATUS["same"])
        return
    decision = _decision_text(inp.decisions)
    for o in inp.outputs:
        st = o.worst
        if st is None:
            continue
        table.add_row(section.set, section.against, literal(inp.name), literal(f"{o.name} ({o.role})"),
                      f"{k}/{n} ({len(o.differing_runs)} differ)", str(st.max_ulp), _fmt(st.max_abs),
                      _fmt(st.cosine, ".6f"), _fmt(st.rel_l2), _fmt(st.kl), st.direction, decision, _STATUS[o.status])
        for sl in o.slices:
            s = sl.stats
            table.add_row("", "", "", literal(f"  {o.name}[{sl.name}]"), "", str(s.max_ulp), _fmt(s.max_abs),
                          _fmt(s.cosine, ".6f"), _fmt(s.rel_l2), _fmt(s.kl), s.direction, "",
                          _STATUS["within" if s.within else "OUT"])


def render_terminal(c: Comparison, console: Console | None = None) -> None:
    """`render_findings` of a comparison's findings tree."""
    render_findings(findings(c), console)


def render_findings(f: Findings, console: Console | None = None) -> None:
    """Print notes, the tolerance, the table, where the first difference is, board state, the minimum
    tolerance per differing output, the two verdicts and the verdict line: from the findings tree only."""
    console = console or output_console()
    console.print(Text.assemble(("tolerance", "bold"), f": {f.tolerance}  ", ("mode", "bold"), f": {f.mode}"))
    for note in f.notes:
        console.print(literal(f"note: {note}", "dim"))
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col in ("set", "vs", "input", "output", "distinct/runs", "max ULP", "max abs", "cosine", "rel L2", "KL",
                "direction", "decision", "status"):
        table.add_column(col, overflow="fold")
    for section in f.sections:
        for inp in section.inputs:
            _rows(table, section, inp)
    console.print(table)
    for loc in f.locations:
        console.print(literal(f"{loc.set} {loc.what}: run {loc.run}, input {loc.input}, output {loc.output}, "
                              f"element {loc.index} {loc.position}: {loc.reference!r} -> {loc.candidate!r}"))
    for role, finding in f.board_state:
        console.print(literal(f"{role} board state: {finding}"))
    for section in f.sections:  # Polygraphy's "minimum required tolerance", per output that differs
        for req in section.requirements:
            console.print(literal(f"minimum tolerance, {section.set} vs {section.against}, output {req.output}: "
                                  f"{req.line()}"), soft_wrap=True)
    for v in (f.repeatable, f.agrees):
        if v is not None:
            console.print(literal(v.line(), "green" if v.ok else "red"), soft_wrap=True)
    console.print(literal(f.verdict, "bold green" if f.exit_code == 0 else "bold red"), soft_wrap=True)
