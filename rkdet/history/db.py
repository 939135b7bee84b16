"""The results database `<results>/rkdet.db`: stdlib sqlite3, WAL, a versioned schema.

Why SQLite in WAL mode: a run is recorded in one transaction, so a process killed mid-write
(kill -9, power cut with synchronous=FULL) leaves the database as it was before that run; readers
never block the writer; several deploys finishing together queue on a busy timeout instead of
failing. The schema version is `PRAGMA user_version` (and `application_id` marks the file as
rkdet's); `migrate` brings an older file up to `SCHEMA_VERSION` step by step, inside one
IMMEDIATE transaction so two processes opening a new database at once cannot both migrate it.
The schema is documented in docs/FORMATS.md ("Results database").
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rkdet.errors import InputError
from rkdet.history.accuracy import AccuracyEntry
from rkdet.history.ingest import BoardIdentity, BoardState, OutputHash, RunRecord
from rkdet.history.serving import ServingPull
from rkdet.records.ids import check_run_id

DB_NAME = "rkdet.db"
SCHEMA_VERSION = 5
APPLICATION_ID = 0x726B6474  # "rkdt"
BUSY_TIMEOUT_S = 60.0


def _v1(conn: sqlite3.Connection) -> None:
    conn.execute("""CREATE TABLE boards (
        key TEXT PRIMARY KEY,
        soc TEXT, serial TEXT, machine_id TEXT,
        label TEXT NOT NULL,
        identified_by TEXT NOT NULL)""")
    conn.execute("""CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        folder TEXT NOT NULL UNIQUE,
        run_id TEXT NOT NULL,
        board TEXT NOT NULL REFERENCES boards(key),
        build TEXT NOT NULL,
        core_mask TEXT NOT NULL,
        backend TEXT NOT NULL,
        started_unix REAL,
        status TEXT NOT NULL,
        accepted INTEGER NOT NULL,
        deterministic INTEGER NOT NULL,
        emulated INTEGER,
        kernel TEXT, driver TEXT, runtime TEXT, board_model TEXT,
        clocks TEXT NOT NULL,
        inferences INTEGER NOT NULL,
        recorded_unix REAL NOT NULL)""")
    conn.execute("CREATE INDEX runs_by_cell ON runs(board, build, core_mask, backend, started_unix)")
    conn.execute("""CREATE TABLE outputs (
        run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        input TEXT NOT NULL,
        position INTEGER NOT NULL,
        name TEXT NOT NULL,
        hash TEXT NOT NULL,
        distinct_sets INTEGER NOT NULL,
        PRIMARY KEY (run, input, position)) WITHOUT ROWID""")


_RUN_COLUMNS = ("id, folder, run_id, board, build, core_mask, backend, started_unix, status, accepted, deterministic, "
                "emulated, kernel, driver, runtime, board_model, clocks, inferences, recorded_unix")


def _v2(conn: sqlite3.Connection) -> None:
    """A run folder of several cells (core masks run in one session) is one run per cell: `runs` gains
    `result_set` ("" = the folder's single result set, else the cell's "core-<mask>") and (folder,
    result_set) is the unique key instead of folder. SQLite cannot drop a UNIQUE constraint, so the table
    is rebuilt (ids kept, so `outputs` keeps pointing at its runs; foreign keys are off while migrating)."""
    conn.execute("""CREATE TABLE runs_v2 (
        id INTEGER PRIMARY KEY,
        folder TEXT NOT NULL,
        result_set TEXT NOT NULL DEFAULT '',
        run_id TEXT NOT NULL,
        board TEXT NOT NULL REFERENCES boards(key),
        build TEXT NOT NULL,
        core_mask TEXT NOT NULL,
        backend TEXT NOT NULL,
        started_unix REAL,
        status TEXT NOT NULL,
        accepted INTEGER NOT NULL,
        deterministic INTEGER NOT NULL,
        emulated INTEGER,
        kernel TEXT, driver TEXT, runtime TEXT, board_model TEXT,
        clocks TEXT NOT NULL,
        inferences INTEGER NOT NULL,
        recorded_unix REAL NOT NULL,
        UNIQUE (folder, result_set))""")
    conn.execute(f"INSERT INTO runs_v2({_RUN_COLUMNS}) SELECT {_RUN_COLUMNS} FROM runs")
    conn.execute("DROP TABLE runs")
    conn.execute("ALTER TABLE runs_v2 RENAME TO runs")
    conn.execute("CREATE INDEX runs_by_cell ON runs(board, build, core_mask, backend, started_unix)")


def _v3(conn: sqlite3.Connection) -> None:
    """Serving beside deploy runs: one row per verified pull of a board's audit log (rkdet.history.serving).
    `board` is the label the pull was given, not a `boards` key (an audit log carries no board identity);
    (folder, last_hash) is unique, so verifying the same pull twice records it once."""
    conn.execute("""CREATE TABLE serving (
        id INTEGER PRIMARY KEY,
        board TEXT NOT NULL,
        folder TEXT NOT NULL,
        builds TEXT NOT NULL,
        records INTEGER NOT NULL,
        first_seq INTEGER, last_seq INTEGER,
        canary_passed INTEGER NOT NULL,
        canary_failed INTEGER NOT NULL,
        shadow_disagreements INTEGER NOT NULL,
        chain TEXT NOT NULL,
        failed INTEGER NOT NULL,
        findings TEXT NOT NULL,
        last_hash TEXT NOT NULL DEFAULT '',
        verified_unix REAL NOT NULL,
        UNIQUE (folder, last_hash))""")
    conn.execute("CREATE INDEX serving_by_board ON serving(board, verified_unix)")


def _v4(conn: sqlite3.Connection) -> None:
    """Accuracy beside runs and serving: one row per variant of a recorded accuracy.json
    (rkdet.history.accuracy); (record_sha256, position) is unique, so recording a file twice adds nothing."""
    conn.execute("""CREATE TABLE accuracy (
        id INTEGER PRIMARY KEY,
        build TEXT NOT NULL,
        build_name TEXT NOT NULL,
        position INTEGER NOT NULL,
        variant TEXT NOT NULL,
        metric TEXT NOT NULL,
        value REAL NOT NULL,
        labels_sha256 TEXT NOT NULL,
        labels TEXT NOT NULL,
        samples INTEGER NOT NULL,
        record_sha256 TEXT NOT NULL,
        recorded_unix REAL NOT NULL,
        UNIQUE (record_sha256, position))""")
    conn.execute("CREATE INDEX accuracy_by_labels ON accuracy(labels_sha256, variant, metric, recorded_unix)")


def _v5(conn: sqlite3.Connection) -> None:
    """A run made as one step of a pinned session (`deploy --backends A,B`, a fleet board's cells) names it:
    `runs.session` is deploy.json's session id (NULL for a run deployed on its own), so history shows which
    runs ran under one pin."""
    conn.execute("ALTER TABLE runs ADD COLUMN session TEXT")


# MIGRATIONS[v] takes a database at schema version v to v + 1.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2, _v3, _v4, _v5)
assert len(MIGRATIONS) == SCHEMA_VERSION


def db_path(results: Path) -> Path:
    return Path(results) / DB_NAME


def _check_file(path: Path) -> None:
    """The database (and its -wal/-shm) must be plain files: never a symlink, FIFO or device."""
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            mode = os.lstat(p).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise InputError(f"{p}: not a regular file (a symlink, FIFO or device); move it away")


_TABLES = frozenset({"boards", "runs", "outputs"})


def _refusal(path: Path, version: int, app: int, tables: set[str]) -> str | None:
    """Why the file at `path` is not an rkdet results database this rkdet may open, or None."""
    if app not in (0, APPLICATION_ID) or (app == 0 and version != 0):
        return f"{path}: not an rkdet results database (application_id {app:#x}); move it away"
    if version == 0 and tables:
        return f"{path}: an SQLite file with other tables, not an rkdet results database; move it away"
    if version < 0:
        return f"{path}: schema version {version} is not one rkdet writes; the file is damaged, move it away"
    if version > SCHEMA_VERSION:
        return (f"{path}: schema version {version} was written by a newer rkdet (this one knows {SCHEMA_VERSION}); "
                "upgrade rkdet")
    later = {"serving"} if version == 3 else {"serving", "accuracy"} if version >= 4 else set()
    missing = sorted((_TABLES | later) - tables) if version > 0 else []
    if missing:
        return (f"{path}: schema version {version} but no table {', '.join(missing)}; the database is damaged, "
                "move it away and run `rkdet history import`")
    return None


def check_read_only(path: Path) -> None:
    """Refuse a foreign or damaged file BEFORE anything writes to it: opened read-only (SQLite URI
    mode=ro), so a refused file keeps every byte (the WAL switch would rewrite header bytes 18-19)."""
    try:
        ro = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as err:
        raise InputError(f"{path}: cannot open ({err}); check the folder's permissions") from None
    try:
        version = ro.execute("PRAGMA user_version").fetchone()[0]
        app = ro.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in ro.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as err:
        raise InputError(f"{path}: not a usable SQLite database ({err}); move it away and run "
                         "`rkdet history import`") from None
    finally:
        ro.close()
    why = _refusal(path, version, app, tables)
    if why is not None:
        raise InputError(why)


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the schema to SCHEMA_VERSION; returns the version found. Refuses a newer or foreign file."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        why = _refusal(path, version, app, tables)  # again, inside the lock: another process may have raced
        if why is not None:
            raise InputError(why)
        for step in range(version, SCHEMA_VERSION):
            MIGRATIONS[step](conn)
        bad = conn.execute("PRAGMA foreign_key_check").fetchone()
        if bad is not None:
            raise InputError(f"{path}: a row of {bad[0]} points at a missing {bad[2]} row; move the database away "
                             "and run `rkdet history import`")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("COMMIT")
        return version
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def connect(results: Path, *, create: bool = True) -> sqlite3.Connection:
    """Open (and with `create`, make) `<results>/rkdet.db`: WAL, synchronous FULL, busy timeout, migrated."""
    path = db_path(results)
    _check_file(path)
    if not path.exists():
        if not create:
            raise InputError(f"{path}: no history database yet; run `rkdet history import --results {results}`")
        if not Path(results).is_dir():
            raise InputError(f"{results}: no such results folder")
    else:
        check_read_only(path)
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as err:
        raise InputError(f"{path}: cannot open ({err}); check the folder's permissions") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        migrate(conn, path)  # with foreign keys off: a migration may rebuild a table others point at
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.OperationalError as err:  # locked past the busy timeout, read-only, disk full
        conn.close()
        raise InputError(f"{path}: {err}; check that the folder is writable and no process holds the database") \
            from None
    except sqlite3.DatabaseError as err:
        conn.close()
        raise InputError(f"{path}: not a usable SQLite database ({err}); move it away and run "
                         "`rkdet history import`") from None
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on any error, Ctrl-C included): all of a run or none of it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def recorded_runs(conn: sqlite3.Connection, folder: str) -> int:
    """How many runs of a run folder (relative to the results folder) the database has (0: not recorded;
    a folder's cells are recorded together, by `record_runs`)."""
    return int(conn.execute("SELECT count(*) FROM runs WHERE folder = ?", (folder,)).fetchone()[0])


def record_runs(conn: sqlite3.Connection, runs: list[RunRecord]) -> int:
    """Store a run folder's records (one per cell) in one transaction; how many were new (idempotent)."""
    with transaction(conn):
        return sum(_insert(conn, run) for run in runs)


def record_run(conn: sqlite3.Connection, run: RunRecord) -> bool:
    """Store one run with its output hashes; False when its (folder, result set) is already recorded."""
    with transaction(conn):
        return _insert(conn, run)


def _insert(conn: sqlite3.Connection, run: RunRecord) -> bool:
    b, s = run.board, run.state
    conn.execute("INSERT INTO boards(key, soc, serial, machine_id, label, identified_by) VALUES (?,?,?,?,?,?) "
                 "ON CONFLICT(key) DO NOTHING", (b.key, b.soc, b.serial, b.machine_id, b.label, b.identified_by))
    cur = conn.execute(
        "INSERT INTO runs(folder, result_set, run_id, board, build, core_mask, backend, started_unix, status, "
        "accepted, deterministic, emulated, kernel, driver, runtime, board_model, clocks, inferences, recorded_unix, "
        "session) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(folder, result_set) DO NOTHING",
        (run.folder, run.result_set, run.run_id, b.key, run.build, run.core_mask, run.backend, run.started_unix,
         run.status, int(run.accepted), int(run.deterministic), None if run.emulated is None else int(run.emulated),
         s.kernel, s.driver, s.runtime, s.model, json.dumps(dict(s.clocks), sort_keys=True), run.inferences,
         time.time(), run.session))
    if cur.rowcount == 0:
        return False
    conn.executemany("INSERT INTO outputs(run, input, position, name, hash, distinct_sets) VALUES (?,?,?,?,?,?)",
                     [(cur.lastrowid, o.input, o.position, o.name, o.hash, o.distinct) for o in run.outputs])
    return True


def _clocks(conn: sqlite3.Connection, rid: int, text: object) -> tuple[tuple[str, str], ...]:
    """A row's clocks column (JSON object of text), or one line naming the database and the row."""
    try:
        doc = json.loads(text) if isinstance(text, str) and len(text) <= 1 << 20 else None
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        where = next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), DB_NAME)
        raise InputError(f"{where}: runs row {rid}: clocks is not a JSON object of text; the database is damaged, "
                         "move it away and run `rkdet history import`")
    return tuple(sorted(doc.items()))


