"""Issue 21 §7, §8 (history): a foreign `rkdet.db` is refused read-only (every byte kept); a crafted
run folder or database row is one line naming it, exit 2 (never "internal error")."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from history_helpers import make_run, page_outputs, probe_records
from rkdet.errors import InputError
from rkdet.history.db import connect, load_runs, record_runs
from rkdet.history.ingest import read_runs
from trust_helpers import one_line, rkdet


def _foreign(db: Path) -> bytes:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA application_id = 1234")
        conn.execute("CREATE TABLE mine (x)")
        conn.execute("INSERT INTO mine VALUES ('precious')")
    conn.close()
    return db.read_bytes()


@pytest.mark.parametrize("kind", ["foreign-app", "other-tables", "negative-version", "missing-table"])
def test_a_refused_database_keeps_every_byte(tmp_path: Path, kind: str) -> None:
    db = tmp_path / "rkdet.db"
    if kind == "foreign-app":
        before, says = _foreign(db), "not an rkdet results database"
    else:
        with sqlite3.connect(db) as conn:
            if kind == "other-tables":
                conn.execute("CREATE TABLE notes (x)")
                says = "other tables"
            elif kind == "negative-version":
                conn.execute("PRAGMA user_version = -3")
                conn.execute(f"PRAGMA application_id = {0x726B6474}")
                says = "schema version -3 is not one rkdet writes"
            else:
                conn.execute("CREATE TABLE boards (key)")
                conn.execute("PRAGMA user_version = 2")
                conn.execute(f"PRAGMA application_id = {0x726B6474}")
                says = "no table outputs, runs"
        conn.close()
        before = db.read_bytes()
    assert before[18:20] == b"\x01\x01"  # rollback journal, not WAL
    with pytest.raises(InputError) as err:
        connect(tmp_path)
    assert str(err.value).startswith(f"{db}: ") and says in str(err.value)
    assert db.read_bytes() == before  # byte-identical: no WAL switch (header bytes 18-19), no migration
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()
    proc = rkdet(["history", "import", "--results", tmp_path])
    assert proc.returncode == 2 and says in one_line(proc)
    assert db.read_bytes() == before


def _run(tmp_path: Path) -> tuple[Path, Path]:
    results = tmp_path / "results"
    folder = make_run(results, "board1", "20260101T000000Z-abcd", probe_records(tmp_path),
                      {"img0": page_outputs(0)}, started=1_700_000_000.0)
    return results, folder


@pytest.mark.parametrize("case", ["deep-deploy", "huge-started", "run-id-control", "run-id-slash"])
def test_a_crafted_run_folder_is_one_line(tmp_path: Path, case: str) -> None:
    results, folder = _run(tmp_path)
    if case == "deep-deploy":
        target, says = folder / "deploy.json", "nested deeper than 64"
        target.write_text("[" * 100_000 + "]" * 100_000)
    elif case == "huge-started":
        target, says = folder / "result" / "run.json", "integer literal"
        doc = json.loads(target.read_text())
        target.write_text(json.dumps(doc)[:-1] + ', "started_unix": 1' + "0" * 4000 + "}")
    else:
        target = folder / "deploy.json"
        doc = json.loads(target.read_text())
        doc["run_id"] = "run\x1b[2J\u202e" if case == "run-id-control" else "../../etc"
        target.write_text(json.dumps(doc))
        says = "run_id"
    with pytest.raises(InputError) as err:
        read_runs(results, folder)
    assert str(target) in str(err.value) and says in str(err.value)
    assert "\x1b" not in str(err.value) and "\u202e" not in str(err.value)
    proc = rkdet(["history", "import", "--results", results])
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc)
    assert str(target) in line and "\x1b" not in line


def test_a_bad_clocks_row_is_one_line(tmp_path: Path) -> None:
    results, folder = _run(tmp_path)
    conn = connect(results)
    try:
        record_runs(conn, read_runs(results, folder))
        conn.execute("UPDATE runs SET clocks = '[1, 2'")
        with pytest.raises(InputError) as err:
            load_runs(conn)
    finally:
        conn.close()
    assert str(results / "rkdet.db") in str(err.value) and "clocks" in str(err.value)
    proc = rkdet(["history", "--results", results])
    assert proc.returncode == 2 and "clocks" in one_line(proc)
