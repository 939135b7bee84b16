"""Verdicts typed to the last reader (issue 28): deploy.json keeps the diff's verdicts as records
(rkdet/records/verdict.py) and round-trips them; an older schema is read as documented, another one
refused in one line; the fleet and history read verdicts as records, never by key."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from rkdet.errors import InputError
from rkdet.records.deploy_record import DEPLOY_SCHEMA, DeployRecord, DeployStatus, read_deploy_record, write_deploy_record
from rkdet.records.verdict import CellsRecord, CellVerdict, NotApplicable, VerdictRecord, VerdictSummary

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "20261204T010203Z-cafe"


def _verdict(ok: bool, reference: str | None = "simulator") -> VerdictRecord:
    return VerdictRecord(ok=ok, reference=reference, tolerance="max_lsb=1", outputs_differing=2,
                         outputs_outside=0 if ok else 1, decisions_changed=0, decisions_judged=True,
                         max_abs=float("inf") if not ok else 0.25, max_ulp=7, max_lsb=None, min_cosine=0.9995,
                         reason="" if ok else "input p output x outside tolerance", caveat=None)


def _judged(**facts: object) -> DeployRecord:
    return DeployRecord(run_id=RUN_ID, status=DeployStatus.COMPLETE, verdict="SAME (bitwise)", diff_exit=0,
                        **facts)  # type: ignore[arg-type]


@pytest.mark.parametrize("facts", [
    {"repeatable": _verdict(True, None), "agrees": _verdict(False)},
    {"repeatable": _verdict(True, None), "agrees": NotApplicable("an imported .rknn has no FP32 reference")},
    {"repeatable": VerdictSummary(ok=False, cells=("core-0", "core-1")), "agrees": VerdictSummary(ok=True),
     "cells": CellsRecord(cells=(
         CellVerdict(cell="core-0", core_mask="0", status="complete", reason=None, verdict="SAME", repeatable=_verdict(True, None),
                     agrees=_verdict(True), same_as_first=None),
         CellVerdict(cell="core-1", core_mask="1", status="skipped", reason="no such core", verdict=None,
                     repeatable=None, agrees=None, same_as_first=None)), first="core-0", repeatable=False, agrees=True)},
])
def test_deploy_json_round_trips_verdict_records(tmp_path: Path, facts: dict) -> None:
    record = _judged(**facts)
    path = tmp_path / "deploy.json"
    write_deploy_record(path, record)
    back = read_deploy_record(path)
    assert back == record and back.schema == DEPLOY_SCHEMA == "rkdet.deploy/2"
    assert type(back.repeatable) is type(record.repeatable) and type(back.agrees) is type(record.agrees)
    on_disk = json.loads(path.read_text())
    if isinstance(record.agrees, NotApplicable):  # the shape the fleet and tests have always seen
        assert on_disk["agrees"] == {"ok": None, "applicable": False, "verdict": "not applicable",
                                     "reason": "an imported .rknn has no FP32 reference"}
        assert back.agrees is not None and back.agrees.ok is None
    if isinstance(record.agrees, VerdictRecord):
        assert on_disk["agrees"]["max_abs"] == float("inf") and on_disk["agrees"]["max_lsb"] is None
        assert set(on_disk["agrees"]) == set(VerdictRecord.__dataclass_fields__)


def test_the_diff_verdict_is_the_record_deploy_keeps() -> None:
    from rkdet.diff.compare import Verdict

    v = Verdict("agrees", False, "simulator", "bitwise", 1, 1, None, 0.5, 3, None, 0.99, "why", "")
    assert v.record() == VerdictRecord(ok=False, reference="simulator", tolerance="bitwise", outputs_differing=1,
                                       outputs_outside=1, decisions_changed=None, decisions_judged=False, max_abs=0.5,
                                       max_ulp=3, max_lsb=None, min_cosine=0.99, reason="why", caveat=None)
    assert v.to_json() == v.record().to_json()  # report.json and deploy.json state it with the same fields


def test_an_older_deploy_json_is_read_as_documented(tmp_path: Path) -> None:
    """rkdet.deploy/1 wrote the same verdict objects untyped: read as /2 (docs/FORMATS.md)."""
    doc = _judged(repeatable=_verdict(True, None), agrees=_verdict(True)).to_json()
    doc["schema"] = "rkdet.deploy/1"
    path = tmp_path / "deploy.json"
    path.write_text(json.dumps(doc))
    back = read_deploy_record(path)
    assert back.schema == DEPLOY_SCHEMA and back.agrees == _verdict(True)


@pytest.mark.parametrize("change,named", [
    (lambda d: d.update(schema="rkdet.deploy/9"), "schema 'rkdet.deploy/9' is not one this rkdet reads"),
    (lambda d: d["agrees"].update(ok="yes"), "field 'agrees': field 'ok' is 'yes', not true or false"),
    (lambda d: d["agrees"].update(extra=1), "field 'agrees': field 'extra' is not one rkdet writes"),
    (lambda d: d["agrees"].pop("max_ulp"), "field 'agrees': field 'max_ulp' is missing"),
    (lambda d: d.update(repeatable=[1]), "field 'repeatable' is [1], not a JSON object"),
    (lambda d: d.update(cells={"cells": [{"cell": "c"}], "first": None, "repeatable": True, "agrees": None}),
     "field 'cells'[0]: field 'core_mask' is missing"),
    (lambda d: d.update(agrees={"ok": True, "applicable": False, "verdict": "not applicable", "reason": "r"}),
     "a not-applicable verdict has ok null"),
])
def test_a_malformed_verdict_is_one_line_naming_file_and_field(tmp_path: Path, change, named: str) -> None:
    doc = _judged(repeatable=_verdict(True, None), agrees=_verdict(True)).to_json()
    change(doc)
    path = tmp_path / "deploy.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as err:
        read_deploy_record(path)
    assert str(err.value).startswith(str(path)) and named in str(err.value) and "\n" not in str(err.value)


VERDICT_KEYS = {"ok", "repeatable", "agrees", "applicable", "same_as_first"}


def _reads_by_key(tree: ast.AST) -> list[tuple[int, str]]:
    """`x.get("ok")`, `x["agrees"]`, ... with a verdict key: a verdict read as a JSON object."""
    found = []
    for node in ast.walk(tree):
        key = None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant)):
            key = node.args[0].value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.ctx, ast.Load):
            key = node.slice.value
        if key in VERDICT_KEYS:
            found.append((node.lineno, str(key)))
    return found


def test_the_fleet_and_history_read_no_verdict_by_key() -> None:
    """deploy.json's verdicts reach the fleet and history as records: no module there reads a verdict key
    out of a JSON object (the fleet's own fleet.json writer and its HTML/JUnit read its own typed records)."""
    offenders = []
    for folder in ("rkdet/fleets/run", "rkdet/history"):
        for path in sorted((ROOT / folder).glob("*.py")):
            for line, key in _reads_by_key(ast.parse(path.read_text())):
                offenders.append(f"{path.relative_to(ROOT)}:{line} reads {key!r} by key")
    assert not offenders, offenders
    # the scan finds what it looks for: the code this replaced
    old = 'ok = (verdict or {}).get("ok")\nrep_ok = repeatable.get("ok")\nx = judged["agrees"]'
    assert [k for _, k in _reads_by_key(ast.parse(old))] == ["ok", "ok", "agrees"]
