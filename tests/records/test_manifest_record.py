"""The one manifest record: what it reads it writes back unchanged, and a bad field is one line
naming the file and the field (issue 20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rkdet.errors import InputError
from rkdet.records.manifest import Manifest, read_manifest, write_manifest
from rkdet.records.run_info import read_run_info

FP = "ab" * 32
TENSOR = {"name": "out0", "shape": [1, 4], "dtype": "int8", "qnt_method": "layer", "scale": [0.25], "zero_point": [0]}
HEADER = {"format_version": 6, "model_format": "rknn", "target_platform": "rk3588", "toolkit_version": "2.5.0",
          "compiler_version": "x", "source_framework": "onnx", "inputs": [TENSOR], "outputs": [TENSOR]}
RKNN = {"file": "model.rknn", "sha256": "cd" * 32, "size": 10, "content_fingerprint": "ef" * 32, "header": HEADER,
        "custom_string": f"rkdet-fp={FP}"}
CONVERTED = {
    "schema": "rkdet.manifest/2", "name": "m", "platform": "rk3588", "fingerprint": FP, "model_fingerprint": FP,
    "embedded_fingerprint": FP, "model_identity": {"toolkit": {"name": "rknn-toolkit2", "version": "2.5.0"}},
    "inputs": {"onnx": {"file": "m.onnx", "sha256": "0" * 64},
               "onnx_prepared": {"file": "model.onnx", "sha256": "1" * 64, "prepare": "none", "input": "images",
                                 "input_shape_nchw": [1, 3, 8, 8], "outputs": [{"name": "out0", "shape": [1, 4]}],
                                 "opset": 13},
               "config": {"sha256": "2" * 64, "resolved": {"quantize": {"dtype": "w8a8"}}},
               "calibration": [{"file": "c.png", "sha256": "3" * 64, "tensor": "4" * 64}],
               "golden": [{"file": "g.png", "sha256": "5" * 64, "tensor": "6" * 64}]},
    "fed_input": {"layout": "NHWC", "dtype": "uint8", "shape": [1, 8, 8, 3], "channel_order": "rgb",
                  "mean": [0.0, 0.0, 0.0], "std": [255.0, 255.0, 255.0]},
    "environment": {"python": "3.11.2"}, "rknn": RKNN, "golden_outputs": {"simulator": {"g": {"out0": "7" * 64}}},
    "fidelity": None, "float_layers": [], "toolkit_log": None, "int8_emulation": None,
    "gates": {"schema": "rkdet.gates/1", "passed": True, "failed_gate": None, "subject": None, "message": None},
}
IMPORTED = {
    "schema": "rkdet.manifest/2", "origin": "imported", "name": "m", "platform": "rk3568", "fingerprint": FP,
    "input_fingerprint": None, "embedded_fingerprint": None,
    "inputs": {"onnx": None, "onnx_prepared": None, "calibration": None,
               "rknn": {"file": "theirs.rknn", "sha256": "cd" * 32}, "golden": [{"name": "g", "tensor": "6" * 64}]},
    "fed_input": {"layout": "NHWC", "dtype": "uint8", "shape": [1, 8, 8, 3], "channel_order": "rgb",
                  "mean": [0, 0, 0], "std": [1, 1, 1], "sources": {"mean": "--mean"}},
    "toolchain": {"toolkit": {"name": "rknn-toolkit2", "version": "2.3.0", "source": "metadata"}},
    "rknn": RKNN, "golden_outputs": {}, "fidelity": None,
    "reference": {"agrees": "not applicable", "reason": "no ONNX", "simulator": "refused"},
    "emulator_stand_in": None, "created_unix": 5,
}


@pytest.mark.parametrize("doc", [CONVERTED, IMPORTED], ids=["converted", "imported"])
def test_what_is_read_is_written_back_unchanged(tmp_path: Path, doc: dict) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(doc))
    record = read_manifest(path)
    assert record.to_json() == doc
    write_manifest(tmp_path / "again.json", record)
    assert json.loads((tmp_path / "again.json").read_text()) == doc
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]  # the one atomic writer


def test_the_consumers_questions() -> None:
    conv, imp = Manifest.from_json(CONVERTED, "c"), Manifest.from_json(IMPORTED, "i")
    assert (conv.output_shapes, imp.output_shapes) == (((1, 4),), ((1, 4),))
    assert (conv.toolkit_version, imp.toolkit_version) == ("2.5.0", "2.3.0")
    assert (conv.onnx_sha256, imp.onnx_sha256) == ("1" * 64, None)
    assert conv.gate_record.passed and not conv.imported and imp.imported
    assert [g.stem for g in conv.inputs.golden + imp.inputs.golden] == ["g", "g"]


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["rknn"]["header"]["outputs"][0].update(shape="x"), "rknn.header.outputs[0].shape"),
    (lambda d: d["rknn"]["header"]["outputs"][0]["scale"].append("x"), "rknn.header.outputs[0].scale[1]"),
    (lambda d: d["inputs"]["golden"].append(5), "inputs.golden[1]"),
    (lambda d: d["fed_input"].pop("mean"), "fed_input.mean"),
    (lambda d: d.update(float_layers="conv1"), "float_layers"),
    (lambda d: d.update(fingerprint="../" + "0" * 61), "fingerprint"),
])
def test_a_bad_field_is_one_line_naming_the_file_and_field(tmp_path: Path, change, field: str) -> None:
    doc = json.loads(json.dumps(CONVERTED))
    change(doc)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as err:
        read_manifest(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and field in text and "\n" not in text and "re-run rkdet convert" in text


def test_a_manifest_that_is_not_json_or_not_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("[" * 100_000)
    with pytest.raises(InputError, match="nested deeper"):
        read_manifest(tmp_path / "manifest.json")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(InputError, match="not a regular file"):
        read_manifest(tmp_path / "dir.json")


def test_run_json_is_read_typed_and_a_bad_field_is_named(tmp_path: Path) -> None:
    run = {"schema": "rkdet.run/1", "backend": "rknnlite", "emulated": True, "core_mask": "0", "affinity": [4, 5],
           "inputs": [{"name": "a", "file": "a.npy", "shape": [1, 8, 8, 3], "dtype": "uint8"}],
           "outputs": ["out0"], "started_unix": 1.5, "status": "complete", "stack": {"python": "3.11.2"}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    info = read_run_info(path)
    assert (info.backend, info.emulated, info.affinity, info.first_input_shape) == ("rknnlite", True, (4, 5), (1, 8, 8, 3))
    assert info.recorded == frozenset(run) and info.setting("affinity") == [4, 5] and info.stack_text("python") == "3.11.2"
    assert info.for_reference_rule() == {"backend": "rknnlite", "emulated": True}
    path.write_text(json.dumps({**run, "affinity": ["x"]}))
    with pytest.raises(InputError, match=r"run\.json: affinity\[0\]: expected an integer"):
        read_run_info(path)
