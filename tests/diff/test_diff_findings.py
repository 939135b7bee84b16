"""One findings tree (issue 10): both presenters render `findings(c)`; html.py no longer imports report.py."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from diff_helpers import DEFAULT_NAMES, default_outputs, one_ulp_up, repeated_set
from rich.console import Console

from rkdet.diff.api import compare
from rkdet.diff.findings import findings
from rkdet.diff.html import render_html
from rkdet.diff.terminal import render_terminal

DIFF = Path(__file__).resolve().parents[2] / "rkdet" / "diff"


def _imports(module: str) -> set[str]:
    tree = ast.parse((DIFF / f"{module}.py").read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def test_no_html_report_import_loop() -> None:
    assert "rkdet.diff.report" not in _imports("html")
    assert "rkdet.diff.report" not in _imports("findings") and "rkdet.diff.html" not in _imports("findings")


def test_both_presenters_render_the_same_tree(tmp_path: Path) -> None:
    base = default_outputs(4, size=160)
    flipped = list(base)
    flipped[3] = one_ulp_up(base[3], 17)  # cls1
    a = repeated_set(tmp_path / "a", {"p": base, "q": base}, 5, DEFAULT_NAMES, overrides={(3, "p"): flipped}).close()
    g = repeated_set(tmp_path / "g", {"p": base, "q": base}, 1, DEFAULT_NAMES).close()
    c = compare(a, g)
    tree = findings(c)
    assert [(s.set, s.against) for s in tree.sections] == [("A", "B"), ("A", "run 0")]
    p = next(i for i in tree.sections[0].inputs if i.name == "p")
    q = next(i for i in tree.sections[0].inputs if i.name == "q")
    out = {o.name: o for o in p.outputs}
    assert out["cls1"].status == "OUT" and out["cls1"].differing_runs == [3] and out["box0"].status == "same"
    assert q.identical and tree.locations[0].run == 3 and tree.locations[0].output == "cls1"
    buf = io.StringIO()
    render_terminal(c, Console(file=buf, color_system=None, width=300))
    text = buf.getvalue()
    html = render_html(findings(c))
    # the same finding, in each presenter's words
    assert "cls1 (cls)" in text and "(1 differ)" in text and "OUT" in text and "all 6" in text
    assert "cls1 (cls)" in html and '<td>3</td>' in html and '<span class="bad">OUT</span>' in html
    assert "first divergence: run 3, input p, output cls1" in text
    assert "first run-to-run divergence</b>: run 3, input <code>p</code>, output <code>cls1</code>" in html
