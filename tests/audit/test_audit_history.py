"""A verified pull goes into the history database (`rkdet audit verify --results`), and `rkdet history`
shows serving beside the deploy runs; an older database (schema 2) migrates to the serving schema."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from rkdet.cli import main
from rkdet.errors import InputError
from rkdet.history.db import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, connect, load_runs, load_serving
from rkdet.onboard.audit import AuditSettings, RKNNLite
from rkdet.onboard.audit_watch import Canary

from audit_app import APP_MODULE, BUILD



def serve(log: Path, count: int, runtime=None) -> None:
    rng = np.random.RandomState(2)
    golden = [[rng.standard_normal((1, 8)).astype(np.float32)] for _ in range(2)]
    # on the app's thread: a background recorder under load drops records (counted, by design), and the
    # test needs every record in the log
    settings = AuditSettings(str(log), max_file_bytes=262_144, canary=Canary(golden, every_n=100), build=BUILD,
                             background=False)
    lite = RKNNLite(audit=settings, runtime=runtime or APP_MODULE.EmulatedTinyRuntime())
    lite.init_runtime()
    for _ in range(count):
        lite.inference(inputs=[rng.standard_normal((1, 8)).astype(np.float32)])
    lite.release()


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_verified_pulls_are_recorded_once_and_listed_beside_runs(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    good = tmp_path / "board-a"
    serve(good, 2800)
    first = run("audit", "verify", str(good), "--fingerprint", BUILD, "--results", str(results))
    assert first.exit_code == 0 and "recorded in" in first.output and "board board-a" in first.output, first.output
    again = run("audit", "verify", str(good), "--fingerprint", BUILD, "--results", str(results))
    assert again.exit_code == 0 and "already recorded" in again.output

    bad = tmp_path / "copy"
    shutil.copytree(good, bad)
    files = sorted(bad.glob("audit-*.jsonl"))
    assert len(files) >= 3
    files[1].unlink()  # a file removed from the middle: the chain is broken, and the history says so
    broken = run("audit", "verify", str(bad), "--fingerprint", BUILD, "--results", str(results),
                 "--board-label", "board-b")
    assert broken.exit_code == 1 and "board board-b" in broken.output

    drifted = tmp_path / "board-c"
    serve(drifted, 700, runtime=APP_MODULE.EmulatedTinyRuntime(drift_after=300))  # a planted canary failure
    html = tmp_path / "r.html"
    assert run("audit", "report", str(drifted), "--fingerprint", BUILD, "--results", str(results),
               "--html", str(html)).exit_code == 1

    conn = connect(results, create=False)
    pulls = {p.board: p for p in load_serving(conn)}
    conn.close()
    assert sorted(pulls) == ["board-a", "board-b", "board-c"]
    a, b, c = pulls["board-a"], pulls["board-b"], pulls["board-c"]
    assert a.chain == "intact" and not a.failed and a.builds == (BUILD,) and a.first_seq == 0
    assert a.records == a.last_seq + 1 and a.canary_passed >= 7 and a.canary_failed == 0 and a.last_hash
    assert b.chain == "broken" and b.failed and dict(b.findings)["file-removed"] == 1 and b.last_hash == a.last_hash
    assert c.chain == "intact" and c.failed and c.canary_failed >= 1 and c.shadow_disagreements == 0

    listed = run("history", "--results", str(results), "--json")
    assert listed.exit_code == 0, listed.output
    doc = json.loads(listed.output)
    assert doc["runs"] == [] and [s["board"] for s in doc["serving"]] == ["board-a", "board-b", "board-c"]
    assert doc["serving"][1]["chain"] == "broken" and doc["serving"][2]["canary_failed"] == c.canary_failed
    table = run("history", "--results", str(results), "--board", "board-b")
    assert table.exit_code == 0 and "1 serving pull" in table.output and "broken" in table.output
    assert "board-a" not in table.output
    assert "serving pull" not in run("history", "--results", str(results), "--build", "dddd").output


def test_a_schema_2_database_migrates_and_keeps_its_runs(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    raw = sqlite3.connect(results / "rkdet.db", isolation_level=None)  # as rkdet with schema 2 wrote it
    MIGRATIONS[0](raw)
    MIGRATIONS[1](raw)
    raw.execute("PRAGMA user_version = 2")
    raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    raw.execute("INSERT INTO boards VALUES ('k', 'rk3588', 's', NULL, 'lab-1', 'serial')")
    raw.execute("INSERT INTO runs(folder, run_id, board, build, core_mask, backend, started_unix, status, accepted, "
                "deterministic, emulated, clocks, inferences, recorded_unix) "
                "VALUES ('lab-1/r0', 'r0', 'k', ?, '0', 'rknnlite', 1.0, 'complete', 1, 1, 1, '{}', 3, 0)", (BUILD,))
    raw.close()
    conn = connect(results)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    (kept,) = load_runs(conn)
    assert kept.folder == "lab-1/r0" and kept.board.label == "lab-1"
    assert load_serving(conn) == []
    conn.close()
    log = tmp_path / "lab-1"
    serve(log, 150)
    assert run("audit", "verify", str(log), "--fingerprint", BUILD, "--results", str(results)).exit_code == 0
    doc = json.loads(run("history", "--results", str(results), "--json").output)
    assert [r["run_id"] for r in doc["runs"]] == ["r0"] and doc["serving"][0]["board"] == "lab-1"


def test_a_schema_3_database_without_the_serving_table_is_refused(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    connect(results).close()
    with sqlite3.connect(results / "rkdet.db") as raw:
        raw.execute("DROP TABLE serving")
    before = (results / "rkdet.db").read_bytes()
    with pytest.raises(InputError, match="no table serving"):
        connect(results)
    assert (results / "rkdet.db").read_bytes() == before
    bad = run("audit", "verify", str(tmp_path / "nolog"), "--fingerprint", BUILD, "--results", str(results))
    assert bad.exit_code == 2 and "no table serving" in bad.output