def _where(conn: sqlite3.Connection) -> str:
    """The database file's path, for a refusal that names it."""
    return next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), DB_NAME)


def _row_id(conn: sqlite3.Connection, rid: int, column: str, value: object, *, optional: bool = False) -> str | None:
    """A runs row's run or session id, checked by records/ids.py's one definition: an id read back from the
    database is shown, joined into names and written into reports, and a crafted rkdet.db may hold one with a
    newline, escape codes or '../'. Refused in one line naming the database, the row and what to do."""
    if optional and value is None:
        return None
    return check_run_id(value, f"runs row {rid}: {column}", _where(conn),
                        "the database is damaged or crafted: move it away and run `rkdet history import`")


def load_runs(conn: sqlite3.Connection) -> list[RunRecord]:
    """Every recorded run with its outputs, ordered by (board, build, cell, start time, id)."""
    boards = {row[0]: BoardIdentity(*row) for row in conn.execute(
        "SELECT key, soc, serial, machine_id, label, identified_by FROM boards")}
    outputs: dict[int, list[OutputHash]] = {}
    for run_id, *rest in conn.execute(
            "SELECT run, input, position, name, hash, distinct_sets FROM outputs ORDER BY run, input, position"):
        outputs.setdefault(run_id, []).append(OutputHash(*rest))
    runs = []
    for row in conn.execute(
            "SELECT id, folder, result_set, run_id, board, build, core_mask, backend, started_unix, status, accepted, "
            "deterministic, emulated, kernel, driver, runtime, board_model, clocks, inferences, session FROM runs "
            "ORDER BY board, build, core_mask, backend, started_unix IS NULL, started_unix, id"):
        (rid, folder, result_set, run_id, board, build, core_mask, backend, started, status, accepted, deterministic,
         emulated, kernel, driver, runtime, model, clocks, inferences, session) = row
        state = BoardState(kernel, driver, runtime, model, _clocks(conn, rid, clocks))
        run_id = _row_id(conn, rid, "run_id", run_id)
        session = _row_id(conn, rid, "session", session, optional=True)
        runs.append(RunRecord(folder=folder, run_id=run_id, board=boards[board], state=state, build=build,
                              core_mask=core_mask, backend=backend, started_unix=started, status=status,
                              accepted=bool(accepted), deterministic=bool(deterministic),
                              emulated=None if emulated is None else bool(emulated), inferences=inferences,
                              outputs=tuple(outputs.get(rid, ())), result_set=result_set,
                              session=session))
    return runs


