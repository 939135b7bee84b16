"""The results database survives a kill -9 mid-write (WAL) and concurrent writers lose nothing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from history_helpers import synthetic_run
from rkdet.errors import InputError
from rkdet.history.db import SCHEMA_VERSION, connect, load_runs, record_run

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OUTPUTS_PER_RUN = 50

WRITER = """
import sys
from pathlib import Path
from history_helpers import synthetic_run
from rkdet.history.db import connect, record_run
results, prefix, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = connect(results)
print("ready", flush=True)
sys.stdin.readline()  # start together
i = 0
while count < 0 or i < count:
    assert record_run(conn, synthetic_run(f"{prefix}/run-{i:06d}", %d))
    i += 1
conn.close()
""" % OUTPUTS_PER_RUN


def _writer(results: Path, prefix: str, count: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(results), prefix, str(count)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _counts(db: Path) -> tuple[int, list[int]]:
    with sqlite3.connect(db, timeout=30) as conn:
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        per_run = [n for (n,) in conn.execute(
            "SELECT (SELECT count(*) FROM outputs o WHERE o.run = r.id) FROM runs r")]
    return runs, per_run


def test_kill_9_mid_write_leaves_a_readable_database(tmp_path: Path) -> None:
    proc = _writer(tmp_path, "board/fp/kill", -1)
    try:
        proc.stdin.write("go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _counts(tmp_path / "rkdet.db")[0] < 30:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)  # while it keeps writing
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "rkdet.db-wal").exists()  # the kill left an un-checkpointed WAL behind
    conn = sqlite3.connect(tmp_path / "rkdet.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
    runs, per_run = _counts(tmp_path / "rkdet.db")
    assert runs >= 30
    assert set(per_run) == {OUTPUTS_PER_RUN}  # every run whole: none half-recorded
    conn = connect(tmp_path)  # rkdet reopens it and goes on
    assert record_run(conn, synthetic_run("board/fp/after-kill", OUTPUTS_PER_RUN))
    folders = [r.folder for r in load_runs(conn)]
    conn.close()
    # + the new run, and at most one more: a commit the writer appended to the WAL just before the kill but had
    # not yet put in the WAL index is recovered when the log is next rescanned (a whole run, never a half one)
    assert len(folders) in (runs + 1, runs + 2) and len(set(folders)) == len(folders)
    assert sum(f.startswith("board/fp/after-kill") for f in folders) == 1
    assert set(_counts(tmp_path / "rkdet.db")[1]) == {OUTPUTS_PER_RUN}


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    connect(tmp_path).close()
    procs = [_writer(tmp_path, f"board{i}/fp/run", 50) for i in range(4)]
    for proc in procs:  # released together: they contend for the write lock
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        proc.stdin.close()
        assert proc.wait(timeout=300) == 0
    runs, per_run = _counts(tmp_path / "rkdet.db")
    assert runs == 200
    assert set(per_run) == {OUTPUTS_PER_RUN}
    with sqlite3.connect(tmp_path / "rkdet.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        folders = {f for (f,) in conn.execute("SELECT folder FROM runs")}
    assert folders == {f"board{i}/fp/run/run-{n:06d}" for i in range(4) for n in range(50)}


def test_recording_a_run_twice_adds_nothing(tmp_path: Path) -> None:
    conn = connect(tmp_path)
    assert record_run(conn, synthetic_run("b/f/r1")) is True
    assert record_run(conn, synthetic_run("b/f/r1")) is False
    assert len(load_runs(conn)) == 1
    conn.close()


def test_schema_versions_and_foreign_files(tmp_path: Path) -> None:
    db = tmp_path / "rkdet.db"
    sqlite3.connect(db).close()  # an empty SQLite file: version 0, migrated to the current schema
    connect(tmp_path).close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == 0x726B6474
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(InputError, match=rf"^{db}: schema version 99 was written by a newer rkdet"):
        connect(tmp_path)
    db.unlink()
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (x)")
    with pytest.raises(InputError, match=rf"^{db}: an SQLite file with other tables"):
        connect(tmp_path)
    db.write_text("not a database at all, just text " * 200)
    with pytest.raises(InputError, match=rf"^{db}: not a usable SQLite database"):
        connect(tmp_path)
    db.unlink()
    db.symlink_to(tmp_path / "elsewhere.db")
    with pytest.raises(InputError, match=rf"^{db}: not a regular file"):
        connect(tmp_path)
    assert not (tmp_path / "elsewhere.db").exists()
    db.unlink()
    with pytest.raises(InputError, match="no history database yet"):
        connect(tmp_path, create=False)
    assert not db.exists()
