"""A deploy cut off mid-run: the SSH connection dies (the detached board job goes on, `--resume` pulls and
judges it), or the user presses Ctrl-C (exit 130, the run is stopped and the board restored)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deploy_helpers import (CONFIG, REPO, assert_untouched, held, board_args, deploy, deploy_args, error_line, kill_sessions,
                            rkdet, run_folders, wait_no_board_processes)

from rkdet.emulator.sshd import EmulatedBoard
from rkdet.emulator.fake_tree import tree_digest
from rkdet.errors import EXIT_BOARD, EXIT_INTERRUPTED


def _start(board: EmulatedBoard, build: Path, out: Path, log: Path, repeats: int) -> subprocess.Popen:
    with open(log, "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "rkdet.cli", *deploy_args(board, build, out, repeats=repeats)],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)


def _wait_for(predicate, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"deploy ended early ({proc.returncode}): {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)


def _job_running(out: Path) -> int | None:
    """The board job's pid once deploy recorded it (the pinned run has started)."""
    folders = run_folders(out)
    if not folders:
        return None
    return json.loads((folders[-1] / "deploy.json").read_text()).get("job_pid")  # written by rename: never partial


def _inferences_logged(log: Path, at_least: int) -> bool:
    text = log.read_text(errors="replace")
    counts = [int(part.split("/")[0]) for part in text.split("inference ")[1:] if part.split("/")[0].isdigit()]
    return bool(counts) and max(counts) >= at_least


