"""A float16 request for a layer the toolkit added (no ONNX counterpart: rknn-toolkit2 accepts the name and
ignores it) becomes a request for the nearest ONNX layer it will honour, or is dropped saying why none.
The layer table is the toolkit's naming over a tiny real ONNX model, mapped by `rkdet layers`' own code
(rkdet/layers/report.build_report); the search runs with stand-in builds (what is tested is which
layers its hybrid variants ask float16 for; the real builds: test_convert_search.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rkdet.config import load_config
from rkdet.layers.analysis import InputAnalysis, LayerRow, Metrics
from rkdet.layers.report import LayersReport, build_report
from rkdet.search import float16_requests
from rkdet.search import run as search_run
from rkdet.search.budget import Budget
from rkdet.search.space import Space
from tiny_models import conv_model, image_folder, write_config

# (op, name as rknn-toolkit2 names it, single cosine; None: fused, no dump) over conv_model's graph
# x -> Conv c1 -> Relu r1 -> Conv c2 -> Sigmoid y
TOOLKIT_ROWS = [("Input", "x", 1.0), ("Conv", "c1", None), ("Relu", "r1", 0.999),
                ("Reshape", "r1-rs_sw", 0.80),  # added by the toolkit: no ONNX counterpart
                ("Conv", "c2", 0.97), ("exDataConvert", "c2_int8", 0.90),  # derived from ONNX tensor c2
                ("Sigmoid", "y", 0.998)]


def _report(onnx_bytes: bytes, rows: list[tuple[str, str, float | None]] = TOOLKIT_ROWS) -> LayersReport:
    table = [LayerRow(i, op, name, None if c is None else Metrics(c, 0.1, 0.1),
                      None if c is None else Metrics(c, 0.1, 0.1), c) for i, (op, name, c) in enumerate(rows)]
    return build_report([InputAnalysis("g0", table)], onnx_bytes, 0.99, 8, source="test", toolkit="2.5.0",
                        fingerprint="f" * 64, build_fingerprint=None, timings={})


@pytest.fixture()
def onnx_bytes(tmp_path: Path) -> bytes:
    return conv_model(tmp_path / "m.onnx").read_bytes()


def test_a_layer_the_toolkit_added_is_asked_as_the_nearest_onnx_layer(onnx_bytes: bytes) -> None:
    report = _report(onnx_bytes)
    assert [x.rknn_name for x in report.worst_single][:3] == ["r1-rs_sw", "c2_int8", "c2"]
    got = {r.layer: r for r in float16_requests.requests(report.worst_single, report.layers)}
    # no ONNX counterpart: r1 and c2 are equally near in the toolkit's order; the one before it wins
    assert got["r1-rs_sw"].requested == "r1" and got["r1-rs_sw"].mapped
    assert "no ONNX counterpart (added by the toolkit)" in got["r1-rs_sw"].why and "instead, r1 (Conv#0 (Conv) + Relu#1 (Relu))" in got["r1-rs_sw"].why
    assert got["c2_int8"].requested == "c2" and "ONNX tensor c2" in got["c2_int8"].why  # derived: its tensor's layer
    assert got["c2"].requested == "c2" and not got["c2"].mapped  # an ONNX layer: itself
    assert got["y"].requested == "y"


def test_no_onnx_layer_to_honour_is_said_not_requested(onnx_bytes: bytes) -> None:
    report = _report(onnx_bytes, [("Input", "x", 1.0), ("Reshape", "x-rs_sw", 0.5), ("Reshape", "x-rs_sw2", 0.6)])
    reqs = float16_requests.requests(report.worst_single, report.layers)
    assert [r.requested for r in reqs] == [None, None]
    assert "no float16 request the toolkit would honour" in reqs[0].why


def test_the_search_asks_float16_for_the_mapped_layers(tmp_path: Path, onnx_bytes: bytes,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(write_config(tmp_path / "t.yaml", conv_model(tmp_path / "m.onnx"),
                                   image_folder(tmp_path / "cal", 4, seed=1), image_folder(tmp_path / "gold", 2, seed=2)))
    report = _report(onnx_bytes)
    asked: list[Any] = []
    cosines = iter([0.5, 0.6, 0.7, 0.8])

    def fake_build(cfg: Any, variant: Any, platform: str, scratch: Path, progress: Any, watch: Any = None):
        asked.append(variant.changes.get("quantize.float_layers"))
        outcome = search_run.Outcome(variant, "fail", {"float_layers": variant.changes.get("quantize.float_layers", [])})
        outcome.gates = [{"gate": "cosine", "subject": "y", "value": next(cosines), "threshold": 0.98,
                          "passed": False, "binding": True}]
        return outcome, None

    def fake_layers(cfg: Any, platform: str, scratch: Path, progress: Any, top: int):
        shape = search_run.loss_shape([x.single.cosine for x in report.layers if x.op != "Input"], None, [0.5], 0.99)
        return search_run.worst_entries(report.worst_single, report.layers), len(report.layers) - 1, shape

    monkeypatch.setattr(search_run, "build_variant", fake_build)
    monkeypatch.setattr(search_run, "_worst_single", fake_layers)
    lines: list[str] = []
    space = Space(algorithms=("normal",), methods=("channel",), calibration=(1,))
    result = search_run.search(cfg, "rk3588", tmp_path, space, True, lines.append, Budget(3600.0))
    assert asked == [None, ["r1"], ["r1", "c2"], ["r1", "c2", "y"]], "never an added layer; each ONNX layer once"
    assert any("float16 for r1-rs_sw asked as r1: no ONNX counterpart" in ln for ln in lines), lines
    doc = result.to_json(None)
    first = doc["worst_single"][0]
    assert (first["rknn_name"], first["float16"]) == ("r1-rs_sw", "r1") and "nearest ONNX layer" in first["float16_why"]
