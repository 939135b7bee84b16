"""One board, one holder, end to end: concurrent deploys to one emulated board wait for the board lock
or are refused naming its holder, a lock left by a killed deploy is taken over, `rkdet board info`
shows the holder, and emulated boards deployed in parallel each keep their own /run and come back
byte-identical."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from deploy_helpers import (REPO, board_args, deploy, deploy_args, error_line, held, rkdet, run_folders,
                            wait_no_board_processes)

from rkdet.boardinfo.lock import this_holder
from rkdet.emulator.fake_tree import tree_digest
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import EXIT_BOARD


def _start(board: EmulatedBoard, build: Path, out: Path, log: Path, *extra: str, repeats: int) -> subprocess.Popen:
    with open(log, "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "rkdet.cli", *deploy_args(board, build, out, *extra, repeats=repeats)],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)


def _until(predicate, proc: subprocess.Popen | None, log: Path | None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None:
            assert proc.poll() is None, f"deploy ended early ({proc.returncode}): {log.read_text()[-3000:] if log else ''}"
        assert time.monotonic() < deadline, log.read_text()[-3000:] if log else "timed out"
        time.sleep(0.05)


def _inferences_logged(log: Path, at_least: int) -> bool:
    text = log.read_text(errors="replace")
    counts = [int(part.split("/")[0]) for part in text.split("inference ")[1:] if part.split("/")[0].isdigit()]
    return bool(counts) and max(counts) >= at_least


def _pin_records(folder: Path, script: str, record: str) -> list[dict]:
    return [r for r in json.loads((folder / "pin.json").read_text())["records"]
            if r.get("script") == script and r.get("record") == record]


def _published_text(out: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file() and p.suffix != ".npy"
                     and p.name != "rkdet.db")


@pytest.mark.slow
def test_concurrent_deploys_to_one_board(board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    """While one deploy runs, a second with --lock-timeout 0 is refused naming the holder (nothing pushed,
    no run folder); a third with a long --lock-timeout waits, then pins only after the first restored."""
    before = tree_digest(board.root)
    me = this_holder()
    out1, log1 = tmp_path / "r1", tmp_path / "first.log"
    hold = held(board)  # the first run waits mid-run until the others have met its lock
    holding = hold.__enter__()
    first = _start(board, fast_build, out1, log1, repeats=2)
    waiter: subprocess.Popen | None = None
    try:
        _until(holding, first, log1)
        out3, log3 = tmp_path / "r3", tmp_path / "third.log"
        waiter = _start(board, fast_build, out3, log3, "--lock-timeout", "300", repeats=2)
        _until(lambda: bool(run_folders(out3)) and "job_pid" in (run_folders(out3)[0] / "deploy.json").read_text(),
               waiter, log3)  # its job started on the board: it waits there for the lock
        assert "the run waits up" in log3.read_text()

        info = rkdet(["board", "info", *board_args(board)])
        assert info.returncode == 0, info.stderr[-2000:]
        assert f"board lock: held by {me}" in info.stderr and "build " + json.loads(
            (run_folders(out1)[0] / "deploy.json").read_text())["fingerprint"][:16] in info.stderr

        refused = deploy(board, fast_build, tmp_path / "r2", "--lock-timeout", "0")
        assert refused.returncode == EXIT_BOARD, refused.stderr[-3000:]
        line = error_line(refused)
        assert "busy: the board is held by " + me in line and "--lock-timeout" in line
        assert run_folders(tmp_path / "r2") == []  # refused in preflight: nothing kept
        assert first.poll() is None, "the first deploy ended while held"
        hold.__exit__(None, None, None)
        first.wait(timeout=240)
        assert first.returncode == 0, log1.read_text()[-3000:]
        waiter.wait(timeout=240)
        assert waiter.returncode == 0, log3.read_text()[-3000:]
    finally:
        hold.__exit__(None, None, None)
        for proc in (first, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
    [f1], [f3] = run_folders(out1), run_folders(out3)
    r1, r3 = (json.loads((f / "deploy.json").read_text()) for f in (f1, f3))
    assert r1["status"] == r3["status"] == "complete" and r1["restored"] is True and r3["restored"] is True
    third_lock = _pin_records(f3, "run-pinned", "lock")
    assert [r["status"] for r in third_lock] == ["waiting", "acquired", "released"]
    assert r3["board_lock"]["method"] == "flock" and r3["board_lock"]["waited_s"] == third_lock[1]["waited_s"]
    assert r1["board_lock"]["method"] == "flock" and r1["board_lock"]["waited_s"] <= 1  # whole seconds of the board
    assert r1["board_lock"]["took_over_stale"] is False
    assert third_lock[1]["waited_s"] >= 1
    # the first's restore ran (and dropped its saved state) before the third pinned: a fresh save, never a
    # kept one, so no restore ever unpinned the board under the other's run
    assert [r["status"] for r in _pin_records(f3, "pin", "state")] == ["saved"]
    first_restore_end = [r for r in _pin_records(f1, "restore", "result")][-1]
    assert first_restore_end["status"] == "ok"
    assert tree_digest(board.root) == before and wait_no_board_processes(board) == []
    for out in (out1, out3):  # the holder's user@host lives on the board only, never in a published folder
        text = _published_text(out)
        assert me not in text and "<lock holder>" in text
    free = rkdet(["board", "info", *board_args(board)])
    assert free.returncode == 0 and "board lock: free" in free.stderr


@pytest.mark.slow
def test_lock_of_a_killed_deploy_is_taken_over(fresh_board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    """kill -9 the deploy and its board job (by the job's own process group): the board stays pinned with
    a stale lock; `rkdet board info` says so, and the next deploy takes it over, says so, and restores
    the original values."""
    board = fresh_board
    before = tree_digest(board.root)
    out1, log1 = tmp_path / "r1", tmp_path / "first.log"
    with held(board) as holding:  # killed mid-run, whatever the machine's speed
        first = _start(board, fast_build, out1, log1, repeats=2)
        try:
            _until(holding, first, log1)
            job_pid = json.loads((run_folders(out1)[0] / "deploy.json").read_text())["job_pid"]
            first.kill()
            first.wait(timeout=30)
            os.killpg(job_pid, signal.SIGKILL)  # the board job's own group: the detached job this test started
        finally:
            if first.poll() is None:
                first.kill()
    assert wait_no_board_processes(board) == []
    assert tree_digest(board.root) != before  # left pinned
    info = rkdet(["board", "info", *board_args(board)])
    assert info.returncode == 0 and "board lock: stale: left by " + this_holder() in info.stderr, info.stderr[-2000:]

    out2 = tmp_path / "r2"
    second = deploy(board, fast_build, out2)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "took over a stale board lock" in second.stderr
    [f2] = run_folders(out2)
    record = json.loads((f2 / "deploy.json").read_text())
    assert record["restored"] is True and any("stale board lock" in w for w in record["warnings"])
    assert record["board_lock"]["took_over_stale"] is True
    [taken] = [r for r in _pin_records(f2, "run-pinned", "lock") if r["status"] == "taken_over"]
    assert taken["previous"]["pid"] is not None and taken["previous"]["holder"] == "<lock holder>"  # published: redacted
    assert [r["status"] for r in _pin_records(f2, "pin", "state")] == ["kept"]  # the killed run's original values
    assert tree_digest(board.root) == before


@pytest.mark.slow
def test_parallel_sudo_boards_each_restored(fast_build: Path, tmp_path: Path) -> None:
    """Three sudo boards started together, deployed concurrently with their default state dir /run/rkdet:
    each board's /run is its own (mount namespace), never the host's, and each comes back byte-identical."""
    host_run = Path("/run/rkdet")
    host_before = sorted(os.listdir(host_run)) if host_run.is_dir() else None
    boards = [EmulatedBoard("rk3588", tmp_path / f"board{i}", "sudo") for i in range(3)]  # the build is for rk3588
    try:
        for b in boards:
            b.start()
        before = [tree_digest(b.root) for b in boards]
        results: dict[int, subprocess.CompletedProcess] = {}

        def run(i: int) -> None:
            results[i] = deploy(boards[i], fast_build, tmp_path / f"r{i}", "--sudo", repeats=3, timeout=400)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(boards))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=420)
        for i, b in enumerate(boards):
            assert results[i].returncode == 0, results[i].stderr[-3000:]
            [folder] = run_folders(tmp_path / f"r{i}")
            record = json.loads((folder / "deploy.json").read_text())
            assert record["restored"] is True and record["job_env"].get("RKDET_LOCK_TIMEOUT") == "0"
            assert [r["status"] for r in _pin_records(folder, "pin", "state")] == ["saved"]  # nobody else's state
            assert tree_digest(b.root) == before[i], f"board {i} not restored"
            # the board's own /run: its lock file is there, seen only inside the board's namespace
            seen = subprocess.run([*b.on_board_argv(), "ls", "/run/rkdet"], capture_output=True, text=True, timeout=30)
            assert seen.returncode == 0 and "board.lock" in seen.stdout.split(), seen.stderr
        assert (sorted(os.listdir(host_run)) if host_run.is_dir() else None) == host_before  # the host's /run untouched
    finally:
        for b in boards:
            b.stop()
