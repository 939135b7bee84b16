"""Issue 21 §6: one sanitiser for every sink. Terminal (`visible`), HTML (`html_text`: controls and
bidi made visible, then escaped), JUnit (`xml_text`), plot labels (`plot_label`: no "Glyph missing"
warnings), history rows (run_id checked at ingest: tests/trust/test_history_trust.py)."""

from __future__ import annotations

import warnings
import xml.etree.ElementTree as ET

import pytest

from rkdet.diff import plots
from rkdet.textsafe import html_text, plot_label, visible, xml_text

HOSTILE = "snap\x1b[2J\x07\u202eevil$x^2$"
RAW = ("\x1b", "\x07", "\u202e")


@pytest.mark.parametrize("sink", [visible, html_text, xml_text, plot_label])
def test_no_sink_keeps_a_raw_control_or_bidi_char(sink) -> None:
    out = sink(HOSTILE)
    assert not any(ch in out for ch in RAW) and "\\x1b" in out and "\\u202e" in out


def test_html_text_escapes_markup_after_making_controls_visible() -> None:
    assert html_text("<b>\x1b</b>") == "&lt;b&gt;\\x1b&lt;/b&gt;"


def test_plot_labels_from_a_board_draw_without_glyph_warnings() -> None:
    snapshots = [{"thermal": {HOSTILE: 40000}, "devfreq": {f"npu{HOSTILE}": {"cur_hz": 1_000_000_000}}}] * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph 27 (\x1b) missing" was a UserWarning on stderr
        png = plots.board_plot(snapshots, 3)
        latency = plots.latency_plot({HOSTILE: {HOSTILE: [(0, 1.0), (1, 1.1)]}})
    assert png.startswith(b"\x89PNG") and latency.startswith(b"\x89PNG")
    assert plot_label("a$b") == "a\\$b"  # no mathtext parse of a board's name


def test_diff_html_report_has_no_raw_control_chars(tmp_path) -> None:
    import numpy as np
    from diff_helpers import repeated_set

    from rkdet.diff.api import compare
    from rkdet.diff.findings import findings
    from rkdet.diff.html import render_html

    base = np.arange(16, dtype=np.float32)
    name = "in\x1b[2J\x07\u202eput"
    s = repeated_set(tmp_path / "s", {name: [base]}, 3, ["out\u202e\x1b"], overrides={(2, name): [base + 1]}).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        page = render_html(findings(compare(s)))
    assert not any(ch in page for ch in RAW)  # escaped as HTML was not enough: the bytes were still there
    assert "in\\x1b[2J\\x07\\u202eput" in page


def test_junit_classname_and_name_keep_no_bidi() -> None:
    from rkdet.fleets.run import junit
    text = junit._text(f"rkdet.fleet.{HOSTILE}")
    element = ET.Element("testcase", classname=text)
    serialized = ET.tostring(element, encoding="unicode")
    assert "\u202e" not in serialized and "\x1b" not in serialized and "\\u202e" in serialized


def test_fleet_and_layers_html_use_the_one_sanitiser() -> None:
    from rkdet.fleets.run import html as fleet_html
    from rkdet.layers import report

    assert fleet_html.escape is html_text and report.escape is html_text
