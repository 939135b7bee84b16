"""A build folder is untrusted: its gate record is read with its manifest through the one bounded reader
(rkdet.records.build `load_build`), so a manifest that is a FIFO (a read would block forever) or too large
is refused at once, one line naming it (exit 2): never a hang, a whole read, or "gates passed"."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rkdet.errors import InputError
from rkdet.records.build import load_build
from rkdet.records.io import MAX_JSON


def test_a_fifo_manifest_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "manifest.json")
    with pytest.raises(InputError, match="manifest.json: malformed manifest: is a FIFO"):
        load_build(tmp_path, complete=False)  # returns at once: refused as not a regular file, never opened


def test_an_oversized_manifest_is_not_read_whole(tmp_path: Path) -> None:
    with (tmp_path / "manifest.json").open("wb") as f:
        f.truncate(MAX_JSON + 1)  # sparse: no disk used
    with pytest.raises(InputError, match="manifest.json: malformed manifest: larger than 16 MiB"):
        load_build(tmp_path, complete=False)


def test_a_failed_gate_is_still_read(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({
        "fingerprint": "ab" * 32, "platform": "rk3588",
        "gates": {"passed": False, "failed_gate": "decision", "message": "boxes moved"}}))
    record = load_build(tmp_path, complete=False).gates
    assert not record.passed and record.gate == "decision" and record.message == "boxes moved"
