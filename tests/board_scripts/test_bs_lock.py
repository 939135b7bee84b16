"""One board, one holder: run-pinned.sh's board lock (lock.sh) under dash, busybox sh and bash --posix,
with flock(1) on PATH and without it (the ln-based fallback, method "link").

A second job on the same state dir waits for the first or gives up with nothing changed; the first's
restore never runs under the second's pin; a lock left by a killed job is taken over and said so;
probe reports the lock; pin.sh and restore.sh on their own refuse to touch a held board.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_bs_run_pinned import Wrapper, pid_alive, wait_for

from rkdet.boardinfo.lock import job_lock, probe_lock
from rkdet.boardinfo.scripts import parse_pin, parse_restore, run_script_locally
from rkdet.emulator.fake_tree import tree_digest

NPU_GOVERNOR = "sys/class/devfreq/fdab0000.npu/governor"


@pytest.fixture(params=["flock", "link"])
def method(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The environment selecting the lock method: the normal PATH (flock from util-linux), or a PATH of
    every tool but flock (the scripts check for it by existence and fall back to ln)."""
    if request.param == "flock":
        assert shutil.which("flock"), "util-linux flock not installed"
        return {"PATH": os.environ["PATH"]}
    bin_dir = tmp_path / "no-flock-bin"
    bin_dir.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            target = os.path.join(directory, name)
            if name != "flock" and not (bin_dir / name).exists() and os.access(target, os.X_OK):
                (bin_dir / name).symlink_to(target)
    assert not (bin_dir / "flock").exists()
    return {"PATH": str(bin_dir), "EXPECT_METHOD": request.param}


@pytest.fixture
def jobs() -> Iterator[list[Wrapper]]:
    started: list[Wrapper] = []
    yield started
    for w in started:
        w.kill_group()


def _env(method: dict[str, str], **extra: str) -> dict[str, str]:
    return {"PATH": method["PATH"], **extra}


def _blocking_child(tmp: Path, name: str) -> tuple[list[str], Path, Path]:
    """A child that says it started (its pid) and runs until its `go` file appears."""
    started, go = tmp / f"{name}.started", tmp / f"{name}.go"
    child = ["sh", "-c", 'echo $$ > "$1"; while [ ! -e "$2" ]; do sleep 0.05; done', name, str(started), str(go)]
    return child, started, go


