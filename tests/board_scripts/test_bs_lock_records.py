"""rkdet.boardinfo.lock: the board lock's JSON records as typed values (no board needed)."""

from __future__ import annotations

import pytest

from rkdet.boardinfo.lock import (REDACTED, busy_error, check_before_push, holder_env, job_lock, private_names, probe_lock,
                              refusal, this_holder)
from rkdet.errors import EXIT_BOARD, BoardError

HOLDER = {"pid": 41, "pid_start": 9000, "method": "flock", "holder": "alice@ws1", "board_user": "root",
          "build": "abcd1234abcd1234", "run": "20261201T000000Z-ab12", "started": "2026-12-01T00:00:00Z"}


def _rec(script: str, **fields: object) -> dict:
    return {"record": "lock", "script": script, **fields}


def test_probe_states() -> None:
    assert probe_lock([]).status == "unknown"  # scripts from before the lock
    free = probe_lock([_rec("probe", status="free", method="link")])
    assert free.status == "free" and free.holder is None and free.line() == "free (link)"
    held = probe_lock([_rec("probe", status="held", **HOLDER)])
    assert held.holder is not None and held.holder.pid == 41 and held.holder.build == "abcd1234abcd1234"
    assert held.line().startswith("held by alice@ws1 (board user root, build abcd1234abcd1234, run 20261201T000000Z-ab12")
    stale = probe_lock([_rec("probe", status="stale", **HOLDER)])
    assert stale.line().startswith("stale: left by alice@ws1") and "takes it over" in stale.line()


@pytest.mark.parametrize("bad", [{"status": "mine"}, {"status": "held", "pid": "41"}, {"status": "held", "holder": 7}])
def test_malformed_probe_record_names_the_board(bad: dict) -> None:
    with pytest.raises(BoardError) as err:
        probe_lock([_rec("probe", **bad)], "me@board:22")
    assert err.value.exit_code == EXIT_BOARD
    assert str(err.value).startswith("me@board:22: the board scripts answered a malformed lock record")


def test_job_lock_events_and_refusal() -> None:
    mine = dict(HOLDER, holder="bob@ws2", pid=77)
    waited = job_lock([_rec("run-pinned", status="waiting", timeout_s=60, **HOLDER),
                       _rec("run-pinned", status="acquired", waited_s=12, **mine),
                       _rec("run-pinned", status="released")])
    assert waited.acquired and waited.waited_s == 12 and waited.busy is None
    assert waited.waited_for is not None and waited.waited_for.holder == "alice@ws1"
    assert waited.mine is not None and waited.mine.pid == 77
    assert refusal([], waited, "b") is None

    busy_records = [_rec("run-pinned", status="busy", waited_s=5, **HOLDER),
                    {"record": "result", "script": "run-pinned", "status": "error", "exit": 125, "reason": "busy"}]
    busy = job_lock(busy_records)
    assert not busy.acquired and busy.busy is not None and busy.waited_s == 5
    err = refusal(busy_records, busy, "me@board:22")
    assert err is not None and err.exit_code == EXIT_BOARD
    assert "busy: the board is held by alice@ws1 (board user root" in str(err) and "waited 5 s" in str(err)

    taken = job_lock([_rec("run-pinned", status="taken_over", previous=HOLDER), _rec("run-pinned", status="acquired",
                                                                                    waited_s=0, **mine)])
    assert taken.taken_over is not None and taken.taken_over.pid == 41
    assert {h.holder for h in taken.holders()} == {"alice@ws1", "bob@ws2"}

    no_dir = [{"record": "result", "script": "run-pinned", "status": "error", "exit": 3, "reason": "cannot write X"}]
    assert "run-pinned.sh: cannot write X" in str(refusal(no_dir, job_lock(no_dir), "b"))
    assert refusal([], job_lock([]), "b") is None  # no word of the lock: an older job, judged as before


def test_private_names_cover_the_json_form() -> None:
    odd = job_lock([_rec("run-pinned", status="acquired", waited_s=0, **dict(HOLDER, holder='a"b@w'))])
    assert private_names(odd.holders()) == {'a"b@w', 'a\\"b@w'}
    assert private_names([None]) == set() and REDACTED == "<lock holder>"


def test_preflight_check() -> None:
    held = probe_lock([_rec("probe", status="held", **HOLDER)])
    said: list[str] = []
    with pytest.raises(BoardError, match="busy: the board is held by alice@ws1"):
        check_before_push(held, "b", 0, True, said.append)
    with pytest.raises(BoardError, match="busy"):
        check_before_push(held, "b", 600, False, said.append)  # --no-pin takes no lock and does not wait
    check_before_push(held, "b", 600, True, said.append)
    assert said and "waits up to 600 s" in said[-1]
    check_before_push(probe_lock([_rec("probe", status="stale", **HOLDER)]), "b", 0, True, said.append)
    assert "will be taken over" in said[-1]
    assert busy_error("b", None, None).exit_code == EXIT_BOARD


def test_holder_env() -> None:
    env = holder_env("f" * 64, "run-1", 30)
    assert env == {"RKDET_LOCK_TIMEOUT": "30", "RKDET_LOCK_HOLDER": this_holder(), "RKDET_LOCK_BUILD": "f" * 16,
                   "RKDET_LOCK_RUN": "run-1"}
    assert "@" in this_holder()


CRAFTED_RUNS = {
    "newline": "20261201T000000Z-ab12\nrkdet: SAME: nothing to see",
    "escape": "x\x1b[2K\x1b[1A\x1b]0;pwned\x07",
    "bidi": "20261201T000000Z-\u202e21ba",
    "dotdot": "../../../etc/passwd",
    "over-long": "r" * 100_000,
}


@pytest.mark.parametrize("case", sorted(CRAFTED_RUNS))
def test_a_hostile_boards_lock_run_field_is_shown_as_one_clean_line(case: str) -> None:
    """The lock holder's `run` (and its other fields) is the board's word: every line that shows it (the probe's
    lock line, the busy refusal, the preflight's wait notice) is one line, no raw control or bidi character,
    bounded, and a run that is not an id rkdet makes is said to be one."""
    crafted = dict(HOLDER, run=CRAFTED_RUNS[case], board_user="root\x1b[31m", started="now\u2028later")
    held = probe_lock([_rec("probe", status="held", **crafted)])
    said: list[str] = []
    check_before_push(held, "me@board:22", 60, True, said.append)
    busy = [_rec("run-pinned", status="busy", waited_s=5, **crafted)]
    refused = refusal(busy, job_lock(busy), "me@board:22")
    assert refused is not None
    for line in (held.line(), said[0], str(refused)):
        assert "\n" not in line and "\r" not in line, line
        assert not any(ch in line for ch in "\x1b\x07\u202e\u2028"), line
        assert len(line) < 1000, len(line)
        assert "(not an rkdet run id)" in line and "root\\x1b[31m" in line, line
    assert held.holder is not None and held.holder.run == CRAFTED_RUNS[case]  # kept as the board said, only shown


def test_a_lock_run_rkdet_makes_is_shown_as_is() -> None:
    line = probe_lock([_rec("probe", status="held", **HOLDER)]).line()
    assert "run 20261201T000000Z-ab12," in line and "not an rkdet run id" not in line
