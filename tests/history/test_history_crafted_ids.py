"""A crafted rkdet.db: a run id or session id read back from a `runs` row is checked by records/ids.py's one
definition where the rows are read (`load_runs`), so `rkdet history`, `history drift`, the fleet's drift notes
and every report built from them never show, join or write an id with a newline, escape codes, U+202E, '../' or
megabytes: one line naming the database, the row and what to do, exit 2."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from history_helpers import synthetic_run
from rkdet.cli import main
from rkdet.errors import EXIT_BAD_INPUT, InputError
from rkdet.history.db import connect, load_runs, record_run

CRAFTED = {
    "newline": "20261206T210000Z-beef\nrkdet: FLEET AGREES",
    "escape": "20261206T210000Z-beef\x1b[2J\x1b]0;pwned\x07",
    "bidi": "20261206T210000Z-\u202efeeb",
    "dotdot": "../../x",
    "over-long": "a" * 5000,
}


def _crafted_db(tmp_path: Path, column: str, value: str) -> Path:
    conn = connect(tmp_path)
    record_run(conn, synthetic_run("b/f/20261206T205959Z-cafe"))
    record_run(conn, synthetic_run("b/f/20261206T210000Z-beef"))
    conn.close()
    with sqlite3.connect(tmp_path / "rkdet.db") as raw:  # what a colleague's crafted database holds
        raw.execute(f"UPDATE runs SET {column} = ? WHERE folder = 'b/f/20261206T210000Z-beef'", (value,))
    raw.close()
    return tmp_path / "rkdet.db"


def _clean_line(text: str, db: Path) -> None:
    assert text.count("\n") == 0, text
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text
    assert str(db) in text and "runs row" in text and "rkdet history import" in text, text
    assert "not a run folder" not in text, text  # a database row: the advice is about the database alone
    assert len(text) < 600, len(text)


@pytest.mark.parametrize("column", ["run_id", "session"])
@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_id_in_a_runs_row_is_refused_where_rows_are_read(tmp_path: Path, column: str, case: str) -> None:
    db = _crafted_db(tmp_path, column, CRAFTED[case])
    conn = connect(tmp_path, create=False)
    try:
        with pytest.raises(InputError) as err:
            load_runs(conn)
    finally:
        conn.close()
    _clean_line(str(err.value), db)
    assert column in str(err.value)


@pytest.mark.parametrize("command", [["history"], ["history", "drift"], ["history", "--json"]])
@pytest.mark.parametrize("case", ["newline", "escape", "bidi"])
def test_history_commands_refuse_a_crafted_id_in_one_clean_line(tmp_path: Path, command: list[str], case: str) -> None:
    db = _crafted_db(tmp_path, "run_id", CRAFTED[case])
    res = CliRunner().invoke(main, [*command, "--results", str(tmp_path)], env={"COLUMNS": "250"})
    assert res.exit_code == EXIT_BAD_INPUT, res.output
    lines = res.output.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("rkdet: "), res.output
    _clean_line(lines[0], db)
    assert "FLEET AGREES" not in lines[0] or "\\n" in lines[0]


def test_ids_rkdet_makes_and_a_run_of_no_session_still_load(tmp_path: Path) -> None:
    conn = connect(tmp_path)
    record_run(conn, synthetic_run("b/f/20261206T210000Z-beef"))
    runs = load_runs(conn)
    conn.close()
    assert [(r.run_id, r.session) for r in runs] == [("20261206T210000Z-beef", None)]
