"""The search budget with the real rknn-toolkit2 on a tiny model and an injected clock.

The clock moves only when the pipeline says "building with" (a fixed 300 or 600 s per build), so what the
budget decides is the same on any machine: no wall-clock time is asserted. The cancelling-conv model
fails the gate at min_cosine 0.98 whatever the algorithm (test_convert_search.py), so every variant runs
to its verdict unless the budget says otherwise.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from rkdet.config import load_config
from rkdet.search.budget import Budget
from rkdet.cli.search import no_pass_error, table
from rkdet.search.run import search
from rkdet.search.space import parse_space
from tiny_models import cancelling_conv_model, image_folder, write_config

pytestmark = pytest.mark.slow
SPACE = ("algorithm=normal,kl_divergence,mmse", "method=channel", "calibration=1", "hybrid=none")


class BuildClock:
    """Advances by `per_build` seconds each time a build starts (the pipeline's "building with" line)."""

    def __init__(self, per_build: float) -> None:
        self.now, self.per_build, self.lines = 0.0, per_build, []

    def __call__(self) -> float:
        return self.now

    def progress(self, message: str) -> None:
        self.lines.append(message)
        if "building with" in message:
            self.now += self.per_build


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("budget")
    return write_config(root / "tiny.yaml", cancelling_conv_model(root / "cancelling.onnx"),
                        image_folder(root / "cal", 6, seed=1), image_folder(root / "gold", 2, seed=2),
                        fidelity={"min_cosine": 0.98})


def test_mmse_is_left_untried_when_the_measured_costs_say_it_cannot_fit(config: Path, tmp_path: Path) -> None:
    clock = BuildClock(300)
    result = search(load_config(config), "rk3588", tmp_path, parse_space(SPACE), False, clock.progress,
                    Budget(1000, clock))
    assert [o.variant.changes for o in result.outcomes] == [{}, {"quantize.algorithm": "kl_divergence"}]
    assert [o.status for o in result.outcomes] == ["fail", "fail"]
    assert [o.build_seconds for o in result.outcomes] == [300, 300]  # measured on the search's clock
    assert result.outcomes[1].estimated_seconds == 450  # 300 s per unit x kl_divergence's 1.5
    (untried,) = result.untried
    assert untried.variant.changes == {"quantize.algorithm": "mmse"} and untried.estimated_seconds == 4800
    assert "of the budget left" in untried.reason and result.out_of_budget
    doc = result.to_json(None)
    assert doc["schema"] == "rkdet.search/2" and doc["variants"][0]["build_seconds"] == 300
    assert doc["untried"][0]["estimated_seconds"] == 4800 and doc["budget_seconds"] == 1000


def test_a_build_running_at_the_deadline_stops_and_the_search_exits_4(config: Path, tmp_path: Path) -> None:
    clock = BuildClock(600)  # the first build starts past the 500 s deadline: the worker is stopped
    result = search(load_config(config), "rk3588", tmp_path, parse_space(SPACE), False, clock.progress,
                    Budget(500, clock))
    assert [o.status for o in result.outcomes] == ["stopped"]
    assert "budget ran out during this build" in (result.outcomes[0].message or "")
    assert [u.reason for u in result.untried] == ["the budget is spent"] * 2 and result.passed is None
    err = no_pass_error(result, tmp_path)
    assert err.exit_code == 4
    message = str(err)
    assert "the budget (8m20s, --search-budget) ran out: 2 variant(s) untried" in message
    assert "1 build stopped at the deadline" in message
    out = StringIO()
    Console(file=out, width=220).print(table(result))
    shown = out.getvalue()
    assert "stopped" in shown and shown.count("untried") == 2 and "build time" in shown
    assert not list(tmp_path.glob(".search-*"))  # the scratch folder is gone


def test_the_budget_keeps_room_for_rkdet_layers_and_a_remedy(config: Path, tmp_path: Path) -> None:
    """With a hybrid stage in the space, the quantization variants stop while `rkdet layers` and one remedy
    build still fit: the search ends with a diagnosis, not with the sixth mmse variant."""
    clock = BuildClock(300)
    space = parse_space(("algorithm=normal,kl_divergence,mmse", "method=channel", "calibration=1", "hybrid=1"))
    result = search(load_config(config), "rk3588", tmp_path, space, False, clock.progress, Budget(1700, clock))
    # 300 s measured for the config; kl_divergence (450) + layers (600) + a hybrid build (450) = 1500 > 1400 left
    assert [o.variant.stage for o in result.outcomes][0] == "config"
    assert [u.variant.changes for u in result.untried][:2] == [{"quantize.algorithm": "kl_divergence"},
                                                                {"quantize.algorithm": "mmse"}]
    assert all("left for the hybrid stage" in u.reason for u in result.untried[:2])
    assert result.worst_single, "rkdet layers ran within the budget"
    assert result.loss is not None and not result.loss.accumulates  # the fragile conv: one layer's fault
    assert result.outcomes[-1].variant.stage == "hybrid" and result.outcomes[-1].status == "pass"
