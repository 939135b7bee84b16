"""`rkdet import-rknn` (issue 23): a build folder from a `.rknn` built elsewhere, without its ONNX.

The foreign files are real: the tiny conv model built by rknn-toolkit2 2.5.0 and by 2.3.2 (in its
pinned environment, pre-built by .ci/setup), then taken out of their build folders alone. What is
proved: the folder says `origin: imported` with the file's own facts (platform, toolkit version, I/O
with quantization, custom string, content fingerprint), where each preprocessing value came from, no
ONNX or reference (the agrees verdict "not applicable", with the toolkit's own answer about its
simulator); refusals are one line, exit 2, and leave nothing behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
from convert_helpers import run_rkdet
from tiny_models import foreign_rknn, image_folder, toolkit_cache

from rkdet.convert.imported import Given, fed_spec
from rkdet.convert.rknn_file import read_rknn
from rkdet.convert.toolkit_env import env_for, ready
from rkdet.errors import InputError


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{toolkit version: a lone .rknn it built}; the 2.3.2 one needs .ci/setup's pinned environment."""
    os.environ.setdefault("RKDET_TOOLKIT_CACHE", toolkit_cache())
    assert ready(env_for("2.3.2")), "the pinned rknn-toolkit2 2.3.2 environment is missing: run bash .ci/setup"
    work = tmp_path_factory.mktemp("foreign")
    return {"2.5.0": foreign_rknn(work / "a")[0], "2.3.2": foreign_rknn(work / "b", "2.3.2")[0]}


