"""A declared `decision:` through the real rknn-toolkit2 build: the two-head classifier's gate judges the
app's rule, the manifest records it, and `rkdet diff` of the build's golden sets judges it unasked (the
rule comes from the build), as deploy's comparison against the build does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from convert_helpers import run_rkdet
from tiny_models import image_folder, write_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "decode"))
from decision_models import two_head_model  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_declared_decision_is_gated_recorded_and_judged_by_diff(tmp_path: Path) -> None:
    onnx_path = two_head_model(tmp_path / "face.onnx")
    cfg = write_config(tmp_path / "face.yaml", onnx_path, image_folder(tmp_path / "cal", 6, seed=1),
                       image_folder(tmp_path / "gold", 3, seed=2),
                       decision={"outputs": {"prob": {"rule": "threshold", "channel": 1, "threshold": 0.7}}},
                       fidelity={"min_cosine": -1.0, "min_slice_cosine": -1.0},
                       quantize={"float_outputs": ["prob"]})  # its final Softmax stays float16
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode in (0, 4), proc.stderr[-3000:]
    build = Path(json.loads(proc.stdout)["builds"][0]["folder"]) if proc.returncode == 0 else \
        next((tmp_path / "out").glob("*"))
    fid = json.loads(next(build.parent.rglob("fidelity.json")).read_text())
    assert fid["layout"]["kind"] == "declared" and fid["decision"]["task"] == "declared"
    assert set(fid["decision"]["inputs"]) and all("prob" in v["outputs"] for v in fid["decision"]["inputs"].values())
    manifest = json.loads((build / "manifest.json").read_text())
    assert manifest["inputs"]["config"]["resolved"]["decision"]["outputs"]["prob"]["threshold"] == 0.7
    selfcheck = json.loads((build / "selfcheck.json").read_text())
    assert all(d["kind"] == "declared" for e in selfcheck["inputs"] for d in e["decisions"].values())
    assert selfcheck["decision_rules"] == {"prob": {"rule": "threshold", "axis": 1, "channel": 1, "threshold": 0.7,
                                                    "boxes": None}}  # rkdet-selfcheck decides by it
    proc = run_rkdet("diff", str(build / "golden" / "onnx-fp32"), str(build), "--json")
    report = json.loads(proc.stdout)
    assert report["layout"]["kind"] == "declared", proc.stderr
    assert report["agrees"]["decisions_judged"] is True


def test_the_softmax_refusal_offers_what_works_for_a_two_output_model_and_keeps_the_warnings(tmp_path: Path) -> None:
    """The two-head model's Softmax output stays float16: the refusal must not offer classifier-logits
    (convert refuses it for a model with two outputs); the remedy offered converts; and the failed build
    prints the warnings a passing build prints (here toolkit.log's unknown-op-target line)."""
    onnx_path = two_head_model(tmp_path / "face.onnx")
    cfg = write_config(tmp_path / "face.yaml", onnx_path, image_folder(tmp_path / "cal", 6, seed=1),
                       image_folder(tmp_path / "gold", 3, seed=2),
                       fidelity={"min_cosine": -1.0, "min_slice_cosine": -1.0})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 4, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "quantize.float_outputs: [prob]" in last and "classifier-logits" not in last
    warned = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    ok = run_rkdet("convert", "--config", str(write_config(tmp_path / "ok.yaml", onnx_path, tmp_path / "cal",
                                                           tmp_path / "gold", quantize={"float_outputs": ["prob"]},
                                                           fidelity={"min_cosine": -1.0, "min_slice_cosine": -1.0})),
                   "--out", str(tmp_path / "ok"))
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert warned and warned == [ln for ln in ok.stderr.splitlines() if ln.startswith("warning:")]
