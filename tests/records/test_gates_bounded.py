"""A build folder is untrusted: its gate record is read through the one bounded reader, so a manifest that
is a FIFO (a read would block forever) or too large is "no readable manifest", never a hang or a whole read."""

from __future__ import annotations

import os
from pathlib import Path

from rkdet.records import gates
from rkdet.records.io import MAX_JSON


def test_a_fifo_manifest_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "manifest.json")
    assert gates.read(tmp_path) is gates.PASSED  # returns at once: opened non-blocking, refused as not a file


def test_an_oversized_manifest_is_not_read_whole(tmp_path: Path) -> None:
    with (tmp_path / "manifest.json").open("wb") as f:
        f.truncate(MAX_JSON + 1)  # sparse: no disk used
    assert gates.read(tmp_path) is gates.PASSED


def test_a_failed_gate_is_still_read(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text('{"gates": {"passed": false, "failed_gate": "decision", "message": "boxes moved"}}')
    record = gates.read(tmp_path)
    assert not record.passed and record.gate == "decision" and record.message == "boxes moved"
