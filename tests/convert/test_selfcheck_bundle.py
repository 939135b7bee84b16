"""The self-check bundle `rkdet convert` writes (selfcheck.json), and rkdet-selfcheck's verdicts on the host.

The board-side runs (emulated RKNNLite over real sshd) are in tests/deploy/test_selfcheck_board.py; here
the writer is checked against the build it came from, and the reader against crafted bundles, with the
real onnxruntime as the runtime (the bundle's onnx-fp32 reference).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from rkdet.onboard import bundle as bundle_format
from rkdet.onboard import program, reference, selfcheck
from rkdet.convert import golden
from rkdet.records.manifest import read_manifest
from rkdet.convert.selfcheck_bundle import DEFAULT_CAP_BYTES, decision_summary, write_bundle
from rkdet.errors import ConversionError
from rkdet.onboard.hashing import file_sha256, output_hash
from rkdet.onboard.resultset import read_index

PACKAGE = Path(program.HERE)  # rkdet/onboard/, the on-board program


def _golden_outputs(build: Path, ref: str, name: str) -> list[tuple[str, np.ndarray]]:
    record = next(r for r in read_index(str(build / "golden" / ref)) if r["input"] == name)
    return [(o["name"], np.load(build / "golden" / ref / "outputs" / f"{o['hash']}.npy")) for o in record["outputs"]]


@pytest.fixture(scope="module")
def bundle_doc(default_build: Path) -> dict:
    return json.loads((default_build / "selfcheck.json").read_text())


def _write(tmp_path: Path, doc: dict, name: str = "selfcheck.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_convert_writes_a_bundle_true_to_its_build(default_build: Path, bundle_doc: dict) -> None:
    manifest = json.loads((default_build / "manifest.json").read_text())
    doc = bundle_doc
    assert doc["schema"] == bundle_format.BUNDLE_SCHEMA == "rkdet.selfcheck/1"
    assert doc["fingerprint"] == manifest["fingerprint"] and doc["platform"] == manifest["platform"]
    assert doc["models"]["rknnlite"] == {"file": "model.rknn", "sha256": manifest["rknn"]["sha256"]}
    assert doc["models"]["onnxruntime"]["sha256"] == manifest["inputs"]["onnx_prepared"]["sha256"]
    assert sorted(doc["references"]) == ["onnx-fp32", "simulator"]
    size = (default_build / "selfcheck.json").stat().st_size
    assert size <= DEFAULT_CAP_BYTES
    pages = sorted((default_build / "golden" / "inputs").glob("*.npy"))
    names = [e["name"] for e in doc["inputs"]]
    assert doc["golden_inputs"] == len(pages) and 1 <= len(names) < len(pages)
    assert names == [p.stem for p in pages[:len(names)]]  # sorted order, a prefix
    for entry, page in zip(doc["inputs"], pages):
        tensor = bundle_format.decode_array(entry["tensor"], "t")
        assert tensor.dtype == np.uint8 and np.array_equal(tensor, np.load(page))
        for ref in ("simulator", "onnx-fp32"):
            expected = entry["expected"][ref]
            assert {o["name"]: o["hash"] for o in expected} == manifest["golden_outputs"][ref][entry["name"]]
            outputs = _golden_outputs(default_build, ref, entry["name"])
            for (name, array), out in zip(outputs, expected):
                assert out["name"] == name and np.array_equal(bundle_format.decode_array(out, name), array)
            assert entry["decisions"][ref] == json.loads(json.dumps(decision_summary(outputs)))
        fp32 = entry["decisions"]["onnx-fp32"]
        assert fp32["kind"] == "yolov8-split" and fp32["detections"]  # a document page: layout boxes found


def test_the_cap_chooses_how_many_inputs(default_build: Path, tmp_path: Path) -> None:
    build = tmp_path / "b"
    build.mkdir()
    for name in ("manifest.json", "model.io.json"):
        shutil.copy2(default_build / name, build / name)
    shutil.copytree(default_build / "golden", build / "golden")
    manifest = read_manifest(build / "manifest.json")
    one = write_bundle(build, manifest, cap_bytes=1)
    assert one.inputs == [sorted(p.stem for p in (build / "golden" / "inputs").glob("*.npy"))[0]]
    assert one.size == (build / "selfcheck.json").stat().st_size and one.golden_inputs == 8
    every = write_bundle(build, manifest, cap_bytes=bundle_format.MAX_BUNDLE_BYTES)
    assert len(every.inputs) == 8 and every.size > one.size * 6
    assert not [p for p in build.iterdir() if ".tmp" in p.name]  # the atomic writer left no temp file
    for bad in (0, bundle_format.MAX_BUNDLE_BYTES + 1):
        with pytest.raises(ConversionError, match="cap"):
            write_bundle(build, manifest, cap_bytes=bad)


def test_fp32_input_is_the_golden_transform_bit_for_bit(default_build: Path) -> None:
    assert golden.to_model_input is reference.fp32_input  # one definition
    page = np.load(sorted((default_build / "golden" / "inputs").glob("*.npy"))[0])
    for mean, std in (((0.0, 0.0, 0.0), (255.0, 255.0, 255.0)), ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375))):
        ours = reference.fp32_input(page, mean, std)
        theirs = golden.to_model_input(page, mean, std)
        assert output_hash(ours) == output_hash(theirs)


def test_onnxruntime_on_the_host_is_identical_to_onnx_fp32(default_build: Path, bundle_doc: dict) -> None:
    result = selfcheck.check(str(default_build / "model.onnx"), str(default_build / "selfcheck.json"),
                             backend="onnxruntime")
    assert result.ok and result.exit_code == 0 and result.status == "identical", result.line
    assert result.reference == "onnx-fp32" and result.emulated is False and result.inputs == len(bundle_doc["inputs"])
    assert result.line.startswith("IDENTICAL to onnx-fp32: 2 inputs x 6 outputs")
    assert result.decisions == {e["name"]: e["decisions"]["onnx-fp32"] for e in bundle_doc["inputs"]}
    assert reference.reference_for("rknnlite", emulated=False) == "simulator"
    assert reference.reference_for("rknnlite", emulated=True) == "onnx-fp32"


def test_a_core_mask_for_onnxruntime_is_a_usage_error(default_build: Path) -> None:
    result = selfcheck.check(str(default_build / "model.onnx"), str(default_build / "selfcheck.json"),
                             backend="onnxruntime", core_mask="0_1")
    assert (result.exit_code, result.status) == (2, "usage") and "--core-mask 0_1 applies only" in result.line


def _reencode_with_flipped_bit(doc: dict, input_index: int, output: str, index: int) -> tuple[float, float]:
    """Flip bit 0 of one expected element and store it consistently (data and hash): as if the reference
    said another value. Returns (true value, the bundle's value)."""
    outs = doc["inputs"][input_index]["expected"]["onnx-fp32"]
    pos = next(i for i, o in enumerate(outs) if o["name"] == output)
    array = bundle_format.decode_array(outs[pos], output).copy()
    flat = array.reshape(-1)
    true_value = float(flat[index])
    flat.view(np.uint32)[index] ^= np.uint32(1)
    outs[pos] = dict(bundle_format.encode_array(array), name=output)
    return true_value, float(flat[index])


def test_a_one_bit_difference_is_named_by_input_output_element(default_build: Path, bundle_doc: dict,
                                                               tmp_path: Path) -> None:
    doc = json.loads(json.dumps(bundle_doc))
    name = doc["inputs"][1]["name"]
    true_value, bundled = _reencode_with_flipped_bit(doc, 1, "cls0", 4321)
    result = selfcheck.check(str(default_build / "model.onnx"), str(_write(tmp_path, doc)), backend="onnxruntime")
    assert result.exit_code == 1 and result.status == "differs", result.line
    miss = result.mismatch
    assert (miss.input, miss.output, miss.index) == (name, "cls0", 4321)
    assert (miss.actual, miss.expected) == (true_value, bundled)
    assert f"DIFFERS from onnx-fp32: input {name}, output cls0, element 4321: got {true_value!r}, expected {bundled!r}" in result.line


def test_a_flipped_bit_in_an_expected_hash_is_a_corrupt_bundle(default_build: Path, bundle_doc: dict,
                                                               tmp_path: Path) -> None:
    doc = json.loads(json.dumps(bundle_doc))
    out = doc["inputs"][0]["expected"]["onnx-fp32"][0]
    out["hash"] = out["hash"][:-1] + ("0" if out["hash"][-1] != "0" else "1")
    result = selfcheck.check(str(default_build / "model.onnx"), str(_write(tmp_path, doc)), backend="onnxruntime")
    assert result.exit_code == 2 and "data does not match its hash (bundle corrupt)" in result.line, result.line
    assert doc["inputs"][0]["name"] in result.line and "expected.onnx-fp32.box0" in result.line


def test_a_model_that_is_not_the_bundles_is_refused(default_build: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "model.onnx"
    data = bytearray((default_build / "model.onnx").read_bytes())
    data[-1] ^= 1
    wrong.write_bytes(bytes(data))
    result = selfcheck.check(str(wrong), str(default_build / "selfcheck.json"), backend="onnxruntime")
    manifest = json.loads((default_build / "manifest.json").read_text())
    assert result.exit_code == 3 and result.status == "runtime", result.line
    assert "wrong model" in result.line and manifest["inputs"]["onnx_prepared"]["sha256"][:16] in result.line
    assert manifest["fingerprint"][:16] in result.line
    # the .rknn is not the onnxruntime model either: named as such
    result = selfcheck.check(str(default_build / "model.rknn"), str(default_build / "selfcheck.json"), backend="onnxruntime")
    assert result.exit_code == 3 and "is not the bundle's model.onnx" in result.line


def _bomb(doc: dict) -> None:
    doc["inputs"][0]["tensor"]["zlib"] = base64.b64encode(zlib.compress(bytes(200 << 20))).decode()


def _big_shape(doc: dict) -> None:
    doc["inputs"][0]["tensor"]["shape"] = [1 << 20, 1 << 20]


CRAFTED = {
    "schema": (lambda d: d.update(schema="rkdet.selfcheck/9"), "schema"),
    "zlib bomb": (_bomb, "holds more bytes"),
    "shape too big": (_big_shape, "array larger than 64 MiB"),
    "negative dim": (lambda d: d["inputs"][0]["tensor"].update(shape=[-1, 3]), "shape"),
    "dtype object": (lambda d: d["inputs"][0]["tensor"].update(dtype="object"), "dtype"),
    "name with slash": (lambda d: d["inputs"][0].update(name="../../etc/passwd"), "name"),
    "control char": (lambda d: d["io"]["outputs"].__setitem__(0, "box\x1b[2J"), "io.outputs"),
    "too many inputs": (lambda d: d.update(inputs=[{}] * 65), "expected 1 to 64 inputs"),
    "missing output": (lambda d: d["inputs"][0]["expected"]["onnx-fp32"].pop(), "expected 6 outputs"),
    "not base64": (lambda d: d["inputs"][0]["tensor"].update(zlib="%%%"), "not base64 zlib data"),
    "no fingerprint": (lambda d: d.pop("fingerprint"), "fingerprint"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_bundle_is_exit_2_in_one_line(case: str, default_build: Path, bundle_doc: dict, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    doc = json.loads(json.dumps(bundle_doc))
    craft, says = CRAFTED[case]
    craft(doc)
    path = _write(tmp_path, doc)
    code = selfcheck.main([str(path), "--model", str(default_build / "model.onnx"), "--backend", "onnxruntime"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("rkdet-selfcheck: ") and says in err, err
    assert "\x1b" not in err and "Traceback" not in err


def test_unreadable_and_oversized_bundles_are_exit_2(default_build: Path, tmp_path: Path) -> None:
    model = str(default_build / "model.onnx")
    not_json = tmp_path / "a.json"
    not_json.write_bytes(b"\xff\xfe{")
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:  # sparse: no disk space used
        f.truncate(bundle_format.MAX_BUNDLE_BYTES + 1)
    for path, says in ((not_json, "not a JSON bundle"), (huge, "more than the 64 MiB"),
                       (tmp_path / "missing.json", "cannot read the bundle")):
        result = selfcheck.check(model, str(path), backend="onnxruntime")
        assert result.exit_code == 2 and says in result.line, result.line


def test_the_zipapp_alone_runs_isolated_and_imports_from_itself(default_build: Path, tmp_path: Path) -> None:
    """On a board the check is the one program file (`rkdet-onboard.pyz selfcheck`), even under -I; a serving app
    puts the zipapp on sys.path and imports rkdet.onboard.selfcheck from it, not from an installed rkdet."""
    board = tmp_path / "board"
    board.mkdir()
    app = program.build(str(board))
    for name in ("selfcheck.json", "model.onnx"):
        os.symlink(default_build / name, board / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-I", app, "selfcheck", str(board / "selfcheck.json"),
                           "--backend", "onnxruntime"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("rkdet-selfcheck: IDENTICAL to onnx-fp32") and proc.stdout.count("\n") == 1
    probe = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "from rkdet.onboard import selfcheck; print(selfcheck.__file__)", app],
                           capture_output=True, text=True, env=env)
    assert probe.stdout.strip() == f"{app}/rkdet/onboard/selfcheck.py", probe.stderr


def test_vermin_finds_no_python_3_6_violations() -> None:
    vermin = Path(sys.executable).parent / "vermin"
    proc = subprocess.run([str(vermin), "-t=3.6-", "--no-tips", "--violations", str(PACKAGE)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _classifier_bundle(tmp_path: Path, flip: int | None, above: bool = True) -> tuple[Path, Path, int]:
    """A tiny real ONNX classifier (mean over pixels -> 3x5 matmul -> [1,5] scores) and its bundle, whose
    expected scores are onnxruntime's own, except element `flip` set above the top score (or below the
    lowest) when given."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    weight = np.array([[0.9, -0.2, 0.1, 0.3, -0.5], [0.1, 0.8, -0.3, 0.2, 0.4], [-0.4, 0.2, 0.7, 0.1, 0.3]], np.float32)
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=0),
         helper.make_node("MatMul", ["m", "W"], ["scores"])], "cls",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 5])], [numpy_helper.from_array(weight, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "cls.onnx"
    onnx.save(model, str(path))
    tensor = np.random.default_rng(3).integers(0, 256, (1, 4, 4, 3), dtype=np.uint8)
    mean, std = [0.0, 0.0, 0.0], [255.0, 255.0, 255.0]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    scores = session.run(None, {"x": reference.fp32_input(tensor, mean, std)})[0]
    top1 = int(np.argmax(scores))
    expected = scores.copy()
    if flip is not None:
        expected.reshape(-1)[flip] = scores.max() + 1.0 if above else scores.min() - 1.0
    doc = {"schema": bundle_format.BUNDLE_SCHEMA, "name": "cls", "platform": "rk3588", "fingerprint": "ab" * 32,
           "models": {"onnxruntime": {"file": "cls.onnx", "sha256": file_sha256(str(path))}},
           "fed_input": {"layout": "NHWC", "dtype": "uint8", "shape": [1, 4, 4, 3], "mean": mean, "std": std},
           "io": {"inputs": [{"name": "x", "shape": [1, 4, 4, 3], "dtype": "uint8"}], "outputs": ["scores"]},
           "inputs": [{"name": "one", "tensor": bundle_format.encode_array(tensor),
                       "expected": {"onnx-fp32": [dict(bundle_format.encode_array(expected), name="scores")]},
                       "decisions": {"onnx-fp32": decision_summary([("scores", expected)])}}]}
    return path, _write(tmp_path, doc), top1


def test_a_classifier_bundle_says_whether_the_top1_changed(tmp_path: Path) -> None:
    model, bundle, top1 = _classifier_bundle(tmp_path, None)
    assert json.loads(bundle.read_text())["inputs"][0]["decisions"]["onnx-fp32"] == {"kind": "classification", "top1": top1}
    assert selfcheck.check(str(model), str(bundle), backend="onnxruntime").ok
    other = (top1 + 1) % 5
    model, bundle, _ = _classifier_bundle(tmp_path, other)  # the bundle expects another class on top
    result = selfcheck.check(str(model), str(bundle), backend="onnxruntime")
    assert result.exit_code == 1 and result.mismatch.index == other, result.line
    assert f"; top-1 CHANGED: {top1}, expected {other}" in result.line
    model, bundle, _ = _classifier_bundle(tmp_path, other, above=False)  # a lower score differs: same top-1
    result = selfcheck.check(str(model), str(bundle), backend="onnxruntime")
    assert result.exit_code == 1 and result.mismatch.index == other, result.line
    assert f"; top-1 unchanged ({top1})" in result.line


PYTHON36 = Path("/root/.pyenv/versions/3.6.15/bin/python")


@pytest.mark.skipif(not PYTHON36.exists(), reason="no Python 3.6 interpreter here; vermin covers the syntax")
def test_python36_runs_the_zipapp_up_to_its_numpy_check(default_build: Path, tmp_path: Path) -> None:
    """A real 3.6 (without numpy here) imports the self-check's modules from the zipapp and ends in the documented one line."""
    app = program.build(str(tmp_path))
    proc = subprocess.run([str(PYTHON36), "-I", app, "selfcheck", str(default_build / "selfcheck.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr == f"rkdet-selfcheck: numpy is not installed for {PYTHON36}; install python3-numpy\n"
