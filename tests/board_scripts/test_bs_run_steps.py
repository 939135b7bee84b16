"""run-steps.sh under run-pinned.sh: several runners (a session's backends) under ONE lock, ONE pin and ONE
restore; each step sees the pinned board, a failing step does not stop the next, a signal stops the running
step, starts no other and still restores once."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from test_bs_run_pinned import NPU_GOVERNOR, Wrapper, pid_alive, wait_for, wrappers  # noqa: F401  (fixture)

from rkdet.boardinfo.scripts import (local_command, parse_pin, parse_restore, script_env, script_path, step_exits,
                                     step_lines)
from rkdet.emulator.fake_tree import tree_digest


def steps(*commands: list[str]) -> list[str]:
    """run-steps.sh's argv for `commands` (as deploy's session builds it: count, then the words)."""
    argv = ["sh", str(script_path("run-steps"))]
    for command in commands:
        argv += [str(len(command)), *command]
    return argv


def _saw_governor(path: Path, code: int = 0) -> list[str]:
    """A step that writes the NPU governor it ran under to `path`, then exits `code`."""
    return ["sh", "-c", f'cat "$RKDET_ROOT/{NPU_GOVERNOR}" > "$1"; echo "runner output"; exit {code}', "step",
            str(path)]


def _count(records: list[dict], script: str, record: str, status: str | None = None) -> int:
    return sum(1 for r in records if r.get("script") == script and r.get("record") == record
               and (status is None or r.get("status") == status))


def test_two_steps_share_one_pin_and_one_restore(shell: str, make_tree, state_dir: Path, tmp_path: Path,
                                                 wrappers: list) -> None:
    root = make_tree("rk3588")
    before = tree_digest(root)
    seen_a, seen_b = tmp_path / "a", tmp_path / "b"
    w = Wrapper(shell, root, state_dir, tmp_path / "out", steps(_saw_governor(seen_a, 3), _saw_governor(seen_b)))
    wrappers.append(w)
    assert w.wait() == 3, w.stderr  # the worst step's status; the second step ran all the same
    assert seen_a.read_text().strip() == seen_b.read_text().strip() == "performance"
    recs = w.records
    assert _count(recs, "pin", "state", "saved") == 1 and _count(recs, "pin", "result") == 1
    assert _count(recs, "restore", "result") == 1 and parse_pin(recs).ok and parse_restore(recs).ok
    assert _count(recs, "run-pinned", "lock", "acquired") == 1
    assert step_exits(recs) == {0: 3, 1: 0}
    clocks = [r for r in recs if r.get("record") == "clocks"]
    assert [(r["index"], r["at"]) for r in clocks] == [(0, "before"), (0, "after"), (1, "before"), (1, "after")]
    assert all(r["clocks"] == clocks[0]["clocks"] for r in clocks)  # both steps ran in one pinned state
    npu = clocks[0]["clocks"]["devfreq/fdab0000.npu"]
    assert npu["governor"] == "performance" and npu["min"] == npu["max"]
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()
    log = w.out.read_text()
    assert step_lines(log, 0).count("runner output") == 1 and step_lines(log, 1).count("runner output") == 1
    assert '"index":1,"status":"started"' not in step_lines(log, 0)


def test_a_signal_stops_the_running_step_starts_no_other_and_restores_once(make_tree, state_dir: Path,
                                                                          tmp_path: Path, wrappers: list) -> None:
    root = make_tree("rk3568")
    before = tree_digest(root)
    marker, never = tmp_path / "started", tmp_path / "never"
    first = ["sh", "-c", 'echo $$ > "$1"; exec sleep 60', "step", str(marker)]
    w = Wrapper("dash", root, state_dir, tmp_path / "out", steps(first, ["touch", str(never)]))
    wrappers.append(w)
    child = int(wait_for(marker))
    w.proc.send_signal(signal.SIGTERM)
    assert w.wait(timeout=60) == 143, w.stderr
    assert not pid_alive(child) and not never.exists()
    recs = w.records
    assert step_exits(recs) == {0: 143} and _count(recs, "restore", "result") == 1 and parse_restore(recs).ok
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()


def test_a_bad_count_runs_nothing(make_tree, state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = subprocess.run(local_command("run-steps", "dash", ["3", "touch", str(marker)]), capture_output=True,
                          text=True, timeout=30, env=script_env(make_tree("rk3588"), state_dir))
    assert done.returncode == 2 and not marker.exists()
    assert "count 3, but 2 word(s) follow" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_step_ignoring_sigterm_is_killed_before_the_restore(make_tree, state_dir: Path, tmp_path: Path,
                                                              wrappers: list) -> None:
    """run-pinned.sh gives its command (run-steps.sh) RKDET_KILL_GRACE; run-steps.sh kills a step that ignores
    SIGTERM half a second before that, so no runner outlives the session's restore (the one-runner run-pinned
    kills its command itself)."""
    root = make_tree("rk3588")
    before = tree_digest(root)
    marker, never = tmp_path / "started", tmp_path / "never"
    stubborn = ["sh", "-c", 'trap "" TERM; echo $$ > "$1"; while :; do sleep 1; done', "step", str(marker)]
    w = Wrapper("dash", root, state_dir, tmp_path / "out", steps(stubborn, ["touch", str(never)]),
                env={"RKDET_KILL_GRACE": "2"})
    wrappers.append(w)
    child = int(wait_for(marker))
    w.proc.send_signal(signal.SIGTERM)  # the wrapper only: it stops run-steps.sh, which stops the step
    assert w.wait(timeout=30) == 143, w.stderr
    assert not pid_alive(child) and not never.exists()
    recs = w.records
    assert step_exits(recs) == {0: 128 + signal.SIGKILL}
    order = [(r["script"], r["record"], r.get("status")) for r in recs]
    assert order.index(("run-steps", "step", "exited")) < order.index(("restore", "result", "ok"))  # dead first
    assert _count(recs, "restore", "result") == 1 and parse_restore(recs).ok
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()
