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
    proc = run_rkdet("diff", str(build / "golden" / "onnx-fp32"), str(build), "--json")
    report = json.loads(proc.stdout)
    assert report["layout"]["kind"] == "declared", proc.stderr
    assert report["agrees"]["decisions_judged"] is True
