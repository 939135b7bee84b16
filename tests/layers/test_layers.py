"""`rkdet layers` with the real rknn-toolkit2 2.5.0: it names the ONNX node that INT8 cannot carry,
says "within" for a model without loss, and refuses a build folder missing what it needs (one line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convert_helpers import run_rkdet
from layer_models import fragile_model
from tiny_models import conv_model, image_folder, write_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layer-images")
    return {"cal": image_folder(root / "cal", 6, seed=1), "gold": image_folder(root / "gold", 2, seed=2)}


def _convert(tmp: Path, onnx_path: Path, images: dict[str, Path], *extra: str) -> tuple[Path, Path]:
    cfg = write_config(tmp / "tiny.yaml", onnx_path, images["cal"], images["gold"])
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp / "out"), "--json", *extra)
    assert proc.returncode in (0, 4), proc.stderr[-3000:]
    return cfg, tmp / "out" / "tiny-rk3588"


@pytest.fixture(scope="module")
def fragile(tmp_path_factory, images):
    tmp = tmp_path_factory.mktemp("fragile")
    cfg, _ = _convert(tmp, fragile_model(tmp / "fragile.onnx"), images, "--keep-failed")
    return cfg, tmp


def test_failed_build_kept_by_convert(fragile):
    """The fidelity gate refuses the fragile build; the folder --keep-failed keeps is either complete
    enough for `rkdet layers` (then it names the node) or refused in one line naming what is missing."""
    cfg, tmp = fragile
    failed = tmp / "out" / "tiny-rk3588.failed"
    assert failed.is_dir()
    needed = ("manifest.json", "config.resolved.json", "model.onnx")
    missing = [n for n in needed if not (failed / n).is_file()]
    proc = run_rkdet("layers", str(failed), "--config", str(cfg), "--out", str(tmp), "--json")
    if missing:
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and f"missing {', '.join(missing)}" in lines[0] and "--config" in lines[0]
    else:
        assert proc.returncode == 1, proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
        assert doc["layers"][doc["first_loss"]]["onnx"]["node"] == "cancel"


def test_fragile_model_names_the_cancelling_sub(fragile):
    cfg, tmp = fragile
    html = tmp / "layers.html"
    proc = run_rkdet("layers", "--config", str(cfg), "--out", str(tmp), "--json", "--html", str(html))
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc == json.loads((tmp / "layers.json").read_text())
    assert doc["schema"] == "rkdet.layers/1" and doc["verdict"] == "loss"
    layers = doc["layers"]
    first = layers[doc["first_loss"]]
    assert first["onnx"]["node"] == "cancel" and first["onnx"]["op_type"] == "Sub" and first["fused"] == []
    assert first["entire"]["cosine"] < doc["min_layer_cosine"]
    # the layers before it (the huge-scale convs included) are within the threshold: it is the first
    assert all(x["entire"]["cosine"] >= doc["min_layer_cosine"] for x in layers[:doc["first_loss"]])
    worst = layers[doc["worst_single"][0]]
    assert worst["onnx"]["node"] == "cancel"
    # the head after it inherits the loss (entire) but is fine alone (single): not a culprit
    head = [x for x in layers if x["onnx"]["node"] == "head"]
    assert head and all(x["single"]["cosine"] > 0.99 > x["entire"]["cosine"] for x in head)
    # the toolkit-inserted input conversion maps back to the graph input; graph order is kept
    kinds = {x["rknn_name"]: x["onnx"]["kind"] for x in layers}
    assert kinds["x"] == "input" and kinds["x_int8"] == "derived"
    assert [x["index"] for x in layers] == list(range(len(layers)))
    assert doc["fingerprint_match"] is None  # from a config: nothing to compare with
    # the analysed inputs are the golden ones whose outputs stray furthest from FP32, worst first
    ranking = doc["output_cosine"]
    assert len(ranking) == 2 and doc["inputs"] == sorted(ranking, key=lambda n: (ranking[n], n))
    assert "loss located" in proc.stderr and "cancel (Sub)" in proc.stderr
    page = html.read_text()
    assert "cancel (Sub)" in page and "data:image/png;base64," in page and "first loss" in page


def test_fragile_build_folder_rebuilds_to_the_same_fingerprint(fragile, images):
    """The convert gate keeps the fragile build out (--keep-failed keeps it); its folder is analysable."""
    _, tmp = fragile
    cfg = write_config(tmp / "lenient.yaml", tmp / "fragile.onnx", images["cal"], images["gold"],
                       fidelity={"min_cosine": -1.0, "min_slice_cosine": -1.0, "min_score_recall": 0.0})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = Path(json.loads(proc.stdout)["builds"][0]["folder"])
    # a published build names its model and images without their location: said in one line
    alone = run_rkdet("layers", str(build), "--json")
    assert alone.returncode == 2 and "without its location" in alone.stderr and "--config" in alone.stderr
    assert alone.stderr.count("\n") == 1, alone.stderr
    proc = run_rkdet("layers", str(build), "--config", str(cfg), "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["fingerprint_match"] is True, (doc["fingerprint"], doc["build_fingerprint"])
    assert doc["build_fingerprint"] == json.loads((build / "manifest.json").read_text())["fingerprint"]
    assert "equals the build's" in proc.stderr
    assert doc["layers"][doc["first_loss"]]["onnx"]["node"] == "cancel"
    assert (build / "layers.json").is_file()


def test_clean_model_is_within(tmp_path, images):
    """From a config alone: `rkdet layers --config` makes its own build of it (no convert first)."""
    cfg = write_config(tmp_path / "tiny.yaml", conv_model(tmp_path / "clean.onnx"), images["cal"], images["gold"])
    proc = run_rkdet("layers", "--config", str(cfg), "--out", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "within" and doc["first_loss"] is None
    measured = [x for x in doc["layers"] if x["op"] != "Input"]
    assert measured and min(x["entire"]["cosine"] for x in measured) >= doc["min_layer_cosine"]
    # rkdet's own entire cosine (from the dumps) agrees with the toolkit's table
    for x in measured:
        assert x["entire"]["rel_l2"] is not None and x["entire"]["max_abs"] is not None


@pytest.mark.parametrize("missing", ["manifest.json", "config.resolved.json", "model.onnx"])
def test_build_folder_missing_a_piece_is_one_line_exit_2(tmp_path, missing):
    folder = tmp_path / "tiny-rk3588"
    folder.mkdir()
    for name in ("manifest.json", "config.resolved.json", "model.onnx"):
        if name != missing:
            (folder / name).write_text("{}")
    proc = run_rkdet("layers", str(folder))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"missing {missing}" in lines[0] and "Traceback" not in proc.stderr


def test_not_a_folder_and_no_source_are_exit_2(tmp_path):
    proc = run_rkdet("layers", str(tmp_path / "nope"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "does not exist" in proc.stderr
    proc = run_rkdet("layers")
    assert proc.returncode == 2 and "give a build folder" in proc.stderr


def test_unwritable_out_is_one_line_exit_2_before_any_build(fragile):
    cfg, tmp = fragile
    blocker = tmp / "a-file"
    blocker.write_text("not a folder")
    proc = run_rkdet("layers", "--config", str(cfg), "--out", str(blocker / "sub"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not writable" in lines[0] and "Traceback" not in proc.stderr
