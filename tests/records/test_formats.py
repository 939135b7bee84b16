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
