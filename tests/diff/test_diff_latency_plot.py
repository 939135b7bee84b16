"""The latency plot shows a distribution per run (issue 36 §4): a median line with interquartile and
min-max bands per set, and a box per input over its runs, so a drift or an outlier input is visible;
it was one line per input (eight crossing lines for the demo). What the figure holds is checked, not pixels."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from rkdet.diff.plots import MAX_LATENCY_BOXES, latency_figure, latency_per_run, latency_plot


def _demo_like() -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Eight inputs over six runs: the board drifts +1 ms per run, input `page7` is 5 ms slow in run 4."""
    a = {f"page{i}": [(r, 10.0 + i * 0.1 + r * 1.0 + (5.0 if (i, r) == (7, 4) else 0.0)) for r in range(6)]
         for i in range(8)}
    b = {f"page{i}": [(0, 3.0 + i * 0.01)] for i in range(8)}
    return {"A": a, "B": b}


def test_per_run_statistics_show_the_drift_and_the_outlier() -> None:
    stats = latency_per_run([p for pts in _demo_like()["A"].values() for p in pts])
    assert [s.run for s in stats] == list(range(6)) and all(s.inputs == 8 for s in stats)
    medians = [s.median for s in stats]
    assert np.allclose(np.diff(medians), 1.0)  # the drift: the median moves 1 ms a run
    spread = [s.high - s.low for s in stats]
    assert spread[4] == pytest.approx(5.7) and all(w == pytest.approx(0.7) for i, w in enumerate(spread) if i != 4)
    assert stats[4].q3 - stats[4].q1 < 1.0  # the outlier widens min-max, not the interquartile range
    one = latency_per_run([(3, 2.0)])
    assert one == [type(one[0])(3, 1, 2.0, 2.0, 2.0, 2.0, 2.0)]


def test_the_figure_draws_a_median_line_and_bands_per_set_and_a_box_per_input() -> None:
    fig = latency_figure(_demo_like())
    over_runs, per_input = fig.axes
    medians = [ln for ln in over_runs.get_lines() if ln.get_label().endswith("median")]
    assert [ln.get_label() for ln in medians] == ["A median", "B median"]  # one line per set, not per input
    assert list(medians[0].get_ydata()) == pytest.approx([10.35 + r for r in range(6)])
    bands = [c for c in over_runs.collections if isinstance(c, PolyCollection)]
    assert sorted(b.get_label() for b in bands) == ["A IQR", "A min-max", "B IQR", "B min-max"]
    band = next(b for b in bands if b.get_label() == "A min-max")
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.max() == pytest.approx(10.7 + 4 + 5.0)  # the outlier run reaches the top of the band
    labels = [t.get_text() for t in per_input.get_yticklabels()]
    assert labels == [f"A page{i}" for i in range(8)] + [f"B page{i}" for i in range(8)]
    assert per_input.get_title() == "Per input over runs"


def test_many_inputs_are_capped_and_said_so_and_no_latency_is_said() -> None:
    many = {"A": {f"in{i}": [(0, 1.0), (1, 2.0)] for i in range(MAX_LATENCY_BOXES + 6)}}
    per_input = latency_figure(many).axes[1]
    assert len(per_input.get_yticklabels()) == MAX_LATENCY_BOXES
    assert f"first {MAX_LATENCY_BOXES} of {MAX_LATENCY_BOXES + 6}" in per_input.get_title()
    empty = latency_figure({"A": {"x": []}})
    assert "no latency recorded" in [t.get_text() for t in empty.axes[0].texts]
    assert latency_plot(_demo_like()).startswith(b"\x89PNG")
