"""`rkdet convert --search` with the real rknn-toolkit2 2.5.0 on tiny models made here.

The cancelling-conv model (tiny_models.cancelling_conv_model) loses its one fragile conv in INT8 whatever
the algorithm at fidelity.min_cosine 0.98 (normal 0.53, mmse 0.969 on these images); `rkdet layers` names
that conv as the worst single-error layer and float16 for it alone passes. The space is narrowed with
--search-space so each search is a handful of builds (the default space is tested in test_search_space.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from convert_helpers import run_rkdet
from tiny_models import cancelling_conv_model, image_folder, write_config

pytestmark = pytest.mark.slow

SPACE = ("--search-space", "algorithm=normal,mmse", "--search-space", "method=channel",
         "--search-space", "calibration=1", "--search-space", "hybrid=1,2")


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("search")
    return {"onnx": cancelling_conv_model(root / "cancelling.onnx"), "cal": image_folder(root / "cal", 6, seed=1),
            "gold": image_folder(root / "gold", 2, seed=2), "root": root}


def _config(folder: Path, assets: dict[str, Path], **sections) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return write_config(folder / "tiny.yaml", assets["onnx"], assets["cal"], assets["gold"], **sections)


def _search(cfg: Path, out: Path, *extra: str):
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(out), "--search", "--json", *extra, timeout=1200)
    assert not proc.leftovers, proc.leftovers
    return proc


@pytest.fixture(scope="module")
def first_pass(assets):
    cfg = _config(assets["root"] / "first", assets, fidelity={"min_cosine": 0.98})
    out = assets["root"] / "first" / "out"
    return cfg, out, _search(cfg, out, *SPACE)


@pytest.fixture(scope="module")
def search_all(assets):
    cfg = _config(assets["root"] / "all", assets, fidelity={"min_cosine": 0.98})
    out = assets["root"] / "all" / "out"
    return cfg, out, _search(cfg, out, *SPACE, "--search-all")


def test_a_hybrid_layer_fixes_the_fragile_conv(first_pass):
    cfg, out, proc = first_pass
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc == json.loads((out / "search.json").read_text())
    assert doc["schema"] == "rkdet.search/2" and doc["platform"] == "rk3588" and doc["search_all"] is False
    variants = doc["variants"]
    assert [(v["stage"], v["changes"], v["status"]) for v in variants] == [
        ("config", {}, "fail"),
        ("quantize", {"quantize.algorithm": "mmse"}, "fail"),
        ("hybrid", {"quantize.float_layers": ["c2"]}, "pass"),  # stops at the first that passes
    ]
    # `rkdet layers` names the fragile conv as the worst layer by single error: that is the one made float16
    assert doc["worst_single"][0]["rknn_name"] == "c2" and "cancelling_conv" in doc["worst_single"][0]["onnx"]
    assert doc["worst_single"][0]["float16"] == "c2"  # an ONNX layer: asked float16 as itself
    for v in variants:  # every variant: options, per-output fidelity, float layers, fingerprint
        assert re.fullmatch(r"[0-9a-f]{64}", v["fingerprint"])
        assert [g["subject"] for g in v["gates"] if g["gate"] == "cosine"] == ["y"] and "y" in v["slices"]
        assert v["options"]["float_layers"] == v["float_layers"]
        assert v["fidelity_line"].startswith("rk3588: fidelity: cosine y ")
    assert "FAIL" in variants[0]["fidelity_line"]
    assert "FAIL" not in variants[2]["fidelity_line"] and variants[2]["message"] is None
    assert "fidelity gate failed" in variants[0]["message"]
    assert variants[0]["closest"]["margin"] < 0 < variants[2]["closest"]["margin"]
    assert variants[0]["closest"]["value"] < variants[1]["closest"]["value"] < 0.98 <= variants[2]["closest"]["value"]
    assert variants[1]["options"]["algorithm"] == "mmse" and variants[2]["options"]["algorithm"] == "normal"
    assert doc["passed"] == 2 and doc["fingerprint"] == variants[2]["fingerprint"]
    # the passing variant is installed as the build; its manifest says which layers run in float
    manifest = json.loads((out / "tiny-rk3588" / "manifest.json").read_text())
    assert manifest["fingerprint"] == doc["fingerprint"] and manifest["float_layers"] == ["c2"]
    assert manifest["inputs"]["config"]["resolved"]["quantize"]["float_layers"] == ["c2"]
    assert {t["dtype"] for t in manifest["rknn"]["header"]["outputs"]} == {"int8"}  # still a quantized build
    assert not list(out.glob(".search-*")), "the scratch folder is removed"
    # the searched config: the user's plus exactly the changed key, with a comment saying why
    searched = cfg.with_name("tiny.searched.yaml")
    assert doc["searched_config"] == str(searched)
    original = yaml.safe_load(cfg.read_text())
    expected = {**original, "quantize": {**original["quantize"], "float_layers": ["c2"]}}
    assert yaml.safe_load(searched.read_text()) == expected
    line = next(ln for ln in searched.read_text().splitlines() if ln.strip().startswith("float_layers:"))
    assert "# rkdet convert --search: variant 2 (hybrid) passes every fidelity gate" in line
    assert all(ln in searched.read_text().splitlines() for ln in cfg.read_text().splitlines())
    assert "passes" in proc.stderr and str(searched) in proc.stderr.replace("\n", "")


def test_the_searched_config_reproduces_the_fingerprint(first_pass, tmp_path):
    cfg, out, proc = first_pass
    doc = json.loads((out / "search.json").read_text())
    again = run_rkdet("convert", "--config", doc["searched_config"], "--out", str(tmp_path / "again"), "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["builds"][0]["fingerprint"] == doc["fingerprint"]
    # and `rkdet layers` rebuilds the hybrid build as it was built (float layers included)
    layers = run_rkdet("layers", str(tmp_path / "again" / "tiny-rk3588"), "--config", doc["searched_config"],
                       "--out", str(tmp_path), "--json", "--max-inputs", "1")
    assert layers.returncode in (0, 1), layers.stderr[-3000:]
    assert json.loads(layers.stdout)["fingerprint_match"] is True


def test_search_all_tries_every_variant_in_order(first_pass, search_all):
    _, _, first = first_pass
    cfg, out, proc = search_all
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "search.json").read_text())
    variants = doc["variants"]
    assert doc["search_all"] is True
    assert [(v["index"], v["stage"], v["changes"]) for v in variants] == [
        (0, "config", {}), (1, "quantize", {"quantize.algorithm": "mmse"}),
        (2, "hybrid", {"quantize.float_layers": ["c2"]}),
        (3, "hybrid", {"quantize.float_layers": ["c2", doc["worst_single"][1]["float16"]]}),  # the layer asked
    ]
    assert [v["status"] for v in variants[:3]] == ["fail", "fail", "pass"] and variants[3]["status"] in ("pass", "fail")
    # the first passing variant is the one installed and written, whatever passes after it
    assert doc["passed"] == 2
    assert json.loads((out / "tiny-rk3588" / "manifest.json").read_text())["fingerprint"] == variants[2]["fingerprint"]
    # deterministic: the same variants of the same config build to the same fingerprints in another search
    earlier = json.loads(first.stdout)["variants"]
    assert [v["fingerprint"] for v in variants[:3]] == [v["fingerprint"] for v in earlier]


def test_nothing_passes_exit_4_with_how_close(assets, tmp_path):
    cfg = _config(tmp_path, assets, fidelity={"min_cosine": 1.0})  # INT8 or float16, never exactly FP32
    out = tmp_path / "out"
    proc = _search(cfg, out, "--search-space", "algorithm=normal", "--search-space", "method=channel",
                   "--search-space", "calibration=1", "--search-space", "hybrid=1")
    assert proc.returncode == 4, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("rkdet: rk3588: no variant of the search space passes every fidelity gate (2 tried")
    assert "search.json" in last
    doc = json.loads((out / "search.json").read_text())
    assert doc == json.loads(proc.stdout)
    assert doc["passed"] is None and doc["searched_config"] is None and doc["fingerprint"] is None
    assert [(v["stage"], v["status"]) for v in doc["variants"]] == [("config", "fail"), ("hybrid", "fail")]
    assert all(v["closest"]["gate"] == "cosine" and v["closest"]["margin"] < 0 for v in doc["variants"])
    assert "margin" in proc.stderr  # the table says how close each came
    assert not cfg.with_name("tiny.searched.yaml").exists()
    assert sorted(p.name for p in out.iterdir()) == ["search.json"]  # no build, no scratch left


def test_float_layers_name_real_layers_and_never_all_of_them(assets, tmp_path):
    cfg = _config(tmp_path, assets, quantize={"float_layers": ["no_such_layer"]})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert "quantize.float_layers names no layer of this build: 'no_such_layer'" in line
    names = re.search(r"\(layers: ([^)]*)\)", line).group(1).split(", ")
    assert "c2" in names
    # naming every layer is a whole-float build: quantize.force_fp16: false forbids it
    cfg = _config(tmp_path, assets, quantize={"float_layers": names})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "whole-float build, which quantize.force_fp16: false forbids" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out" / "tiny-rk3588").exists()
