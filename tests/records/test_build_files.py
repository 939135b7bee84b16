"""The build folder's other files, typed (issue 28): model.io.json, config.resolved.json and fidelity.json
each have one bounded strict reader and one writer, and a build's record reads each once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rkdet.errors import ConfigError, InputError
from rkdet.records.build import load_build
from rkdet.records.fidelity import FidelityRecord, GateResult, read_fidelity, write_fidelity
from rkdet.records.manifest import Manifest, write_manifest
from rkdet.records.model_io import ModelIo, read_model_io, write_model_io
from rkdet.records.resolved_config import read_resolved_config, write_resolved_config


def test_model_io_round_trips_in_the_format_the_board_reads(tmp_path: Path) -> None:
    io = ModelIo.image("images", 640, 480, ["box0", "cls0"])
    write_model_io(tmp_path / "model.io.json", io)
    doc = json.loads((tmp_path / "model.io.json").read_text())
    assert doc == {"inputs": [{"name": "images", "shape": [1, 640, 480, 3], "dtype": "uint8", "layout": "nhwc"}],
                   "outputs": ["box0", "cls0"]}  # what rkdet/onboard/backends.py load_io_spec reads
    assert read_model_io(tmp_path / "model.io.json") == io


@pytest.mark.parametrize("text, field", [('{"inputs": [], "outputs": [3]}', "outputs[0]"),
                                         ('{"inputs": [{"shape": "x"}], "outputs": []}', "inputs[0].shape"),
                                         ('{"outputs": []}', "inputs")])
def test_a_wrong_model_io_is_one_line_naming_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    (tmp_path / "model.io.json").write_text(text)
    with pytest.raises(InputError) as err:
        read_model_io(tmp_path / "model.io.json")
    assert str(err.value).startswith(f"{tmp_path / 'model.io.json'}: {field}: expected")


def test_fidelity_round_trips_its_gates_as_records(tmp_path: Path) -> None:
    rec = FidelityRecord({"kind": "detect"}, (GateResult("cosine", "out0", 0.5, 0.99, False, True, "low"),
                                              GateResult("saturation", "out1", None, 0.01, None, False)))
    write_fidelity(tmp_path / "fidelity.json", rec)
    back = read_fidelity(tmp_path / "fidelity.json")
    assert back == rec and back.gates[0].failed and not back.gates[1].failed


@pytest.mark.parametrize("gate", [{"gate": "cosine"}, {"gate": "cosine", "subject": "o", "binding": "yes"},
                                  {"gate": "cosine", "subject": "o", "binding": True, "value": "0.5"}])
def test_a_crafted_fidelity_gate_is_one_line_not_a_type_error(tmp_path: Path, gate: dict) -> None:
    (tmp_path / "fidelity.json").write_text(json.dumps({"layout": {}, "gates": [gate]}))
    with pytest.raises(InputError, match=r"fidelity.json: gates\[0\]\.\w+: expected"):
        read_fidelity(tmp_path / "fidelity.json")


def test_resolved_config_is_an_object_read_bounded(tmp_path: Path) -> None:
    write_resolved_config(tmp_path / "config.resolved.json", {"origin": "imported", "run": {"repeats": 3}})
    rec = read_resolved_config(tmp_path / "config.resolved.json")
    assert rec.origin == "imported" and rec.section("run") == {"repeats": 3} and rec.section("board") == {}
    (tmp_path / "config.resolved.json").write_text("[1]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        read_resolved_config(tmp_path / "config.resolved.json", ConfigError)
    os.unlink(tmp_path / "config.resolved.json")
    os.mkfifo(tmp_path / "config.resolved.json")
    with pytest.raises(InputError, match="is a FIFO"):
        read_resolved_config(tmp_path / "config.resolved.json")


def test_a_build_record_reads_each_file_once(tmp_path: Path) -> None:
    write_manifest(tmp_path / "manifest.json", Manifest(fingerprint="cd" * 32, platform="rk3568"))
    write_model_io(tmp_path / "model.io.json", ModelIo.image("x", 2, 2, ["y"]))
    write_resolved_config(tmp_path / "config.resolved.json", {"run": {}})
    build = load_build(tmp_path, complete=False)
    assert build.info.platform == "rk3568" and build.gates.passed and build.golden_sets == ()
    io, cfg = build.model_io(), build.resolved_config()
    assert build.fidelity() is None  # a build without a simulator has none
    for name in ("model.io.json", "config.resolved.json"):
        (tmp_path / name).write_text("{")  # changed after the load: the record keeps what it read
    assert build.model_io() is io and build.resolved_config() is cfg
    with pytest.raises(InputError, match="model.rknn missing"):
        load_build(tmp_path)  # a board run needs the whole folder