def _until(predicate: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _lock_records(w: Wrapper) -> list[dict]:
    return [r for r in w.records if r["record"] == "lock"]


def test_second_job_gives_up_at_once_naming_the_holder(shell: str, method: dict, make_tree, state_dir: Path,
                                                       tmp_path: Path, jobs: list) -> None:
    root = make_tree("rk3588")
    before = tree_digest(root)
    child, started, go = _blocking_child(tmp_path, "first")
    first = Wrapper(shell, root, state_dir, tmp_path / "first.out", child,
                    env=_env(method, RKDET_LOCK_HOLDER="alice@ws1", RKDET_LOCK_BUILD="abcd1234abcd1234",
                             RKDET_LOCK_RUN="run-1"))
    jobs.append(first)
    wait_for(started)
    pinned = tree_digest(root)
    ran = tmp_path / "second-ran"
    second = Wrapper(shell, root, state_dir, tmp_path / "second.out", ["touch", str(ran)],
                     env=_env(method, RKDET_LOCK_HOLDER="bob@ws2", RKDET_LOCK_TIMEOUT="0"))
    jobs.append(second)
    assert second.wait() == 125, second.stderr
    assert not ran.exists() and tree_digest(root) == pinned  # nothing ran, nothing changed
    assert not parse_pin(second.records).knobs  # never pinned
    [busy] = [r for r in _lock_records(second) if r["status"] == "busy"]
    holder = job_lock(second.records).busy
    assert holder is not None and holder.holder == "alice@ws1" and holder.pid == first.proc.pid
    assert holder.build == "abcd1234abcd1234" and holder.run == "run-1" and busy["waited_s"] <= 1
    assert busy["method"] == method.get("EXPECT_METHOD", "flock")
    assert "the board is busy" in second.stderr and "alice" not in second.stderr  # the name stays in the record
    go.touch()
    assert first.wait() == 0, first.stderr
    assert parse_restore(first.records).ok and tree_digest(root) == before
    assert not (state_dir / "lock.holder").exists()
    assert [r["status"] for r in _lock_records(first)] == ["acquired", "released"]


def test_second_job_waits_then_pins_after_the_first_restored(shell: str, method: dict, make_tree, state_dir: Path,
                                                             tmp_path: Path, jobs: list) -> None:
    root = make_tree("rk3568")
    before = tree_digest(root)
    child, started, go = _blocking_child(tmp_path, "first")
    first = Wrapper(shell, root, state_dir, tmp_path / "first.out", child, env=_env(method, RKDET_LOCK_HOLDER="alice@ws1"))
    jobs.append(first)
    wait_for(started)
    seen = tmp_path / "second-saw"
    npu = NPU_GOVERNOR.replace("fdab0000", "fde40000")
    second = Wrapper(shell, root, state_dir, tmp_path / "second.out",
                     ["sh", "-c", f'cat "$RKDET_ROOT/{npu}" > "$1"', "c", str(seen)],
                     env=_env(method, RKDET_LOCK_HOLDER="bob@ws2", RKDET_LOCK_TIMEOUT="60"))
    jobs.append(second)
    _until(lambda: any(r["status"] == "waiting" for r in _lock_records(second)) or second.proc.poll() is not None)
    waiting = [r for r in _lock_records(second) if r["status"] == "waiting"]
    assert waiting and waiting[0]["holder"] == "alice@ws1" and waiting[0]["pid"] == first.proc.pid, second.stderr
    assert not seen.exists() and parse_pin(second.records).state is None  # not pinned while it waits
    go.touch()
    assert first.wait() == 0 and parse_restore(first.records).ok
    assert second.wait(timeout=60) == 0, second.stderr
    assert seen.read_text().strip() == "performance"  # the second ran pinned
    # the first restored (and dropped its state) before the second pinned: a fresh save, not a kept one
    assert parse_pin(second.records).state == "saved"
    [acquired] = [r for r in _lock_records(second) if r["status"] == "acquired"]
    assert acquired["holder"] == "bob@ws2" and acquired["pid"] == second.proc.pid
    assert parse_restore(second.records).ok and tree_digest(root) == before


def test_stale_lock_of_a_killed_job_is_taken_over(shell: str, method: dict, make_tree, state_dir: Path,
                                                  tmp_path: Path, jobs: list) -> None:
    root = make_tree("rk3588")
    before = tree_digest(root)
    child, started, _go = _blocking_child(tmp_path, "first")
    first = Wrapper(shell, root, state_dir, tmp_path / "first.out", child, env=_env(method, RKDET_LOCK_HOLDER="alice@ws1"))
    jobs.append(first)
    child_pid = int(wait_for(started))
    os.killpg(first.proc.pid, signal.SIGKILL)  # the whole job, by its own group id: no trap runs
    assert first.wait() == -signal.SIGKILL
    _until(lambda: not pid_alive(child_pid))
    assert (state_dir / "lock.holder").is_file() and (state_dir / "pin.state").is_file()
    (state_dir / f".lock.holder.{first.proc.pid}").write_text("a temp record of a job killed while it waited\n")
    rc, records = run_script_locally("probe", root, state_dir, shell=shell, env=_env(method))
    state = probe_lock(records)
    assert rc == 0 and state.status == "stale" and state.holder is not None
    assert state.holder.holder == "alice@ws1" and state.holder.pid == first.proc.pid
    second = Wrapper(shell, root, state_dir, tmp_path / "second.out", ["true"],
                     env=_env(method, RKDET_LOCK_HOLDER="bob@ws2"))
    jobs.append(second)
    assert second.wait() == 0, second.stderr
    taken = job_lock(second.records).taken_over
    assert taken is not None and taken.holder == "alice@ws1" and taken.pid == first.proc.pid
    assert parse_pin(second.records).state == "kept"  # the killed job's saved (original) values
    assert parse_restore(second.records).ok and tree_digest(root) == before
    assert not (state_dir / "lock.holder").exists() and not (state_dir / "pin.state").exists()
    assert sorted(p.name for p in state_dir.iterdir()) == (["board.lock"] if "EXPECT_METHOD" not in method else [])


def test_probe_reports_and_pin_restore_refuse_a_held_board(shell: str, method: dict, make_tree, state_dir: Path,
                                                           tmp_path: Path, jobs: list) -> None:
    root = make_tree("rv1126")
    rc, records = run_script_locally("probe", root, state_dir, shell=shell, env=_env(method))
    assert rc == 0 and probe_lock(records).status == "free"
    child, started, go = _blocking_child(tmp_path, "first")
    first = Wrapper(shell, root, state_dir, tmp_path / "first.out", child,
                    env=_env(method, RKDET_LOCK_HOLDER="alice@ws1", RKDET_LOCK_BUILD="feedfacefeedface"))
    jobs.append(first)
    wait_for(started)
    pinned = tree_digest(root)
    rc, records = run_script_locally("probe", root, state_dir, shell=shell, env=_env(method))
    state = probe_lock(records)
    assert rc == 0 and state.status == "held" and state.holder is not None
    assert state.holder.holder == "alice@ws1" and state.holder.build == "feedfacefeedface"
    assert state.method == method.get("EXPECT_METHOD", "flock") and "alice@ws1" in state.line()
    for script in ("restore", "pin"):
        rc, records = run_script_locally(script, root, state_dir, shell=shell, env=_env(method))
        result = [r for r in records if r["record"] == "result"][-1]
        assert rc == 3 and "held by a pinned job" in result["reason"], records
        assert tree_digest(root) == pinned  # the running job's board is untouched
    go.touch()
    assert first.wait() == 0 and parse_restore(first.records).ok
    rc, records = run_script_locally("probe", root, state_dir, shell=shell, env=_env(method))
    assert probe_lock(records).status == "free"


def test_lock_timeout_must_be_digits(make_tree, state_dir: Path, tmp_path: Path, jobs: list) -> None:
    root = make_tree("rk3588")
    before = tree_digest(root)
    w = Wrapper("dash", root, state_dir, tmp_path / "out", ["true"], env={"RKDET_LOCK_TIMEOUT": "$(reboot)"})
    jobs.append(w)
    assert w.wait() == 2 and "RKDET_LOCK_TIMEOUT" in w.stderr
    assert tree_digest(root) == before and not (state_dir / "lock.holder").exists()
