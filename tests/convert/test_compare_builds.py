"""`rkdet compare-builds` and `rkdet convert --toolkit 2.3.2,2.5.0` (issue 23): the tiny model built by two real
toolkits (2.3.2 in its pinned environment, pre-built by .ci/setup), and by one toolkit from two weight seeds.

What is proved: the matrix makes one build per toolkit (each manifest records its toolkit) and writes the
comparison; the comparison names what changed by category (the toolkit's identity, weights), compares the
golden outputs bitwise and numerically with decisions (rkdet diff's comparison, its HTML presenter beside
the page), exits 0 for the same build, 1 for different ones, 2 (one line) for trouble.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from convert_helpers import run_rkdet
from tiny_models import conv_model, image_folder, toolkit_cache, write_config


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    os.environ.setdefault("RKDET_TOOLKIT_CACHE", toolkit_cache())
    work = tmp_path_factory.mktemp("matrix")
    cal, gold = image_folder(work / "cal", 4, seed=1), image_folder(work / "gold", 2, seed=2)
    cfg = write_config(work / "tiny.yaml", conv_model(work / "tiny.onnx"), cal, gold)
    proc = run_rkdet("convert", "--config", str(cfg), "--toolkit", "2.3.2,2.5.0", "--out", str(work / "out"), "--json")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    other = write_config(work / "seed.yaml", conv_model(work / "seed.onnx", seed=5), cal, gold)
    made = run_rkdet("convert", "--config", str(other), "--out", str(work / "seed"), "--json")
    assert made.returncode == 0, made.stderr[-3000:]
    return proc, work, Path(json.loads(made.stdout)["builds"][0]["folder"])


def test_the_matrix_builds_once_per_toolkit_and_compares(matrix) -> None:  # type: ignore[no-untyped-def]
    proc, work, _ = matrix
    summary = json.loads(proc.stdout)
    assert summary["toolkits"] == ["2.3.2", "2.5.0"]
    folders = {v: Path(b[0]["folder"]) for v, b in summary["builds"].items()}
    for v, folder in folders.items():
        assert folder.parent == work / "out" / f"toolkit-{v}"
        m = json.loads((folder / "manifest.json").read_text())
        assert m["model_identity"]["toolkit"]["version"] == v and m["rknn"]["header"]["toolkit_version"] == v
    [comp] = summary["comparisons"]
    assert (comp["a"], comp["b"], comp["platform"]) == ("2.3.2", "2.5.0", "rk3588")
    assert proc.returncode == (0 if comp["same"] else 1)
    report = json.loads(Path(comp["report"]).read_text())
    assert report["schema"] == "rkdet.compare-builds/1" and report["verdict"] == comp["verdict"]
    changes = {(c["category"], c["name"]): c["detail"] for c in report["content"]["changes"]}
    assert changes[("metadata (toolkit version)", "toolkit version")] == "2.3.2 -> 2.5.0"
    assert report["content"]["fingerprint_identical"] is False  # the toolkit's version is part of the file
    a_m, b_m = (json.loads((folders[v] / "manifest.json").read_text()) for v in ("2.3.2", "2.5.0"))
    for out in report["outputs"]:
        assert out["applicable"] is True
        assert out["bitwise_identical"] == (a_m["golden_outputs"][out["kind"]] == b_m["golden_outputs"][out["kind"]])
        assert out["diff"]["schema"] == "rkdet.diff/3"
    # the names docs/UPGRADE.md promises (issue 36: `.0` of 2.5.0 was eaten as a suffix, the platform missing)
    written = sorted(p.name for p in (work / "out").iterdir() if p.is_file())
    assert written == ["compare-2.3.2-vs-2.5.0-rk3588-onnx-fp32.html", "compare-2.3.2-vs-2.5.0-rk3588-simulator.html",
                       "compare-2.3.2-vs-2.5.0-rk3588.html", "compare-2.3.2-vs-2.5.0-rk3588.json"]
    assert Path(comp["report"]) == work / "out" / "compare-2.3.2-vs-2.5.0-rk3588.json"
    page = work / "out" / "compare-2.3.2-vs-2.5.0-rk3588.html"
    assert "Model content" in page.read_text() and 'href="compare-2.3.2-vs-2.5.0-rk3588-simulator.html"' in page.read_text()


def test_same_build_is_exit_0_other_weights_exit_1(matrix, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc, work, seeded = matrix
    a = Path(json.loads(proc.stdout)["builds"]["2.5.0"][0]["folder"])
    same = run_rkdet("compare-builds", str(a), str(a))
    assert same.returncode == 0, same.stderr[-2000:]
    assert "SAME: identical model content and bit-identical outputs" in same.stdout
    diff = run_rkdet("compare-builds", str(a), str(seeded), "--json", "--html", str(tmp_path / "c.html"))
    assert diff.returncode == 1, diff.stderr[-2000:]
    doc = json.loads(diff.stdout)
    cats = {c["category"] for c in doc["content"]["changes"]}
    assert "weights and constants" in cats and doc["content"]["program_identical"] is False
    sim = next(o for o in doc["outputs"] if o["kind"] == "simulator")
    assert sim["bitwise_identical"] is False and sim["diff"]["agrees"]["max_abs"] > 0
    assert doc["decisions_changed"] is None  # a tiny conv net: no decoder ran, so not judged (never a false 0)
    assert (tmp_path / "c-onnx-fp32.html").is_file() and "DIFFERENT" in (tmp_path / "c.html").read_text()


def test_trouble_is_one_line_exit_2(matrix, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc, work, _ = matrix
    a = Path(json.loads(proc.stdout)["builds"]["2.5.0"][0]["folder"])
    gold = image_folder(tmp_path / "gold", 1, seed=11)
    cfg = write_config(tmp_path / "t.yaml", conv_model(tmp_path / "t.onnx"), work / "cal", gold)
    made = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "b"), "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    other = Path(json.loads(made.stdout)["builds"][0]["folder"])
    for args, message in (([str(a), str(tmp_path / "nowhere")], "no manifest.json"),
                          ([str(a), str(other)], "not the same golden inputs")):
        p = run_rkdet("compare-builds", *args)
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("rkdet: ")]
        assert p.returncode == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in p.stderr, p.stderr
