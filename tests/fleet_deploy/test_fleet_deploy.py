"""`rkdet fleet deploy` end to end: real emulated boards of mixed SoCs (rk3588, rk3568) from an
Ansible inventory, the real CLI in a subprocess, builds for both NPU families.

What is proved: every board runs every cell it can (a core mask the SoC lacks is skipped and said);
boards that agree give one determinism class and exit 0 with fleet.json, report.html and JUnit XML
that say so; a board whose emulated runtime flips one bit (TEST CONTROL fault.json) gives a second
class, exit 1, the first difference named (input, output, element, values) and, because the same
boards ran before, drift from the history in the verdict; an unreachable board is exit 3 while the
others complete; a failing canary stops the fleet before any other board is touched; and
--max-fail-percent stops starting boards.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fleet_helpers import Lab, fleet_deploy, lab, rkdet

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plain_words import html_visible_text, junit_text, python_spellings  # noqa: E402

MATRIX = ("--matrix", "core_mask=0,0_1_2")
FAULT = {"occurrence": 0, "input_sha256": None, "output": 0, "index": 5, "bit": 1}


def _fleet_json(out: Path) -> tuple[dict, Path]:
    found = sorted((out / "fleet").glob("*/fleet.json"))
    assert found, f"no fleet.json under {out}"
    return json.loads(found[-1].read_text()), found[-1].parent


def _verdict(proc) -> str:  # type: ignore[no-untyped-def]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    text = " ".join(proc.stderr.split())  # the log console wraps long lines
    for word in ("FLEET AGREES", "FLEET DIFFERS", "NOT ALL BOARDS RAN"):
        if word in text:
            return text[text.index(word):]
    raise AssertionError(proc.stderr[-3000:])


@pytest.fixture(scope="module")
def lab3(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    with lab(tmp_path_factory.mktemp("lab"), [("a", "rk3588"), ("b", "rk3588"), ("c", "rk3568")],
             dead=["gone1", "gone2", "gone3", "gone4"]) as running:
        yield running


@pytest.fixture(scope="module")
def first_run(lab3: Lab, build_args: list[str], tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("results")
    junit = out / "junit.xml"
    proc = fleet_deploy(lab3, lab3.inventory(), out, *MATRIX, "--limit", "rk3588:rk3568", "--junit", str(junit),
                        "--json", builds=build_args)
    return proc, out, junit


def test_boards_that_agree_are_one_class_exit_0(first_run, lab3: Lab) -> None:  # type: ignore[no-untyped-def]
    proc, out, junit = first_run
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert _verdict(proc).startswith("FLEET AGREES: 1 determinism class over 5 board×cell results of 3 boards")
    doc, folder = _fleet_json(out)
    assert json.loads(proc.stdout) == doc
    assert doc["schema"] == "rkdet.fleet/1" and doc["exit_code"] == 0 and doc["matrix"] == ["0/rknnlite", "0_1_2/rknnlite"]
    boards = {b["name"]: b for b in doc["boards"]}
    assert set(boards) == {"a", "b", "c"} and all(b["status"] == "complete" for b in boards.values())
    assert [b["name"] for b in doc["boards"] if b["canary"]] == ["a"]
    assert boards["c"]["board"]["soc"] == "rk3568" and boards["c"]["fingerprint"] != boards["a"]["fingerprint"]
    for b in boards.values():  # a published folder names no workstation path: builds relative to it
        assert not Path(b["build"]).is_absolute() and (folder / b["build"] / "manifest.json").is_file()
    assert all(not Path(x["folder"]).is_absolute() for x in doc["settings"]["builds"])
    skipped = [c for b in doc["boards"] for c in b["cells"] if c["status"] == "skipped"]
    assert [(c["cell"], c["reason"]) for c in skipped] == [("0_1_2/rknnlite", "rk3568 has 1 NPU core; core mask 0_1_2 needs 3")]
    for b in boards.values():  # each board's ordinary run folder, linked relative to the fleet run's folder
        assert b["board"]["runtime"] and b["board"]["clocks"] and b["board"]["max_temp_mc"]
        for c in b["cells"]:
            if c["status"] == "complete":
                assert not Path(c["run_folder"]).is_absolute()
                run = (folder / c["run_folder"]).resolve()
                assert (run / "deploy.json").is_file() and run.parent.parent.parent == out.resolve()
                assert c["class"] == "A" and c["deploy_exit"] == 0
    for name in ("a", "b"):  # the core-mask cells of a board: ONE pinned session, one run folder, a result set each
        first, second = boards[name]["cells"]
        assert first["run_folder"] == second["run_folder"] and first["run_id"] == second["run_id"]
        run = folder / first["run_folder"]
        assert [c["cell"] for c in json.loads((run / "result" / "cells.json").read_text())["cells"]] == [
            "core-0", "core-0_1_2"]
        job = (run / "job.log").read_text()
        assert job.count('"record":"state"') == 1  # pinned once for both cells
        assert first["verdict"].startswith("SAME") and second["verdict"].startswith("SAME")  # each cell's own line
    for b in boards.values():  # a board of ONE runner is a session of one step, like a board of several
        done = [c for c in b["cells"] if c["status"] == "complete"]
        record = json.loads((folder / done[0]["run_folder"] / "deploy.json").read_text())
        session = record["session"]
        assert session["runs"] == [record["run_id"]] and session["backends"] == ["rknnlite"]
        assert session["index"] == 0 and session["pinned"] is True
        assert {c["session"] for c in done} == {session["id"]}  # fleet.json names it too
        pins = json.loads((folder / done[0]["run_folder"] / "pin.json").read_text())["records"]
        assert [(r["index"], r["at"]) for r in pins if r["record"] == "clocks"] == [(0, "before"), (0, "after")]
    assert (folder / boards["c"]["cells"][0]["run_folder"] / "result" / "run.json").is_file()  # one cell: one set
    assert [(k["name"], k["size"]) for k in doc["classes"]] == [("A", 5)] and doc["differences"] == []
    # JUnit: one test case per board × cell, nothing failed, the skip said
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == \
        ("6", "0", "0", "1")
    cases = {(tc.get("classname"), tc.get("name")): tc for tc in suite.iter("testcase")}
    assert set(cases) == {(f"rkdet.fleet.{b}", c) for b in "abc" for c in ("0/rknnlite", "0_1_2/rknnlite")}
    assert cases[("rkdet.fleet.c", "0_1_2/rknnlite")].find("skipped") is not None
    assert all(tc.find("failure") is None and tc.find("error") is None for tc in cases.values())
    page = (folder / "report.html").read_text()
    assert "FLEET AGREES" in page and page.count('class="cls"') >= 5 and "127.0.0.1" in page
    assert "/cells/core-0_1_2/report.html" in page  # a cell of a session links its own report
    with sqlite3.connect(out / "rkdet.db") as db:  # every completed cell recorded in the history
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 5
        assert db.execute("SELECT count(*) FROM runs WHERE session IS NULL").fetchone()[0] == 0
    for text in (proc.stderr, junit_text(junit.read_text()), html_visible_text(page)):  # issue 36 §2
        assert python_spellings(text) == [], python_spellings(text)


def test_a_flipped_bit_is_a_second_class_exit_1_and_drift(first_run, lab3: Lab, build_args: list[str]) -> None:  # type: ignore[no-untyped-def]
    _, out, _ = first_run
    junit = out / "junit-2.xml"
    lab3.arm_fault("b", FAULT)  # board b's runtime now flips bit 1 of element 5 of output 0 (first inference)
    try:
        proc = fleet_deploy(lab3, lab3.inventory(), out, *MATRIX, "--limit", "rk3588:rk3568", "--junit", str(junit),
                            builds=build_args)
    finally:
        lab3.arm_fault("b", None)
    assert proc.returncode == 1, proc.stderr[-4000:]
    verdict = _verdict(proc)
    assert verdict.startswith("FLEET DIFFERS: 2 determinism classes over 5 board×cell results"), verdict
    assert "majority A (3); departing: b 0/rknnlite (B), b 0_1_2/rknnlite (B)" in verdict
    assert "drift from history: 2 board×cell moved from its baseline" in verdict
    doc, _ = _fleet_json(out)
    assert [(k["name"], sorted((m["board"], m["cell"]) for m in k["members"])) for k in doc["classes"]] == [
        ("A", [("a", "0/rknnlite"), ("a", "0_1_2/rknnlite"), ("c", "0/rknnlite")]),
        ("B", [("b", "0/rknnlite"), ("b", "0_1_2/rknnlite")])]
    (diff,) = doc["differences"]
    first_input = sorted(p.stem for p in Path(build_args[1]).glob("golden/inputs/*.npy"))[0]
    assert (diff["a"], diff["b"], diff["input"], diff["index"], diff["outputs_differing"]) == ("A", "B", first_input, 5, 1)
    assert diff["output"] and diff["value_a"] != diff["value_b"] and diff["decision_differs"] is False
    assert sorted((d["board"], d["cell"]) for d in doc["drift"]) == [("b", "0/rknnlite"), ("b", "0_1_2/rknnlite")]
    assert all(d["first_output"].startswith(f"input {first_input} output ") for d in doc["drift"])
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "2"
    failed = {tc.get("classname") for tc in suite.iter("testcase") if tc.find("failure") is not None}
    assert failed == {"rkdet.fleet.b"}
    message = next(tc.find("failure").get("message") for tc in suite.iter("testcase") if tc.find("failure") is not None)
    assert f"first difference input {first_input} output {diff['output']} element" in message
    hist = rkdet(["history", "drift", "--results", out])  # the same story from the history command
    assert hist.returncode == 1 and "DRIFT" in hist.stdout, hist.stdout + hist.stderr
    _, folder = _fleet_json(out)
    for text in (proc.stderr, junit_text(junit.read_text()), html_visible_text((folder / "report.html").read_text()),
                 hist.stdout):  # a failing fleet's reports read as prose too (issue 36 §2)
        assert python_spellings(text) == [], python_spellings(text)


def test_an_unreachable_board_is_exit_3_and_the_others_complete(lab3: Lab, build_args: list[str], tmp_path: Path) -> None:
    """One reachable board beside the dead one is enough for the claim (the dead board fails, the other still
    completes and is classed): the mixed-SoC agreement of a, b and c is the first run's."""
    out = tmp_path / "results"
    junit = tmp_path / "junit.xml"
    proc = fleet_deploy(lab3, lab3.inventory(), out, "--limit", "c:gone1", "--junit", str(junit), builds=build_args)
    assert proc.returncode == 3, proc.stderr[-4000:]
    assert "NOT ALL BOARDS RAN" in _verdict(proc)
    doc, _ = _fleet_json(out)
    boards = {b["name"]: b for b in doc["boards"]}
    assert set(boards) == {"c", "gone1"}
    assert boards["gone1"]["status"] == "failed" and "connection refused" in boards["gone1"]["reason"]
    assert boards["c"]["status"] == "complete"
    assert [(k["name"], k["size"]) for k in doc["classes"]] == [("A", 1)]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("2", "1", "0")


