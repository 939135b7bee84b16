"""rkdet-run checks that the model is the build deploy pushed: by the build fingerprint rkdet convert embeds
in the .rknn (read from the file's bytes: RKNNLite has no custom-string query), else by sha256; it refuses
with exit 5 and says which check it did in run.json, with the runtime stack it ran on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rkdet.convert.manifest import EMBED_KEY, embedded_custom_string
from rkdet.convert.rknn_file import read_rknn
from rkdet.errors import InputError
from rkdet.onboard.exits import EXIT_MODEL_REFUSED
from rkdet.onboard.identity import read_rknn_facts
from runner_helpers import assert_one_line_error, make_rknn_dir, make_inputs, run_cli, with_double


@pytest.fixture(scope="module")
def on_board(default_build: Path, tmp_path_factory) -> tuple[Path, Path, dict]:
    """The build's model as deploy lays it out for the emulated runtime, two golden inputs, the manifest."""
    manifest = json.loads((default_build / "manifest.json").read_text())
    folder = tmp_path_factory.mktemp("model")
    for name in ("model.rknn", "model.onnx", "model.io.json"):
        shutil.copyfile(default_build / name, folder / name)
    fed = manifest["fed_input"]
    (folder / "model.emu.json").write_text(json.dumps({"mean": fed["mean"], "std": fed["std"], "input_layout": "nchw"}))
    inputs = folder / "inputs"
    inputs.mkdir()
    for page in sorted((default_build / "golden" / "inputs").glob("*.npy"))[:1]:
        shutil.copyfile(page, inputs / page.name)
    return folder / "model.rknn", inputs, manifest


def test_the_build_embeds_its_model_fingerprint(on_board) -> None:
    model, _, manifest = on_board
    info = read_rknn(model)
    assert manifest["embedded_fingerprint"] == manifest["model_fingerprint"]
    assert info.custom_string == f"{EMBED_KEY}{manifest['model_fingerprint']}" == manifest["rknn"]["custom_string"]
    facts = read_rknn_facts(str(model))  # the runner's own reader agrees with the host's
    assert facts["embedded_fingerprint"] == manifest["model_fingerprint"]
    assert facts["toolkit_version"] == info.toolkit_version and facts["format_version"] == info.format_version


def test_user_custom_string_comes_first_and_is_bounded() -> None:
    fp = "ab" * 32
    assert embedded_custom_string(None, fp) == f"rkdet-fp={fp}"
    assert embedded_custom_string("cam=front", fp) == f"cam=front;rkdet-fp={fp}"
    with pytest.raises(InputError, match="toolkit.custom_string .* shorten it"):
        embedded_custom_string("x" * 1000, fp)


def test_matching_fingerprint_runs_and_run_json_says_how_it_was_checked(on_board, tmp_path: Path) -> None:
    model, inputs, manifest = on_board
    out = tmp_path / "out"
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", out,
                    "--expect-fingerprint", manifest["embedded_fingerprint"],
                    "--expect-sha256", "0" * 64], env=with_double())  # the sha256 is not the check used
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["model_check"]["by"] == "embedded-fingerprint"
    assert run["model_check"]["found"] == manifest["embedded_fingerprint"] == run["embedded_fingerprint"]
    stack = run["stack"]
    assert stack["model_toolkit"] == manifest["rknn"]["header"]["toolkit_version"] and stack["model_format"] == 6
    assert stack["python"] and stack["numpy"] and stack["rknn_toolkit_lite"] == "2.5.0+rkdet.emulated"
    assert "API:" in stack["sdk_version"] and "DRV:" in stack["sdk_version"]


def test_another_fingerprint_is_refused_before_anything_runs(on_board, tmp_path: Path) -> None:
    model, inputs, manifest = on_board
    out = tmp_path / "out"
    wrong = "f" * 64
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", out,
                    "--expect-fingerprint", wrong], env=with_double())
    assert_one_line_error(proc, EXIT_MODEL_REFUSED)
    assert manifest["embedded_fingerprint"][:16] in proc.stderr and wrong[:16] in proc.stderr
    assert "not the build deploy pushed" in proc.stderr and not out.exists()


def test_a_tampered_embedded_fingerprint_is_refused(on_board, tmp_path: Path) -> None:
    model, inputs, manifest = on_board
    fp = manifest["embedded_fingerprint"]
    folder = tmp_path / "m"
    shutil.copytree(model.parent, folder)
    data = (folder / "model.rknn").read_bytes()
    forged = ("0" if fp[0] != "0" else "1") + fp[1:]
    (folder / "model.rknn").write_bytes(data.replace(fp.encode(), forged.encode()))
    proc = run_cli(["--model", folder / "model.rknn", "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "o",
                    "--expect-fingerprint", fp], env=with_double())
    assert_one_line_error(proc, EXIT_MODEL_REFUSED)


def test_without_an_embedded_fingerprint_the_sha256_is_checked(tmp_path: Path) -> None:
    model = make_rknn_dir(tmp_path / "model")  # a placeholder .rknn: nothing embedded
    inputs = make_inputs(tmp_path / "inputs", count=1, nhwc_uint8=True)
    import hashlib
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "ok",
                    "--expect-fingerprint", "a" * 64, "--expect-sha256", sha], env=with_double())
    assert proc.returncode == 0, proc.stderr
    check = json.loads((tmp_path / "ok" / "run.json").read_text())["model_check"]
    assert check["by"] == "sha256" and check["found"] == sha and "not a toolkit2 .rknn" in check["why"]
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "1", "--out", tmp_path / "no",
                    "--expect-sha256", "b" * 64], env=with_double())
    assert_one_line_error(proc, EXIT_MODEL_REFUSED)
    assert "sha256" in proc.stderr and sha[:16] in proc.stderr


@pytest.mark.parametrize("flag", ["--expect-fingerprint", "--expect-sha256"])
def test_malformed_expectation_is_bad_input(flag: str, tmp_path: Path) -> None:
    model = make_rknn_dir(tmp_path / "model")
    proc = run_cli(["--model", model, "--inputs", tmp_path, "--repeats", "1", "--out", tmp_path / "o", flag, "XYZ"],
                   env=with_double())
    assert proc.returncode == 2 and "64 lowercase hex" in proc.stderr
