"""Real rknn-toolkit2 builds of tiny models: fingerprints are stable and sensitive; no partial output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from convert_helpers import RKDET, REPO, run_rkdet
from process_tree import leftovers, tree_argv

pytestmark = pytest.mark.slow


def _build(config: Path, out: Path, *extra: str) -> dict:
    proc = run_rkdet("convert", "--config", str(config), "--out", str(out), "--json", *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)["builds"][0]


@pytest.fixture(scope="module")
def first_build(tiny_build):
    """The shared tiny build (conftest `tiny_build`): (convert's summary of it, the folder of its config)."""
    cfg, build = tiny_build
    return build, cfg.parent


def test_build_folder_is_complete(first_build):
    build, _ = first_build
    folder = Path(build["folder"])
    names = {p.name for p in folder.iterdir()}
    assert {"model.rknn", "model.onnx", "manifest.json", "fidelity.json", "golden", "toolkit.log",
            "config.resolved.json"} <= names
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["schema"] == "rkdet.manifest/2"
    assert manifest["fingerprint"] == build["fingerprint"]
    assert manifest["rknn"]["header"]["target_platform"] == "rk3588"
    assert manifest["rknn"]["header"]["toolkit_version"] == "2.5.0"
    assert all(t["dtype"] == "int8" for t in manifest["rknn"]["header"]["outputs"])
    assert manifest["inputs"]["config"]["resolved"]["toolkit"]["optimization_level"] == 0
    assert len(manifest["inputs"]["calibration"]) == 6 and len(manifest["inputs"]["golden"]) == 2
    assert "created_unix" not in manifest  # no wall-clock time without SOURCE_DATE_EPOCH
    assert manifest["environment"]["hermetic"]["env"]["PYTHONHASHSEED"] == "0"
    # the model fingerprint is exactly its recorded identity (rkdet.convert.identity, the one definition)
    from rkdet.convert.identity import ModelIdentity

    identity = ModelIdentity.from_dict(manifest["model_identity"], "manifest.json")
    assert identity.fingerprint == manifest["model_fingerprint"] == manifest["embedded_fingerprint"]
    assert len(identity.calibration) == 6 and identity.options["config"]["target_platform"] == "rk3588"
    # golden result sets: one line per golden input, outputs content-addressed
    for backend in ("simulator", "onnx-fp32"):
        lines = (folder / "golden" / backend / "index.jsonl").read_text().splitlines()
        assert len(lines) == 2
        for line in lines:
            rec = json.loads(line)
            for out in rec["outputs"]:
                assert (folder / "golden" / backend / "outputs" / f"{out['hash']}.npy").is_file()
    fed = np.load(next((folder / "golden" / "inputs").glob("*.npy")))
    assert fed.dtype == np.uint8 and fed.shape == (1, 32, 32, 3)


@pytest.fixture(scope="module")
def verified_again(tiny_assets, tmp_path_factory) -> dict:
    """A second convert of the shared tiny build's inputs (its own config file and out folder), with --verify:
    the same-inputs test compares its build with the first, the verify test reads its verify record (one
    convert for both: the build --verify installs is the convert's own, its rebuild only checks it)."""
    from tiny_models import write_config

    tmp = tmp_path_factory.mktemp("again")
    cfg = write_config(tmp / "again.yaml", tiny_assets["onnx"], tiny_assets["cal"], tiny_assets["gold"])
    return _build(cfg, tmp / "out", "--verify")


def test_same_inputs_same_fingerprint(first_build, verified_again):
    build, _ = first_build
    again = verified_again
    assert again["fingerprint"] == build["fingerprint"]
    a = json.loads((Path(build["folder"]) / "manifest.json").read_text())
    b = json.loads((Path(again["folder"]) / "manifest.json").read_text())
    assert a["golden_outputs"] == b["golden_outputs"]


@pytest.mark.parametrize("change, section", [("weights", "onnx"), ("quant_method", "toolkit option"),
                                             ("algorithm", "toolkit option"), ("mean", "toolkit option")])
def test_anything_that_matters_changes_the_fingerprint(first_build, tiny_assets, tmp_path, change, section):
    """Each input the model fingerprint covers changes it. Asked of `--check-against` (the model identity is
    compared before any toolkit run, so nothing is built); that it is the fingerprint `convert` writes is
    test_check_against's `test_a_changed_calibration_image_is_named`, and the target is a real build below."""
    from tiny_models import write_config

    build, _ = first_build
    onnx_path = tiny_assets["onnx_seed1"] if change == "weights" else tiny_assets["onnx"]
    sections = {
        "weights": {},
        "quant_method": {"quantize": {"dataset": str(tiny_assets["cal"]), "method": "layer"}},
        "algorithm": {"quantize": {"dataset": str(tiny_assets["cal"]), "algorithm": "mmse"}},
        "mean": {"preprocess": {"mean": [10, 10, 10]}},
    }[change]
    cfg = write_config(tmp_path / "c.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"], **sections)
    proc = run_rkdet("convert", "--config", str(cfg), "--check-against", build["folder"], "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    manifest = json.loads((Path(build["folder"]) / "manifest.json").read_text())
    assert report["model_fingerprint"]["build"] == manifest["model_fingerprint"]
    assert report["model_fingerprint"]["here"] != manifest["model_fingerprint"] and report["rebuilt"] is False
    assert section in [d["section"] for d in report["differences"]]


def test_another_target_is_another_build(first_build, tiny_assets, tmp_path):
    from tiny_models import write_config

    build, _ = first_build
    cfg = write_config(tmp_path / "c.yaml", tiny_assets["onnx"], tiny_assets["cal"], tiny_assets["gold"],
                       target={"platforms": ["rk3568"]})
    other = _build(cfg, tmp_path / "out")
    assert other["fingerprint"] != build["fingerprint"]
    manifest = json.loads((Path(other["folder"]) / "manifest.json").read_text())
    assert manifest["model_identity"]["platform"] == "rk3568"


def test_force_fp16_builds_float(tiny_assets, tmp_path):
    from tiny_models import write_config

    cfg = write_config(tmp_path / "c.yaml", tiny_assets["onnx"], tiny_assets["cal"], tiny_assets["gold"],
                       quantize={"dataset": str(tiny_assets["cal"]), "force_fp16": True})
    build = _build(cfg, tmp_path / "out")
    header = json.loads((Path(build["folder"]) / "manifest.json").read_text())["rknn"]["header"]
    assert all(t["dtype"].startswith("float") for t in header["outputs"])


def test_verify_reports_bytes_and_fingerprint_separately(verified_again):
    build = verified_again
    verify = build["verify"]
    assert verify["fingerprint_identical"] is True
    assert verify["simulator_outputs_identical"] is True
    assert verify["content_fingerprint_identical"] is True
    assert verify["differing_stable_sections"] == []
    assert isinstance(verify["rknn_bytes_identical"], bool)
    saved = json.loads((Path(build["folder"]) / "verify.json").read_text())
    assert saved == verify


# A rebuild of the same inputs replaces the build in place (nothing else left in --out): asserted by
# test_failed_builds.py::test_a_build_of_another_fingerprint_is_not_replaced_without_force, whose second
# convert is that rebuild (one convert for both claims).


def test_interrupted_convert_leaves_nothing(tiny_config, tmp_path):
    out = tmp_path / "out"
    report = tmp_path / "tree.json"
    proc = subprocess.Popen(tree_argv([*RKDET, "convert", "--config", str(tiny_config()), "--out", str(out)], report),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.startswith(".tiny-rk3588.tmp") for p in out.glob(".*")):
        time.sleep(0.05)
    assert proc.poll() is None, "convert finished before it could be interrupted"
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert list(out.iterdir()) == []
    left = leftovers(report)  # this convert's own process tree, not every process on the machine
    assert left == [], f"processes of the interrupted convert outlived it (an early-started toolkit worker?): {left}"


def test_user_custom_string_and_embedded_fingerprint(first_build, tiny_assets, tmp_path):
    """toolkit.custom_string: the user's text first, then rkdet's `;rkdet-fp=<model fingerprint>`; the
    user's text is a toolkit option, so it changes the fingerprints; the default build embeds its own alone.
    The custom string is provenance: the .rknn content fingerprint leaves it out."""
    from tiny_models import write_config

    from rkdet.convert.rknn_file import read_rknn

    build, _ = first_build
    first = json.loads((Path(build["folder"]) / "manifest.json").read_text())
    assert first["embedded_fingerprint"] == first["model_fingerprint"]
    assert read_rknn(Path(build["folder"]) / "model.rknn").custom_string == f"rkdet-fp={first['model_fingerprint']}"
    cfg = write_config(tmp_path / "c.yaml", tiny_assets["onnx"], tiny_assets["cal"], tiny_assets["gold"],
                       toolkit={"custom_string": "camera=front;rev=7"})
    other = _build(cfg, tmp_path / "out")
    manifest = json.loads((Path(other["folder"]) / "manifest.json").read_text())
    fp = manifest["model_fingerprint"]
    assert fp != first["model_fingerprint"] and other["fingerprint"] != build["fingerprint"]
    assert manifest["embedded_fingerprint"] == fp
    assert read_rknn(Path(other["folder"]) / "model.rknn").custom_string == f"camera=front;rev=7;rkdet-fp={fp}"
    assert manifest["rknn"]["custom_string"] == f"camera=front;rev=7;rkdet-fp={fp}"
    # another (longer) custom string, the same model: the same .rknn content fingerprint
    assert manifest["rknn"]["content_fingerprint"] == first["rknn"]["content_fingerprint"]
