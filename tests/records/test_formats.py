"""docs/FORMATS.md's versioned schemas against the typed records (issue 20): the field lists there are
the records' fields, so the documentation fails this test the moment either drifts."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from rkdet.records.manifest import SCHEMA, FedInput, Inputs, Manifest, RknnRecord
from rkdet.records.run_info import ModelCheck, RunInfo, RunInput, run_schema

DOC = (Path(__file__).resolve().parents[2] / "docs" / "FORMATS.md").read_text(encoding="utf-8")
FP = "ab" * 32


def documented(title: str) -> list[str]:
    """The backticked names of the paragraph that starts `<title>, ...: ` in FORMATS.md."""
    para = next((p for p in re.split(r"\n\s*\n", DOC) if p.startswith(title)), None)
    assert para is not None, f"docs/FORMATS.md lost its paragraph {title!r}"
    names = para.split(": ", 1)[1]
    return re.findall(r"`([a-z_0-9]+)`", names.split(" (only with")[0] if "(only with" in names else names)


def sample(origin: str) -> Manifest:
    return Manifest(fingerprint=FP, platform="rk3588", origin=origin, inputs=Inputs(), fed_input=FedInput("NHWC", (0,), (1,)),
                    rknn=RknnRecord(), created_unix=1)


def test_manifest_fields_of_a_converted_build_are_the_documented_ones() -> None:
    written = set(sample("converted").replace(gates=Manifest.gate_record.fget(sample("converted"))).to_json())
    assert documented("`manifest.json` fields (converted)") and set(documented("`manifest.json` fields (converted)")) == written


def test_manifest_fields_of_an_imported_build_are_the_documented_ones() -> None:
    assert set(documented("`manifest.json` fields (imported)")) == set(sample("imported").to_json())


def test_every_manifest_field_is_documented_for_one_origin_or_both() -> None:
    fields = {f.name for f in dataclasses.fields(Manifest)}
    docs = set(documented("`manifest.json` fields (converted)")) | set(documented("`manifest.json` fields (imported)"))
    assert fields == docs


def test_the_manifest_schema_string_is_the_documented_one() -> None:
    assert f"schema {SCHEMA}" in DOC and "schema rkdet.manifest/1) has `origin" not in DOC
    assert re.findall(r"rkdet\.manifest/\d", DOC.split("Schema history")[0]) == [SCHEMA]


def run_block() -> str:
    start = DOC.index("`run.json` (schema `rkdet.run/1`):")
    return DOC[start:DOC.index("```", DOC.index("```", start) + 3)]


def test_run_json_fields_are_the_documented_ones() -> None:
    fields = {f.name for f in dataclasses.fields(RunInfo)} - {"recorded"}  # `recorded`: what the file had
    assert set(documented("`run.json` fields")) == fields
    keys = set(re.findall(r'"([a-z_0-9]+)":', run_block()))
    assert fields <= keys, sorted(fields - keys)  # and each is in the documented example


@pytest.mark.parametrize("record", [RunInput, ModelCheck])
def test_run_json_nested_records_are_in_the_documented_example(record: type) -> None:
    section = DOC[DOC.index("## Result set"):DOC.index("\n## ", DOC.index("## Result set") + 3)]
    keys = set(re.findall(r'"([a-z_0-9]+)"', section))
    assert {f.name for f in dataclasses.fields(record)} <= keys


def test_the_run_schema_is_the_writers_and_the_documented_one() -> None:
    assert run_schema() == "rkdet.run/1" and f"`run.json` (schema `{run_schema()}`)" in DOC


# deploy.json, board.json, cells.json: the records against the "Run folder" section


def deploy_paragraphs() -> str:
    start = DOC.index("It also holds `deploy.json` (schema")
    return DOC[start:DOC.index("\n\n", DOC.index("The record is `DeployRecord`", start))]


def test_the_deploy_schema_and_every_documented_fact_are_the_records() -> None:
    from rkdet.records.deploy_record import DEPLOY_SCHEMA, BoardLockRecord, DeployRecord

    text = deploy_paragraphs()
    assert f"`deploy.json` (schema `{DEPLOY_SCHEMA}`" in text
    record = DeployRecord.__dataclass_fields__.keys()
    facts = set(re.findall(r"`([a-z_]+)`", text.split("The record is `DeployRecord`", 1)[1])) - {"new", "rkdet"}
    statuses = {"preflight", "running", "complete", "failed", "interrupted", "disconnected"}
    assert facts - statuses and facts - statuses <= set(record), sorted(facts - statuses - set(record))
    assert {f.name for f in dataclasses.fields(BoardLockRecord)} <= set(re.findall(r"`([a-z_]+)`", text))


def test_the_documented_status_machine_is_the_records() -> None:
    from rkdet.records.deploy_record import ALLOWED, DeployStatus

    names = {s.value for s in DeployStatus} | {"new"}
    text = deploy_paragraphs().split("(`ALLOWED`):", 1)[1].split(". The reader", 1)[0]
    documented_moves: dict[str, set[str]] = {}
    for clause in text.split(";"):
        parts = clause.split("→")
        if len(parts) == 1:
            assert "is final" in clause, clause
            final = set(re.findall(r"`([a-z]+)`", clause)) & names
            assert final and all(not ALLOWED[DeployStatus(f)] for f in final)
            continue
        groups = [set(re.findall(r"`([a-z]+)`|\b(new)\b", p)) for p in parts]
        groups = [{a or b for a, b in g} & names for g in groups]
        for src, dst in zip(groups, groups[1:]):
            for s in src:
                documented_moves.setdefault(s, set()).update(dst)
    actual = {("new" if k is None else k.value): {d.value for d in v} for k, v in ALLOWED.items() if v}
    assert documented_moves == actual


def test_the_documented_stack_keys_are_the_board_stack() -> None:
    from rkdet.boardinfo.stack import BoardStack

    para = DOC[DOC.index("`stack` (the board's software stack:"):]
    keys = re.findall(r"`([a-z_]+)`", para.split(";", 1)[0])[1:]
    assert keys == [f.name for f in dataclasses.fields(BoardStack)]


def test_the_board_and_cells_schemas_are_the_records() -> None:
    from rkdet.onboard.resultset import CELLS_SCHEMA
    from rkdet.records.probe import BOARD_SCHEMA

    assert f"cells.json` (schema `{CELLS_SCHEMA}`)" in DOC
    assert BOARD_SCHEMA in DOC