def _one_line(proc) -> str:  # type: ignore[no-untyped-def]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("version", ["2.5.0", "2.3.2"])
def test_a_foreign_rknn_becomes_a_typed_imported_build(foreign: dict[str, Path], version: str, tmp_path: Path) -> None:
    rknn = foreign[version]
    info = read_rknn(rknn)
    assert info.toolkit_version == version  # really built by that toolkit
    gold = image_folder(tmp_path / "gold", 3, seed=7)
    out = tmp_path / "imported"
    proc = run_rkdet("import-rknn", str(rknn), "--inputs", str(gold), "--channel-order", "bgr", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = " ".join(proc.stderr.split())
    assert f"rk3588, rknn-toolkit2 {version}, input x [1, 3, 32, 32] int8" in said
    assert f"scale [{info.inputs[0].scale[0]}] zero point [{info.inputs[0].zero_point[0]}]" in said
    assert "output y: [1, 4, 32, 32]" in said and f"custom string: {info.custom_string!r}" in said
    assert "mean: the model's metadata (build_info attrs)" in said and "channel_order: --channel-order" in said
    assert "agrees with the reference: not applicable" in said
    assert "refuses to run a load_rknn model on its simulator" in said  # the installed toolkit was asked
    m = json.loads((out / "manifest.json").read_text())
    assert m["origin"] == "imported" and m["platform"] == "rk3588"
    assert m["inputs"]["onnx"] is None and m["inputs"]["calibration"] is None and m["golden_outputs"] == {}
    assert m["rknn"]["content_fingerprint"] == info.content_fingerprint and m["rknn"]["sha256"] == info.file_sha256
    assert m["toolchain"]["toolkit"]["version"] == version and m["rknn"]["header"]["toolkit_version"] == version
    assert m["reference"]["agrees"] == "not applicable" and "no FP32 reference" in m["reference"]["reason"]
    assert m["fed_input"]["channel_order"] == "bgr" and m["fed_input"]["std"] == [255.0, 255.0, 255.0]
    assert proc.stdout.strip().endswith(f"content {info.content_fingerprint[:16]}") and m["fingerprint"][:16] in proc.stdout
    assert not (out / "model.onnx").exists() and not (out / "golden" / "simulator").exists()
    assert (out / "model.rknn").read_bytes() == rknn.read_bytes()
    pages = sorted((out / "golden" / "inputs").glob("*.npy"))
    assert len(pages) == 3 and all(np.load(p).shape == (1, 32, 32, 3) and np.load(p).dtype == np.uint8 for p in pages)
    io = json.loads((out / "model.io.json").read_text())
    assert io == {"inputs": [{"name": "x", "shape": [1, 32, 32, 3], "dtype": "uint8", "layout": "nhwc"}], "outputs": ["y"]}
    resolved = json.loads((out / "config.resolved.json").read_text())
    assert resolved["origin"] == "imported" and resolved["tolerances"]["max_abs"] == 0.0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left


def test_npy_inputs_are_fed_as_given(foreign: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    arr = np.random.default_rng(3).integers(0, 256, (1, 32, 32, 3), dtype=np.uint8)
    np.save(tmp_path / "in" / "page.npy", arr)
    out = tmp_path / "b"
    proc = run_rkdet("import-rknn", str(foreign["2.5.0"]), "--inputs", str(tmp_path / "in"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert np.array_equal(np.load(out / "golden" / "inputs" / "page.npy"), arr)
    sources = json.loads((out / "manifest.json").read_text())["fed_input"]["sources"]
    assert sources["channel_order"].startswith("not used: the inputs are .npy")


def test_preprocessing_from_flags_when_the_metadata_has_none(foreign: dict[str, Path]) -> None:
    info = dataclasses.replace(read_rknn(foreign["2.5.0"]), build_info={})  # a file whose metadata keeps no mean/std
    with pytest.raises(InputError, match=r"missing preprocessing: .* no mean or std .* give --mean A,B,C and --std A,B,C"):
        fed_spec(info, Given(channel_order="rgb"), npy_only=False)
    fed = fed_spec(info, Given(mean=(1.0, 2.0, 3.0), std=(4.0, 5.0, 6.0), channel_order="rgb"), npy_only=False)
    assert (fed.mean, fed.std) == ((1.0, 2.0, 3.0), (4.0, 5.0, 6.0))
    assert fed.sources["mean"] == "--mean" and fed.sources["std"] == "--std"


def test_refusals_are_one_line_exit_2_and_leave_nothing(foreign: dict[str, Path], tmp_path: Path) -> None:
    good = foreign["2.5.0"].read_bytes()
    gold = image_folder(tmp_path / "gold", 1, seed=9)
    (tmp_path / "enc.rknn").write_bytes(b"CYPTRKNN" + good[8:])
    (tmp_path / "cut.rknn").write_bytes(good[: len(good) // 2])
    (tmp_path / "other.rknn").write_bytes(good.replace(b"rk3588", b"rk9999"))
    (tmp_path / "bad-npy").mkdir()
    np.save(tmp_path / "bad-npy" / "p.npy", np.zeros((1, 3, 32, 32), np.uint8))
    cases = [
        (["enc.rknn", "--channel-order", "rgb"], "encrypted RKNN (CYPTRKNN) is not supported"),
        (["cut.rknn", "--channel-order", "rgb"], "truncated"),
        (["other.rknn", "--channel-order", "rgb"], "target platform 'rk9999' is unknown to rkdet"),
        ([foreign["2.5.0"]], "missing preprocessing: an .rknn does not record the channel order"),
        ([foreign["2.5.0"], "--channel-order", "rgb", "--mean", "1,2,3"], "--mean 1.0,2.0,3.0 contradicts the model's metadata"),
    ]
    for args, message in cases:
        first, *rest = args
        out = tmp_path / "never"
        proc = run_rkdet("import-rknn", str(tmp_path / first if isinstance(first, str) else first), "--inputs", str(gold),
                         *map(str, rest), "--out", str(out))
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert message in _one_line(proc), (args, proc.stderr)
        assert not out.exists()
    proc = run_rkdet("import-rknn", str(foreign["2.5.0"]), "--inputs", str(tmp_path / "bad-npy"), "--out", str(tmp_path / "never"))
    assert proc.returncode == 2 and "the model is fed uint8 [1, 32, 32, 3] (NHWC)" in _one_line(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad-npy", "cut.rknn", "enc.rknn", "gold", "other.rknn"]