def record_serving(conn: sqlite3.Connection, pull: ServingPull) -> bool:
    """Store one verified pull; False when the same (folder, last hash) is already recorded."""
    with transaction(conn):
        cur = conn.execute(
            "INSERT INTO serving(board, folder, builds, records, first_seq, last_seq, canary_passed, canary_failed, "
            "shadow_disagreements, chain, failed, findings, last_hash, verified_unix) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT(folder, last_hash) DO NOTHING",
            (pull.board, pull.folder, json.dumps(list(pull.builds)), pull.records, pull.first_seq, pull.last_seq,
             pull.canary_passed, pull.canary_failed, pull.shadow_disagreements, pull.chain, int(pull.failed),
             json.dumps(dict(pull.findings), sort_keys=True), pull.last_hash or "", pull.verified_unix))
        return cur.rowcount > 0


def _json_column(conn: sqlite3.Connection, rid: int, column: str, text: object, want: type) -> object:
    """A serving row's JSON column (a list of text, or an object of counts), or one line naming the row."""
    try:
        doc = json.loads(text) if isinstance(text, str) and len(text) <= 1 << 20 else None
    except (ValueError, RecursionError):
        doc = None
    items = doc if isinstance(doc, list) else list(doc.items()) if isinstance(doc, dict) else None
    good = isinstance(doc, want) and items is not None and all(
        isinstance(i, str) if want is list else isinstance(i[0], str) and type(i[1]) is int for i in items)
    if not good:
        where = next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), DB_NAME)
        raise InputError(f"{where}: serving row {rid}: {column} is not what rkdet writes; the database is damaged, "
                         "move it away (serving rows come back with the next `rkdet audit verify --results`)")
    return doc


