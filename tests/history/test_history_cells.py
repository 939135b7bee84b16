"""A run folder of several cells (core masks in one pinned session) is one recorded run per cell."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from history_helpers import make_cells_run, make_run, page_outputs, probe_records
from rkdet.cli import main
from rkdet.errors import InputError
from rkdet.history.db import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, connect, load_runs
from rkdet.history.ingest import read_run, read_runs
from rkdet.history.record import record_folder

T0 = 1_764_000_000.0


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args), env={"COLUMNS": "250"})
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return probe_records(tmp_path_factory.mktemp("probe"))


def pages(seed: int = 1) -> dict[str, list[np.ndarray]]:
    return {"page-0001": page_outputs(seed), "page-0002": page_outputs(seed + 1)}


def test_a_cells_folder_is_one_run_per_cell_with_its_own_hashes(tmp_path: Path, probe) -> None:
    res = tmp_path / "results"
    folder = make_cells_run(res, "b", "r1", probe, {"0": pages(1), "1": None, "0_1_2": pages(5)}, started=T0)
    runs = read_runs(res, folder)
    assert [(r.core_mask, r.result_set) for r in runs] == [("0", "core-0"), ("0_1_2", "core-0_1_2")]  # 1: skipped
    assert runs[0].folder == runs[1].folder == "b/" + folder.relative_to(res / "b").as_posix()
    assert {o.hash for o in runs[0].outputs}.isdisjoint({o.hash for o in runs[1].outputs})
    with pytest.raises(InputError, match="several cells"):
        read_run(res, folder)
    assert record_folder(res, folder) is True
    assert record_folder(res, folder) is False  # idempotent per (folder, cell)
    conn = connect(res)
    stored = load_runs(conn)
    conn.close()
    assert sorted((r.core_mask, r.result_set, len(r.outputs)) for r in stored) == [
        ("0", "core-0", 4), ("0_1_2", "core-0_1_2", 4)]


def test_import_twice_adds_nothing_and_drift_is_per_cell(tmp_path: Path, probe) -> None:
    res = tmp_path / "results"
    make_cells_run(res, "b", "r1", probe, {"0": pages(1), "0_1_2": pages(5)}, started=T0)
    make_run(res, "b", "r0", probe, pages(1), started=T0 - 60, core_mask="0")  # an old single-cell folder
    code, out = cli("history", "import", "--results", str(res))
    assert code == 0 and "imported 3 runs" in out, out
    code, out = cli("history", "import", "--results", str(res))
    assert code == 0 and "imported 0 runs" in out and "(3 already there" in out, out
    with sqlite3.connect(res / "rkdet.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 3
    # the next day: core 0 still gives the same bits, cores 0_1_2 moved
    make_cells_run(res, "b", "r2", probe, {"0": pages(1), "0_1_2": pages(7)}, started=T0 + 86400)
    assert "imported 2 runs" in cli("history", "import", "--results", str(res))[1]
    code, out = cli("history", "--results", str(res), "--json")
    listed = [(r["run_id"], r["core_mask"], r["result_set"], r["vs_baseline"]) for r in json.loads(out)["runs"]]
    assert sorted(listed) == [("r0", "0", None, "baseline"), ("r1", "0", "core-0", "same"),
                              ("r1", "0_1_2", "core-0_1_2", "baseline"), ("r2", "0", "core-0", "same"),
                              ("r2", "0_1_2", "core-0_1_2", "differs")]
    code, out = cli("history", "drift", "--results", str(res), "--json")
    assert code == 1
    (drift,) = json.loads(out)["drift"]
    assert drift["cell"] == "0_1_2/rknnlite" and drift["since"]["run_id"] == "r2"


def test_a_cells_json_naming_a_foreign_folder_is_refused(tmp_path: Path, probe) -> None:
    res = tmp_path / "results"
    folder = make_cells_run(res, "b", "r1", probe, {"0": pages(1)}, started=T0)
    cells = folder / "result" / "cells.json"
    doc = json.loads(cells.read_text())
    doc["cells"][0]["cell"] = "../../.."
    cells.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"cells\.json: .*unexpected cell"):
        read_runs(res, folder)


def test_migration_from_version_1_keeps_runs_and_allows_cells(tmp_path: Path, probe) -> None:
    res = tmp_path / "results"
    old = make_run(res, "b", "r0", probe, pages(1), started=T0, core_mask="0")
    run = read_run(res, old)
    db = res / "rkdet.db"
    raw = sqlite3.connect(db, isolation_level=None)  # a database as rkdet with schema 1 wrote it
    MIGRATIONS[0](raw)
    raw.execute("PRAGMA user_version = 1")
    raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    raw.execute("INSERT INTO boards VALUES (?,?,?,?,?,?)", (run.board.key, run.board.soc, run.board.serial,
                                                           run.board.machine_id, run.board.label,
                                                           run.board.identified_by))
    raw.execute("INSERT INTO runs(folder, run_id, board, build, core_mask, backend, started_unix, status, accepted, "
                "deterministic, emulated, clocks, inferences, recorded_unix) VALUES (?,?,?,?,?,?,?,?,1,1,1,'{}',?,0)",
                (run.folder, run.run_id, run.board.key, run.build, "0", "rknnlite", T0, "complete", run.inferences))
    raw.executemany("INSERT INTO outputs VALUES (1,?,?,?,?,?)",
                    [(o.input, o.position, o.name, o.hash, o.distinct) for o in run.outputs])
    raw.close()

    conn = connect(res)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    (kept,) = load_runs(conn)
    assert kept.folder == run.folder and kept.result_set == "" and kept.outputs == run.outputs
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    conn.close()
    assert record_folder(res, old) is False  # the v1 row is still the folder's record
    make_cells_run(res, "b", "r1", probe, {"0": pages(1), "0_1_2": pages(1)}, started=T0 + 60)
    assert "imported 2 runs" in cli("history", "import", "--results", str(res))[1]
    code, out = cli("history", "drift", "--results", str(res))
    assert code == 0, out
    with sqlite3.connect(db) as check:
        check.execute("PRAGMA foreign_keys = ON")
        check.execute("DELETE FROM runs WHERE folder = ?", (run.folder,))  # outputs still cascade after the rebuild
        assert check.execute("SELECT count(*) FROM outputs").fetchone()[0] == 2 * 2 * 2


def test_the_runs_of_one_pinned_session_name_it(tmp_path: Path, probe) -> None:
    """`deploy --backends A,B` (a fleet board's cells): each run's deploy.json names the session it was a step of;
    the database keeps it (`runs.session`), `rkdet history` shows it, a run deployed alone has none, and a
    session id that is not a plain token is refused like a run id."""
    from rkdet.records.deploy_record import SessionRecord, read_deploy_record, write_deploy_record

    res = tmp_path / "results"
    lite = make_run(res, "b", "r1", probe, pages(1), started=T0, core_mask="0", backend="rknnlite")
    c_api = make_run(res, "b", "r2", probe, pages(1), started=T0 + 5, core_mask="0", backend="rknn_c")
    make_run(res, "b", "r3", probe, pages(1), started=T0 + 60, core_mask="0", backend="rknnlite")  # alone
    for index, folder in enumerate((lite, c_api)):
        record = read_deploy_record(folder / "deploy.json")
        session = SessionRecord(id="20261206T000000Z-abcd", runs=("r1", "r2"), backends=("rknnlite", "rknn_c"),
                                index=index, pinned=True)
        write_deploy_record(folder / "deploy.json", record.with_facts(session=session))
    code, out = cli("history", "import", "--results", str(res))
    assert code == 0 and "imported 3 runs" in out, out
    code, out = cli("history", "--results", str(res), "--json")
    sessions = {r["run_id"]: r["session"] for r in json.loads(out)["runs"]}
    assert sessions == {"r1": "20261206T000000Z-abcd", "r2": "20261206T000000Z-abcd", "r3": None}
    code, out = cli("history", "--results", str(res))
    assert code == 0 and out.count("(session 20261206T000000Z-abcd)") == 2, out
    bad = make_run(res, "b", "r4", probe, pages(1), started=T0 + 90, core_mask="0")
    doc = json.loads((bad / "deploy.json").read_text())  # crafted: the record type itself refuses to make it
    doc["session"] = {"id": "../x y", "runs": ["r4"], "backends": ["rknnlite"], "index": 0, "pinned": True}
    (bad / "deploy.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"field 'id' is '\.\./x y', not a session id"):  # records/ids.py's rule
        read_run(res, bad)