def test_a_failing_canary_starts_no_other_board(lab3: Lab, build_args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "results"
    inventory = lab3.inventory(tmp_path / "inv.yaml", dead_first=True)
    proc = fleet_deploy(lab3, inventory, out, "--limit", "gone1:a:b", builds=build_args)
    assert proc.returncode == 3, proc.stderr[-4000:]
    doc, _ = _fleet_json(out)
    boards = {b["name"]: b for b in doc["boards"]}
    assert boards["gone1"]["canary"] and boards["gone1"]["status"] == "failed"
    for name in ("a", "b"):
        assert boards[name]["status"] == "not-started"
        assert boards[name]["reason"].startswith("the canary board failed: gone1: ")
    assert not list(out.glob("127.0.0.1_*")), "a board after the failed canary was deployed to"


def test_max_fail_percent_stops_starting_boards(lab3: Lab, build_args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "results"
    inventory = lab3.inventory(tmp_path / "inv.yaml", dead_first=True)
    proc = fleet_deploy(lab3, inventory, out, "--limit", "unreachable", "--canary", "0", "--forks", "1",
                        "--max-fail-percent", "30", builds=build_args)
    assert proc.returncode == 3, proc.stderr[-4000:]
    doc, _ = _fleet_json(out)
    statuses = [b["status"] for b in doc["boards"]]
    assert statuses == ["failed", "failed", "not-started", "not-started"], statuses
    assert "(--max-fail-percent)" in doc["boards"][3]["reason"]


@pytest.mark.parametrize("args, message", [
    (("--matrix", "core_mask=0,7"), "--matrix core_mask: '7'; allowed: auto, 0, 1, 2, 0_1, 0_1_2"),
    (("--matrix", "cores=0"), "--matrix 'cores=0': give AXIS=V1,V2 with AXIS one of core_mask, backend"),
    (("--limit", "nosuchgroup"), "nosuchgroup"),
])
def test_bad_input_is_exit_2_one_line(lab3: Lab, build_args: list[str], tmp_path: Path, args, message) -> None:  # type: ignore[no-untyped-def]
    proc = fleet_deploy(lab3, lab3.inventory(tmp_path / "inv.yaml"), tmp_path / "results", *args, builds=build_args)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "results" / "fleet").exists()


def test_ctrl_c_lets_running_boards_finish_and_restore(lab3: Lab, build_args: list[str], tmp_path: Path) -> None:
    """SIGINT while the first board runs: it finishes its cell (its board restored byte-identically),
    the next board is never started, the fleet run is reported and exits 130."""
    import signal
    import subprocess
    import sys
    import time

    from fleet_helpers import REPO

    from rkdet.emulator.fake_tree import tree_digest

    out = tmp_path / "results"
    before = tree_digest(lab3.boards["a"].root)
    log = tmp_path / "fleet.log"
    argv = [sys.executable, "-m", "rkdet.cli", "fleet", "deploy", "--inventory", str(lab3.inventory(tmp_path / "inv.yaml")),
            "--limit", "a:b", "--known-hosts", str(lab3.known_hosts), "--ssh-config", "/dev/null", *build_args,
            "--out", str(out), "--repeats", "1", "--warmup", "0", "--forks", "1", "--canary", "0"]
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=sink)
        try:
            deadline = time.monotonic() + 240
            while b"[a] board rk3588" not in log.read_bytes():  # a's preflight passed: its deploy is under way
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=240) == 130, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = " ".join(log.read_text().split())
    assert "interrupted: starting nothing new" in text and "INTERRUPTED:" in text, text[-3000:]
    doc, _ = _fleet_json(out)
    assert doc["interrupted"] is True and doc["exit_code"] == 130
    a, b = doc["boards"]
    assert a["status"] == "complete" and a["cells"][0]["status"] == "complete", a
    assert b["status"] == "not-started" and b["reason"] == "interrupted (Ctrl-C) before it started"
    assert tree_digest(lab3.boards["a"].root) == before  # board a restored: every knob as it was


