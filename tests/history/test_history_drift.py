"""History from real run folders: import (idempotent), baselines, drift and what changed, bad folders."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from history_helpers import edit_json, make_run, page_outputs, probe_records
from rkdet.cli import main

REPO = Path(__file__).resolve().parents[2]
T0 = 1_764_000_000.0
NEW_RUNTIME = "librknnrt version: 2.3.3 (test-drift build@2025-06-01T10:00:00)"


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args), env={"COLUMNS": "250"})
    return res.exit_code, res.output


@pytest.fixture
def pages() -> dict[str, list[np.ndarray]]:
    return {"page-0001": page_outputs(1), "page-0002": page_outputs(2)}


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    tmp = tmp_path_factory.mktemp("probe")
    return {"rk3588": probe_records(tmp), "rk3588-new-runtime": probe_records(tmp, runtime=NEW_RUNTIME),
            "rv1126": probe_records(tmp, "rv1126")}


def moved(pages: dict[str, list[np.ndarray]]) -> dict[str, list[np.ndarray]]:
    """One element of one output of one input changed (by one ULP)."""
    changed = {k: [a.copy() for a in v] for k, v in pages.items()}
    cls = changed["page-0002"][1]
    cls.flat[7] = np.nextafter(cls.flat[7], np.float32(2))
    return changed


def test_drift_names_the_board_the_run_and_the_runtime_change(tmp_path: Path, pages, probes) -> None:
    res = tmp_path / "results"
    make_run(res, "127.0.0.1_2201", "r1", probes["rk3588"], pages, started=T0)
    make_run(res, "127.0.0.1_2201", "r2", probes["rk3588"], pages, started=T0 + 86400)
    make_run(res, "127.0.0.1_2201", "r3", probes["rk3588-new-runtime"], moved(pages), started=T0 + 2 * 86400)
    make_run(res, "127.0.0.1_2202", "r1", probes["rk3588"], pages, started=T0)  # a second board: steady
    make_run(res, "127.0.0.1_2202", "r2", probes["rk3588"], pages, started=T0 + 86400)

    code, out = cli("history", "import", "--results", str(res))
    assert code == 0 and "imported 5 runs" in out, out

    code, out = cli("history", "drift", "--results", str(res), "--json")
    assert code == 1, out
    doc = json.loads(out)
    assert doc["runs"] == 5
    (d,) = doc["drift"]
    assert (d["label"], d["cell"], d["build"]) == ("127.0.0.1_2201", "auto/rknnlite", "ab" * 32)
    assert d["baseline"]["run_id"] == "r1" and d["since"]["run_id"] == "r3" and d["previous"]["run_id"] == "r2"
    old_runtime = probes["rk3588"][[r["record"] for r in probes["rk3588"]].index("runtime")]["version"]
    assert {"what": "librknnrt", "before": old_runtime, "after": NEW_RUNTIME} in d["changes"]
    assert [c["what"] for c in d["changes"]] == ["librknnrt"]  # nothing else changed on the board
    assert [(o["input"], o["output"]) for o in d["outputs"]] == [("page-0002", "cls0")]
    assert d["since"]["runtime"] == NEW_RUNTIME and d["since"]["soc"] == "rk3588"
    assert (d["differing_runs"], d["later_runs"], d["latest_matches"]) == (1, 2, False)

    code, out = cli("history", "drift", "--results", str(res))
    assert code == 1
    assert "DRIFT 127.0.0.1_2201 (rk3588)" in out and "since run r3" in out
    assert f"librknnrt: {old_runtime} -> {NEW_RUNTIME}" in out
    assert "input page-0002 output cls0" in out
    assert "127.0.0.1_2202" not in out.split("\n1 drifted")[0]

    code, out = cli("history", "--results", str(res), "--json")
    assert code == 0
    verdicts = {(r["label"], r["run_id"]): r["vs_baseline"] for r in json.loads(out)["runs"]}
    assert verdicts == {("127.0.0.1_2201", "r1"): "baseline", ("127.0.0.1_2201", "r2"): "same",
                        ("127.0.0.1_2201", "r3"): "differs", ("127.0.0.1_2202", "r1"): "baseline",
                        ("127.0.0.1_2202", "r2"): "same"}
    code, out = cli("history", "drift", "--results", str(res), "--board", "127.0.0.1_2202")
    assert code == 0 and "no drift: 2 runs of 1 board" in out
    code, out = cli("history", "--results", str(res), "--board", "*2201", "--build", "abab")
    assert code == 0 and out.count("127.0.0.1_2201") == 3 and "2202" not in out.split("\n", 1)[1]


def test_import_twice_adds_nothing(tmp_path: Path, pages, probes) -> None:
    res = tmp_path / "results"
    make_run(res, "127.0.0.1_2201", "r1", probes["rk3588"], pages, started=T0)
    make_run(res, "127.0.0.1_2201", "r2", probes["rk3588"], pages, started=T0 + 60)
    failed = make_run(res, "127.0.0.1_2201", "r3", probes["rk3588"], pages, started=T0 + 120)
    edit_json(failed / "deploy.json", status="failed")
    assert "imported 2 runs" in cli("history", "import", "--results", str(res))[1]
    code, out = cli("history", "import", "--results", str(res))
    assert code == 0 and "imported 0 runs" in out and "(2 already there, 1 not completed)" in out
    with sqlite3.connect(res / "rkdet.db") as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM outputs").fetchone()[0] == 2 * 2 * 2  # runs x inputs x outputs
    make_run(res, "127.0.0.1_2201", "r4", probes["rk3588"], pages, started=T0 + 180)
    assert "imported 1 run " in cli("history", "import", "--results", str(res))[1]


def test_baseline_is_the_first_accepted_run_and_cells_are_separate(tmp_path: Path, pages, probes) -> None:
    res = tmp_path / "results"
    other = page_outputs(9)
    # run 1 is not deterministic (page-0001 differs on run 1): recorded, never a baseline
    make_run(res, "b", "r1", probes["rk3588"], pages, started=T0, flaky=("page-0001", 1, other))
    make_run(res, "b", "r2", probes["rk3588"], pages, started=T0 + 60)
    make_run(res, "b", "r3", probes["rk3588"], pages, started=T0 + 120)
    # core mask 0_1_2 gives other bits than core 0 (the #228 pattern): another cell, its own baseline
    make_run(res, "b", "r4", probes["rk3588"], moved(pages), started=T0 + 180, core_mask="0_1_2")
    make_run(res, "b", "r5", probes["rk3588"], moved(pages), started=T0 + 240, core_mask="0_1_2")
    cli("history", "import", "--results", str(res))
    code, out = cli("history", "--results", str(res), "--json")
    runs = {r["run_id"]: r for r in json.loads(out)["runs"]}
    assert runs["r1"]["accepted"] is False and runs["r1"]["deterministic"] is False
    assert [runs[r]["vs_baseline"] for r in ("r1", "r2", "r3", "r4", "r5")] == [
        "no baseline", "baseline", "same", "baseline", "same"]
    assert cli("history", "drift", "--results", str(res))[0] == 0
    # a later non-deterministic run is drift, even when its first outputs match
    make_run(res, "b", "r6", probes["rk3588"], pages, started=T0 + 300, flaky=("page-0002", 1, other))
    cli("history", "import", "--results", str(res))
    code, out = cli("history", "drift", "--results", str(res), "--json")
    assert code == 1
    (d,) = json.loads(out)["drift"]
    assert d["since"]["run_id"] == "r6" and d["outputs"][0]["now"] == "2 distinct output sets in the run"


def test_unknown_board_fields_stay_unknown(tmp_path: Path, pages, probes) -> None:
    res = tmp_path / "results"
    make_run(res, "rv", "r1", probes["rv1126"], pages, started=T0)  # RV1126: no rknpu debugfs
    cli("history", "import", "--results", str(res))
    (run,) = json.loads(cli("history", "--results", str(res), "--json")[1])["runs"]
    assert run["soc"] == "rv1126" and run["driver"] is None and run["serial"] is None
    assert run["machine_id"] is None and run["identified_by"] == "label"
    assert run["clocks"] == {"cpufreq/policy4": "2256000 kHz performance",
                             "devfreq/fdab0000.npu": "1000000000 Hz userspace"}
    assert run["runtime"].startswith("librknn_runtime version")


def test_a_board_with_a_serial_is_the_same_board_at_another_address(tmp_path: Path, pages) -> None:
    """probe.sh's identity record (device-tree serial-number) keys the board: a new address (DHCP, another
    lab port) continues its history, and its drift is judged against the same baseline."""
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    serial = "a1b2c3d4e5f60718"
    old_runtime = probe_records(probe_dir, serial=serial)
    new_runtime = probe_records(probe_dir, runtime=NEW_RUNTIME, serial=serial)
    assert {"record": "identity", "script": "probe", "serial": serial, "machine_id": None,
            "source": "/proc/device-tree/serial-number"} in old_runtime
    res = tmp_path / "results"
    make_run(res, "192.168.1.50", "r1", old_runtime, pages, started=T0)
    make_run(res, "192.168.1.77", "r2", new_runtime, moved(pages), started=T0 + 86400)  # same board, new address
    cli("history", "import", "--results", str(res))
    runs = json.loads(cli("history", "--results", str(res), "--json")[1])["runs"]
    assert {r["board"] for r in runs} == {f"rk3588:serial={serial}"}
    assert {r["identified_by"] for r in runs} == {"serial"} and {r["serial"] for r in runs} == {serial}
    code, out = cli("history", "drift", "--results", str(res), "--json")
    assert code == 1
    (d,) = json.loads(out)["drift"]
    assert d["since"]["run_id"] == "r2"


@pytest.mark.parametrize("damage, where, message", [
    (lambda f: (f / "board.json").write_bytes(b" " * (5 << 20)), "board.json", "more than the 4 MiB"),
    (lambda f: (f / "board.json").write_text('{"records": [{"record": "soc", "script": "probe", "soc": 7}]}'),
     "board.json", "field 'soc' is '7', not a string"),
    (lambda f: (f / "deploy.json").write_text("{not json"), "deploy.json", "unreadable JSON"),
    (lambda f: edit_json(f / "deploy.json", fingerprint="../../etc"), "deploy.json", "fingerprint must be lowercase hex"),
    (lambda f: edit_json(f / "deploy.json", settings={"core_mask": 7}), "deploy.json",
     "settings: field 'core_mask' is 7, not text"),
    (lambda f: edit_json(f / "deploy.json", status="finished"), "deploy.json", "field 'status' is 'finished'"),
    (lambda f: (f / "result" / "index.jsonl").write_text('{"run": 0, "input": "' + "x" * (2 << 20) + '"}\n'),
     "result/index.jsonl", "line longer than 1 MiB"),
    (lambda f: (f / "result" / "index.jsonl").write_text(
        '{"run": 0, "input": "p", "outputs": [{"name": "o", "hash": "zz", "shape": [1], "dtype": "float32"}]}\n'),
     "result/index.jsonl", "is not 64 lowercase hex digits"),
    (lambda f: edit_json(f / "result" / "run.json", started_unix="yesterday"), "result/run.json",
     "started_unix: expected a finite number"),
])
def test_bad_run_folder_is_one_line_exit_2_naming_the_file(tmp_path: Path, pages, probes, damage, where,
                                                           message) -> None:
    res = tmp_path / "results"
    make_run(res, "a", "r1", probes["rk3588"], pages, started=T0)
    bad = make_run(res, "b", "r1", probes["rk3588"], pages, started=T0)
    damage(bad)
    done = subprocess.run([sys.executable, "-m", "rkdet.cli", "history", "import", "--results", str(res)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2, done.stderr
    assert re.match(rf"rkdet: {re.escape(str(bad / where))}(:\d+)?:? ", done.stderr), done.stderr  # file[:line]
    assert message in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    with sqlite3.connect(res / "rkdet.db") as conn:  # what was imported before stays, whole
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [f for (f,) in conn.execute("SELECT folder FROM runs")] == [f"a/{'ab' * 8}/r1"]


def test_history_without_a_database_says_what_to_do(tmp_path: Path) -> None:
    code, out = cli("history", "--results", str(tmp_path))
    assert code == 2 and "no history database yet; run `rkdet history import" in out
    assert not (tmp_path / "rkdet.db").exists()
    code, out = cli("history", "import", "--results", str(tmp_path / "nope"))
    assert code == 2 and "no such results folder" in out


def test_history_tables_print_board_text_literally(tmp_path: Path, pages) -> None:
    res = tmp_path / "results"
    marked = probe_records(tmp_path, runtime="librknnrt version: [red]2.3.3[/red]", kernel="6.1[bold]")
    make_run(res, "127.0.0.1_2201", "r1", marked, pages, started=T0)
    make_run(res, "127.0.0.1_2201", "r2", probe_records(tmp_path), moved(pages), started=T0 + 60)
    cli("history", "import", "--results", str(res))
    code, out = cli("history", "--results", str(res))
    assert code == 0 and "[red]2.3.3[/red]" in out and "6.1[bold]" in out
    code, out = cli("history", "drift", "--results", str(res))
    assert code == 1 and "librknnrt: librknnrt version: [red]2.3.3[/red] ->" in out and "kernel: 6.1[bold] ->" in out


def test_record_folder_is_the_one_call_a_deploy_needs(tmp_path: Path, pages, probes) -> None:
    from rkdet.history.record import record_folder

    res = tmp_path / "results"
    folder = make_run(res, "127.0.0.1_2201", "r1", probes["rk3588"], pages, started=T0)
    assert record_folder(res, folder) is True
    assert record_folder(res, folder) is False
    code, out = cli("history", "import", "--results", str(res))
    assert "imported 0 runs" in out and "(1 already there" in out
