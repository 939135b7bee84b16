"""The on-board program as a board gets it (one deterministic zipapp), and the one result-set writer."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

from rkdet.onboard import program
from rkdet.onboard.hashing import output_hash
from rkdet.onboard.resultset import (RUN_SCHEMA, JsonlAppender, index_record, output_record, read_index,
                                     write_complete)
from runner_helpers import base_env


def test_the_zipapp_is_deterministic_and_holds_the_whole_package(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    first, second = Path(program.build(str(a))), Path(program.build(str(b)))
    assert first.name == second.name == program.PROGRAM == "rkdet-onboard.pyz"
    assert first.read_bytes() == second.read_bytes()  # an unchanged program is never pushed again
    with zipfile.ZipFile(first) as archive:
        names = set(archive.namelist())
    modules = {"rkdet/onboard/" + Path(p).name for p in program.sources()}
    assert names == {"__main__.py", "rkdet/__init__.py"} | modules
    assert "rkdet/onboard/program.py" not in names and "rkdet/onboard/run.py" in names


def test_the_zipapp_without_a_command_is_one_usage_line(tmp_path):
    app = program.build(str(tmp_path))
    proc = subprocess.run([sys.executable, "-I", app, "bogus"], capture_output=True, text=True, env=base_env())
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "run|selfcheck" in proc.stderr
    proc = subprocess.run([sys.executable, "-I", app, "selfcheck", "--help"], capture_output=True, text=True,
                          env=base_env())
    assert proc.returncode == 0 and proc.stdout.startswith("usage: rkdet-selfcheck")


def test_write_complete_is_the_format_a_board_run_writes(tmp_path):
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2], dtype=np.int8)]
    outs = [output_record("o%d" % i, output_hash(a), a) for i, a in enumerate(arrays)]
    records = [index_record(0, "page-1", None, None, "onnxruntime", outs),
               index_record(0, "page-2", None, None, "onnxruntime", outs[:1] + [dict(outs[1], hash="f" * 64)])]
    summary = write_complete(str(tmp_path / "set"), {"backend": "onnxruntime", "status": "complete"}, records,
                             {output_hash(a): a for a in arrays})
    run = json.loads((tmp_path / "set" / "run.json").read_text())
    assert run["schema"] == RUN_SCHEMA == "rkdet.run/1" and run["backend"] == "onnxruntime"
    assert read_index(str(tmp_path / "set")) == records
    assert summary == json.loads((tmp_path / "set" / "summary.json").read_text())
    assert summary["deterministic"] is True and set(summary["inputs"]) == {"page-1", "page-2"}
    for a in arrays:
        np.testing.assert_array_equal(np.load(tmp_path / "set" / "outputs" / (output_hash(a) + ".npy")), a)
    appended = tmp_path / "appended.jsonl"  # the board's streaming writer makes the same bytes
    writer = JsonlAppender(str(appended))
    for record in records:
        writer.append(record)
    writer.close()
    assert appended.read_bytes() == (tmp_path / "set" / "index.jsonl").read_bytes()
