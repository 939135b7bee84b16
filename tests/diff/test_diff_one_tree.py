"""The findings tree is the ONE tree every presenter reads (issue 28; diffoscope's model): report.json,
the HTML (with its plots) and the terminal are rendered from `Findings` alone, never from the Comparison."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import json
from pathlib import Path

import numpy as np
from diff_helpers import repeated_set
from rich.console import Console

from rkdet.diff import html, report, terminal
from rkdet.diff.api import compare
from rkdet.diff.findings import Findings, findings

ROOT = Path(__file__).resolve().parents[2]


def _comparison(tmp_path: Path):
    base = np.arange(6, dtype=np.float32)
    a = repeated_set(tmp_path / "a", {"p": [base]}, 3, ["out"], overrides={(2, "p"): [base + 0.25]}).close()
    b = repeated_set(tmp_path / "b", {"p": [base]}, 1, ["out"]).close()
    return compare(a, b)


def test_report_json_is_produced_from_findings(tmp_path: Path) -> None:
    c = _comparison(tmp_path)
    tree = findings(c)
    assert list(inspect.signature(report.report_json).parameters) == ["tree", "base"]
    assert inspect.signature(report.report_json).parameters["tree"].annotation in ("Findings", Findings)
    written = json.loads(report.write_reports(c, tmp_path / "out")["json"].read_text())
    assert written == json.loads(report.report_text(tree, (tmp_path / "out").resolve()))
    assert written["schema"] == "rkdet.diff/3" and written["exit_code"] == 1
    # the tree alone carries the report: a Findings with another verdict gives another report
    other = dataclasses.replace(tree, verdict="SAME (made up)", exit_code=0)
    assert report.report_json(other)["verdict"] == "SAME (made up)" and report.report_json(other)["same"] is True
    assert "SAME (made up)" in html.render_html(other)
    out = io.StringIO()
    terminal.render_findings(other, Console(file=out, width=200))
    assert out.getvalue().rstrip().endswith("SAME (made up)")


def test_no_presenter_reads_the_comparison() -> None:
    """html.py and plots.py import nothing from the engine; report.py and terminal.py only to build the
    tree in their Comparison-taking wrappers (report_json, render_findings take Findings)."""
    for name in ("html.py", "plots.py"):
        tree = ast.parse((ROOT / "rkdet" / "diff" / name).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "rkdet.diff.compare" not in imported, name
    assert list(inspect.signature(terminal.render_findings).parameters)[0] == "f"
    assert inspect.signature(html.render_html).parameters["tree"].annotation in ("Findings", Findings)
