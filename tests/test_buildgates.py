"""The build's gate record (rkdet/records/gates.py): read from a manifest, derived from an older one, bounded
and safe on malformed input (a manifest is a file anyone could have edited)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rkdet.errors import InputError
from rkdet.records.build import load_build
from rkdet.records.gates import MAX_TEXT, PASSED, GateRecord, from_manifest


def test_the_record_round_trips_and_says_what_failed(tmp_path: Path) -> None:
    rec = GateRecord(False, "cosine", "out0", "rk3588: fidelity gate failed: out0 cosine 0.53")
    (tmp_path / "manifest.json").write_text(json.dumps({"gates": rec.to_json(), "fingerprint": "ab" * 32,
                                                        "platform": "rk3588"}))
    assert load_build(tmp_path, complete=False).gates == rec
    assert rec.what == "the cosine gate (out0)"
    line = rec.refusal(tmp_path, "deploy")
    assert str(tmp_path) in line and "failed the cosine gate (out0)" in line and "--allow-failed-build" in line
    assert rec.caveat(tmp_path / "b.failed").startswith("build b.failed FAILED its gates (the cosine gate (out0))")
    assert from_manifest({"gates": PASSED.to_json()}) == PASSED


def test_older_and_malformed_manifests(tmp_path: Path) -> None:
    older = {"fidelity": {"gates": [{"gate": "cosine", "subject": "y", "binding": False, "passed": False},
                                    {"gate": "decision", "subject": "golden inputs", "binding": True, "passed": False}]}}
    assert from_manifest(older) == GateRecord(False, "decision", None)  # a reported-only result is not a failure
    for doc in ([], "x", {"gates": "no"}, {"gates": {"passed": "false"}}, {"fidelity": {"gates": {}}}, {}):
        assert from_manifest(doc).passed, doc
    huge = from_manifest({"gates": {"passed": False, "failed_gate": "g" * 5000, "message": 7}})
    assert len(huge.gate) == MAX_TEXT and huge.message is None
    # a build folder whose manifest cannot be read is refused, never "passed" (issue 28)
    with pytest.raises(InputError, match="missing/manifest.json: missing"):
        load_build(tmp_path / "missing", complete=False)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="manifest.json: malformed manifest: unreadable JSON"):
        load_build(tmp_path, complete=False)