@pytest.mark.slow
def test_connection_killed_mid_run_then_resume(board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    before = tree_digest(board.root)
    out, log = tmp_path / "r", tmp_path / "deploy.log"
    proc = _start(board, fast_build, out, log, repeats=5)
    try:
        _wait_for(lambda: _job_running(out) is not None, proc, log)
        job_pid = _job_running(out)
        assert kill_sessions(board) >= 1  # the sshd processes of that connection, not the job
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert proc.returncode == EXIT_BOARD, text[-3000:]
    assert "Traceback" not in text and "connection" in text.splitlines()[-1].lower()
    [folder] = run_folders(out)
    assert json.loads((folder / "deploy.json").read_text())["status"] == "disconnected"
    assert Path(f"/proc/{job_pid}").exists(), "the detached board job died with the connection"

    resumed = rkdet(["deploy", *board_args(board), "--config", str(CONFIG), "--out", str(out), "--resume"])
    # no --build: the run is judged against the build recorded in its deploy.json
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "SAME (bitwise)" in resumed.stderr and "resuming run" in resumed.stderr
    record = json.loads((folder / "deploy.json").read_text())
    assert record["status"] == "complete" and record["restored"] is True and record["job_exit"] == 0
    assert len((folder / "result" / "index.jsonl").read_text().splitlines()) == 5 * 2
    assert run_folders(out) == [folder]  # resumed in place, no new run
    assert_untouched(board, before)

    again = deploy(board, fast_build, out, "--resume")  # nothing left to resume: a clear one-liner
    assert again.returncode == 2 and "no unfinished deploy to resume" in error_line(again)


@pytest.mark.slow
def test_ctrl_c_stops_the_run_and_restores_the_board(board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    before = tree_digest(board.root)
    out, log = tmp_path / "r", tmp_path / "deploy.log"
    with held(board) as holding:  # Ctrl-C lands mid-run, whatever the machine's speed
        proc = _start(board, fast_build, out, log, repeats=2)
        try:
            _wait_for(holding, proc, log)
            pinned = tree_digest(board.root)
            assert pinned != before  # the board really is pinned while the run goes on
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert proc.returncode == EXIT_INTERRUPTED, text[-3000:]
    assert "Traceback" not in text and text.strip().splitlines()[-1] == "rkdet: interrupted"
    assert wait_no_board_processes(board, timeout=3.0) == []  # nothing of the job outlives it (no stray timer)
    assert_untouched(board, before)
    [folder] = run_folders(out)
    record = json.loads((folder / "deploy.json").read_text())
    assert record["status"] == "interrupted" and record["restored"] is True
    restore = [r for r in json.loads((folder / "pin.json").read_text())["records"]
               if r.get("script") == "restore" and r.get("record") == "result"]
    assert restore and restore[-1]["status"] == "ok"


@pytest.mark.slow
def test_second_deploy_while_one_runs_is_refused(board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    before = tree_digest(board.root)
    out, log = tmp_path / "r", tmp_path / "deploy.log"
    with held(board) as holding:  # the first run waits mid-run until the second has been refused
        first = _start(board, fast_build, out, log, repeats=2)
        try:
            _wait_for(holding, first, log)
            other = tmp_path / "other"
            second = deploy(board, fast_build, other)
            assert second.returncode == EXIT_BOARD, second.stderr[-3000:]
            line = error_line(second)
            assert "busy: the board is held by " in line and "--lock-timeout" in line  # the board lock (test_deploy_lock)
            assert run_folders(other) == []  # refused in preflight: nothing kept
            assert first.poll() is None
        except BaseException:
            first.kill()
            raise
    try:
        first.wait(timeout=240)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, log.read_text()[-3000:]  # the running deploy was not disturbed
    assert "SAME (bitwise)" in log.read_text()
    assert_untouched(board, before)


@pytest.mark.slow
def test_resume_of_a_pinned_sessions_run_is_refused_and_the_board_restored(board: EmulatedBoard, fast_build: Path,
                                                                           tmp_path: Path) -> None:
    """`deploy --backends A,B` whose link dies mid-session leaves two "disconnected" runs of ONE job; a plain
    `--resume` that picks one of them is refused (exit 2, one line naming the run folder, the session and the
    `--backends` rerun) before any board command: the session's job goes on, its trap restores the board."""
    before = tree_digest(board.root)
    out, log = tmp_path / "r", tmp_path / "deploy.log"
    argv = [sys.executable, "-m", "rkdet.cli", *deploy_args(board, fast_build, out, "--backends", "rknnlite,onnxruntime",
                                                            repeats=2)]
    with held(board) as holding:  # the link dies while lite2's step runs, pinned
        with open(log, "wb") as err:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)
        try:
            _wait_for(holding, proc, log)
            assert kill_sessions(board) >= 1
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        text = log.read_text()
        assert proc.returncode == EXIT_BOARD and "Traceback" not in text, text[-3000:]
        folders = run_folders(out)
        records = [json.loads((f / "deploy.json").read_text()) for f in folders]
        assert len(records) == 2 and {r["status"] for r in records} == {"disconnected"}, records
        session = records[0]["session"]["id"]
        job_pid = records[0]["job_pid"]
        assert Path(f"/proc/{job_pid}").exists(), "the detached session job died with the connection"

        resumed = rkdet(["deploy", *board_args(board), "--config", str(CONFIG), "--out", str(out), "--resume"],
                        timeout=90)  # before the fix it re-attached to the held job and waited
        line = error_line(resumed)
        assert resumed.returncode == 2, resumed.stderr[-3000:]
        assert str(folders[-1]) in line and f"pinned session {session}" in line, line
        assert "--backends rknnlite,onnxruntime" in line, line
        assert "resuming run" not in resumed.stderr
        # nothing of the session was touched: both runs still "disconnected", the job still held mid-step
        assert [json.loads((f / "deploy.json").read_text())["status"] for f in folders] == ["disconnected"] * 2
        assert holding() and Path(f"/proc/{job_pid}").exists()
        assert tree_digest(board.root) != before  # still pinned by the session's own job
    deadline = time.monotonic() + 120  # released: the session's job runs its steps and its trap restores the board
    while Path(f"/proc/{job_pid}").exists():
        assert time.monotonic() < deadline, "the session's job did not end"
        time.sleep(0.1)
    assert_untouched(board, before)