def test_a_board_over_its_time_budget_fails_alone(lab3: Lab, fleet_builds: dict[str, Path], tmp_path: Path) -> None:
    """--board-timeout: a board's cells are ONE pinned session (both backends its steps, one pin, one restore);
    the budget decides whether it starts and never cuts it short. Held against an injected clock: passing the
    budget while the session runs (after the first backend's run) stops nothing, both cells complete in one
    session; a budget spent before a board starts runs none of its cells (not-run, the board failed)."""
    import threading

    from rkdet.emulator.fake_tree import tree_digest
    from rkdet.fleets.sources.inventory import load_inventory, select
    from rkdet.deploy.request import DeployRequest
    from rkdet.deploy.settings import RunOverrides
    from rkdet.fleets.run.one_board import DeployCommon, load_builds, run_board
    from rkdet.link.connect import ConnectionOptions
    from rkdet.fleets.run.records import BOARD_FAILED, BOARD_OK, BoardResult, MatrixCell

    (board,) = select(load_inventory(lab3.inventory(tmp_path / "inv.yaml")), "a")
    builds = load_builds(None, tuple(fleet_builds.values()))
    request = DeployRequest(ConnectionOptions(known_hosts=lab3.known_hosts, ssh_config=Path("/dev/null"),
                                              connect_timeout=5), RunOverrides(repeats=1, warmup=0),
                            out=tmp_path / "results")
    common = DeployCommon(request, board_timeout=1.0)
    now = [0.0]
    lines: list[str] = []

    def log(message: str) -> None:
        lines.append(message)
        if message.startswith("preflight on ") and "onnxruntime" in message:  # inside the session: too late
            now[0] += 1000.0

    before = tree_digest(lab3.boards["a"].root)
    cells = [MatrixCell("0", "rknnlite"), MatrixCell("auto", "onnxruntime")]  # a CPU backend runs `auto` (matrix.py)
    result = run_board(BoardResult(board), builds, cells, common, threading.Event(), log, clock=lambda: now[0])
    first, second = result.cells
    assert (first.status, first.deploy_exit, second.status, second.deploy_exit) == ("complete", 0, "complete", 0), lines
    assert result.status == BOARD_OK and now[0] >= 1000.0
    runs = [json.loads((Path(c.folder or "") / "deploy.json").read_text()) for c in (first, second)]
    assert runs[0]["session"]["id"] == runs[1]["session"]["id"]  # one pinned session ran both backends
    assert runs[0]["session"]["backends"] == ["rknnlite", "onnxruntime"] and runs[0]["session"]["pinned"] is True
    pins = [json.loads((Path(c.folder or "") / "pin.json").read_text())["records"] for c in (first, second)]
    assert [sum(r["script"] == "pin" and r["record"] == "result" for r in p) for p in pins] == [1, 1]
    assert [r for r in pins[0] if r["script"] in ("pin", "restore")] == [r for r in pins[1]
                                                                         if r["script"] in ("pin", "restore")]
    assert tree_digest(lab3.boards["a"].root) == before  # restored once, exactly

    spent = run_board(BoardResult(board), builds, cells, common, threading.Event(), lines.append,
                      clock=lambda t=iter([0.0]): next(t, 1000.0))  # spent after the board's start
    assert [(c.status, c.reason) for c in spent.cells] == [("not-run", "the board's time budget (1 s) was spent")] * 2
    assert spent.status == BOARD_FAILED and spent.reason == "0/rknnlite: the board's time budget (1 s) was spent"
