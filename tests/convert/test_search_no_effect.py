"""A search variant whose build measures exactly what an earlier one measured (every gate value, to the last
bit) changed nothing: it is reported as "no effect" naming that variant, and the search goes on to the next
remedy. The builds here are stand-ins for build_variant (the real ones: test_convert_search.py); what is
tested is the search's own bookkeeping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rkdet.config import load_config
from rkdet.search import run as search_run
from rkdet.search.budget import Budget
from rkdet.search.space import Space
from tiny_models import conv_model, image_folder, write_config


def test_a_variant_with_the_same_fidelity_is_reported_as_no_effect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(write_config(tmp_path / "t.yaml", conv_model(tmp_path / "m.onnx"),
                                   image_folder(tmp_path / "cal", 4, seed=1), image_folder(tmp_path / "gold", 2, seed=2)))
    cosines = iter([0.5, 0.5, 0.7, 0.5])  # variant 1 measures what variant 0 did; 2 moves; 3 is variant 0's again

    def fake_build(cfg: Any, variant: Any, platform: str, scratch: Path, progress: Any, watch: Any = None):
        outcome = search_run.Outcome(variant, "fail", {"float_layers": []})
        outcome.gates = [{"gate": "cosine", "subject": "y", "value": next(cosines), "threshold": 0.98,
                          "passed": False, "binding": True}]
        return outcome, None

    monkeypatch.setattr(search_run, "build_variant", fake_build)
    lines: list[str] = []
    space = Space(algorithms=("normal", "mmse"), methods=("channel", "layer"), calibration=(1,), hybrid=())
    result = search_run.search(cfg, "rk3588", tmp_path, space, True, lines.append, Budget(3600.0))
    marks = [o.no_effect for o in result.outcomes]
    assert len(marks) == 4 and marks[0] is None and marks[2] is None
    first = result.outcomes[0].variant.index
    assert marks[1] == first and marks[3] == first
    assert result.outcomes[1].to_json()["no_effect"] == first
    assert any("no effect: every gate value equals variant" in ln for ln in lines)