def load_serving(conn: sqlite3.Connection) -> list[ServingPull]:
    """Every recorded serving pull, ordered by (board, verified time, id)."""
    pulls = []
    for row in conn.execute(
            "SELECT id, board, folder, builds, records, first_seq, last_seq, canary_passed, canary_failed, "
            "shadow_disagreements, chain, failed, findings, last_hash, verified_unix FROM serving "
            "ORDER BY board, verified_unix, id"):
        (rid, board, folder, builds, records, first, last, passed, failed_canaries, disagreements, chain, failed,
         findings, last_hash, verified) = row
        build_list = _json_column(conn, rid, "builds", builds, list)
        counts = _json_column(conn, rid, "findings", findings, dict)
        assert isinstance(build_list, list) and isinstance(counts, dict)
        pulls.append(ServingPull(board=board, folder=folder, builds=tuple(build_list), records=records,
                                 first_seq=first, last_seq=last, canary_passed=passed, canary_failed=failed_canaries,
                                 shadow_disagreements=disagreements, chain=chain, failed=bool(failed),
                                 findings=tuple(sorted(counts.items())), last_hash=last_hash or None,
                                 verified_unix=verified))
    return pulls


def record_accuracy(conn: sqlite3.Connection, entries: tuple[AccuracyEntry, ...]) -> int:
    """Store one accuracy.json's rows in one transaction; how many were new (0: that record is already there)."""
    now = time.time()
    with transaction(conn):
        return sum(conn.execute(
            "INSERT INTO accuracy(build, build_name, position, variant, metric, value, labels_sha256, labels, samples, "
            "record_sha256, recorded_unix) VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(record_sha256, position) DO NOTHING",
            (e.build, e.build_name, e.position, e.variant, e.metric, e.value, e.labels_sha256, e.labels, e.samples,
             e.record_sha256, now)).rowcount for e in entries)


_ACCURACY_TYPES = (str, str, int, str, str, float, str, str, int, str, float)


def load_accuracy(conn: sqlite3.Connection) -> list[AccuracyEntry]:
    """Every recorded accuracy row, oldest first (recorded time, then the row's place in its table); a row
    that is not what rkdet writes (a damaged or edited database) is one line naming it."""
    out = []
    for rid, *row in conn.execute(
            "SELECT id, build, build_name, position, variant, metric, value, labels_sha256, labels, samples, "
            "record_sha256, recorded_unix FROM accuracy ORDER BY recorded_unix, record_sha256, position"):
        good = all(type(v) is t or (t is float and type(v) is int) for v, t in zip(row, _ACCURACY_TYPES)) and (
            0 <= row[5] <= 1 and all(len(v) <= 1000 for v in row if isinstance(v, str)))
        if not good:
            where = next((r[2] for r in conn.execute("PRAGMA database_list") if r[1] == "main"), DB_NAME)
            raise InputError(f"{where}: accuracy row {rid} is not what rkdet writes; the database is damaged, move it "
                             "away (accuracy rows come back with `rkdet history import --accuracy FILE`)")
        out.append(AccuracyEntry(*row[:5], float(row[5]), *row[6:10], float(row[10])))
    return out
