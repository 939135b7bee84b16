"""No Python spelling in what people read (issue 36 §2): the demo's comparison (an emulated board's set A, no
CPU affinity, against a golden set B with one, a bitwise tolerance with min_cosine/max_rel_l2 unset, one
differing run) rendered to the terminal and to HTML reads "not set", "yes"/"no", plain words; and the one
helper every presenter uses says so for each kind of value."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
from diff_helpers import DEFAULT_NAMES, ResultSetBuilder, default_outputs, one_ulp_up
from rich.console import Console

from rkdet.diff.api import compare
from rkdet.diff.findings import findings
from rkdet.diff.html import render_html
from rkdet.diff.terminal import render_terminal
from rkdet.textsafe import plain_value

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plain_words import html_visible_text, junit_text, python_spellings  # noqa: E402


def test_plain_value_has_a_word_for_each_python_spelling() -> None:
    assert plain_value(None) == plain_value("") == "not set"
    assert (plain_value(True), plain_value(False)) == ("yes", "no")
    assert plain_value([]) == plain_value({}) == plain_value(()) == "none"
    assert plain_value([4, 5]) == "4, 5" and plain_value({"npu": None, "pinned": True}) == "npu not set, pinned yes"
    assert plain_value("emulated") == "emulated"  # no repr quotes
    assert plain_value(np.float32(0.5)) == "0.5" and plain_value(np.int64(3)) == "3"
    assert plain_value("a\x1b[2Jb") == "a\\x1b[2Jb"  # still `visible`: no escape codes
    assert not python_spellings(" ".join(plain_value(v) for v in (None, True, False, [], {}, "x", [None, True])))


def test_the_scan_finds_each_spelling() -> None:
    found = python_spellings("affinity None; A True vs B False; [] {} backend 'emulated'")
    assert len(found) == 6, found
    assert not python_spellings("Nonetheless it's true: 'tis the board's [0, 1] {a}")
    assert python_spellings(junit_text('<testsuites name="x"><testcase name="c">class: None</testcase></testsuites>'))
    assert python_spellings(html_visible_text("<p>core_mask <b>True</b></p><style>a {}</style>"))
    assert not python_spellings(html_visible_text("<style>a {}</style><p>core_mask auto</p>"))


def _demo_like(tmp: Path) -> tuple[Path, Path]:
    arrays = default_outputs(0, 64)
    a = ResultSetBuilder(tmp / "A", ["page1", "page2"], DEFAULT_NAMES, backend="emulated", affinity=None)
    a.run["emulated"] = True
    for run in range(5):
        for name in ("page1", "page2"):
            out = [one_ulp_up(arrays[0], 5), *arrays[1:]] if (run, name) == (3, "page2") else arrays
            a.add(run, name, out, latency_ms=10.0 + run)
    b = ResultSetBuilder(tmp / "B", ["page1", "page2"], DEFAULT_NAMES, backend="onnxruntime", affinity=[4, 5])
    for name in ("page1", "page2"):
        b.add(0, name, arrays)
    return a.close(), b.close()


def test_the_demo_like_reports_read_as_prose(tmp_path: Path) -> None:
    a, b = _demo_like(tmp_path)
    c = compare(a, b)
    assert c.exit_code == 1  # one run differs: the report has notes, locations, board state to say
    buf = io.StringIO()
    render_terminal(c, Console(file=buf, width=400, color_system=None))
    terminal = buf.getvalue()
    page = html_visible_text(render_html(findings(c)))
    for text in (terminal, page):
        assert "affinity differs: A not set vs B 4, 5" in text and "emulated differs: A yes vs B no" in text
        assert "backend differs: A emulated vs B onnxruntime" in text
        assert python_spellings(text) == [], python_spellings(text)
    assert "min_cosine=not set" in page and "affinity not set" in page and "affinity 4, 5" in page
