"""The pair's session line (rkdet/diff/backend_pair.py `shared_session`): "same pin / same clocks" judge what the
pin sets (governor, min, max); a moving `cur` is counted and said, never MOVED, and under --no-pin the line
says the clocks were not pinned."""

from __future__ import annotations

import json
from pathlib import Path

from rkdet.diff.backend_pair import shared_session
from rkdet.records.deploy_record import DeployRecord, DeployStatus, SessionRecord, write_deploy_record

NPU, CPU = "devfreq/fdab0000.npu", "cpufreq/policy0"
RUNS = ("20261206T210000Z-aaaa", "20261206T210000Z-bbbb")


def _clocks(index: int, at: str, npu: dict, cpu: dict) -> dict:
    return {"record": "clocks", "script": "run-steps", "index": index, "at": at, "clocks": {NPU: npu, CPU: cpu}}


def _node(gov: str, lo: int, hi: int, cur: int) -> dict:
    return {"governor": gov, "min": lo, "max": hi, "cur": cur}


def _session(tmp_path: Path, pinned: bool, readings: list[tuple[dict, dict]], *, pin: str = "ok",
             restore: str = "ok") -> tuple[Path, Path]:
    """Two run folders of one session whose one job logged `readings` (before/after each of two runs)."""
    records = ([{"record": "result", "script": "pin", "status": pin, "exit": 0}] if pinned else [])
    at = [(0, "before"), (0, "after"), (1, "before"), (1, "after")]
    records += [_clocks(i, when, npu, cpu) for (i, when), (npu, cpu) in zip(at, readings)]
    records += ([{"record": "result", "script": "restore", "status": restore, "exit": 0}] if pinned else [])
    folders = []
    for index, run_id in enumerate(RUNS):
        folder = tmp_path / run_id
        folder.mkdir()
        session = SessionRecord(id="20261206T205959Z-cafe", runs=RUNS, backends=("rknnlite", "rknn_c"), index=index,
                                pinned=pinned)
        write_deploy_record(folder / "deploy.json", DeployRecord(run_id=run_id, status=DeployStatus.COMPLETE,
                                                                 session=session))
        own = [{"record": "step", "script": "run-steps", "index": index, "status": "started", "pid": 7 + index}]
        (folder / "pin.json").write_text(json.dumps({"schema": "rkdet.pin/1", "records": records + own}))
        folders.append(folder)
    return folders[0], folders[1]


def test_pinned_with_the_same_settings_and_a_moving_cur_is_the_same_clocks(tmp_path: Path) -> None:
    """A cpufreq governor (performance, min < max) may move cur a little: the pinned settings held."""
    npu = _node("performance", 1_000_000_000, 1_000_000_000, 1_000_000_000)
    curs = (1_800_000, 1_800_000, 1_608_000, 1_800_000)
    s = shared_session(*_session(tmp_path, True, [(npu, _node("performance", 408_000, 1_800_000, c)) for c in curs]))
    assert s is not None and s.same_pin is True and s.same_clocks is True and s.moved == () and s.cur_changes == 2
    assert "MOVED" not in s.text() and "pinned once, restored once" in s.text()
    assert "cur moved 2 time(s) within the pinned range" in s.text()
    assert s.to_json() == {"id": "20261206T205959Z-cafe", "pinned": True, "same_pin": True, "same_clocks": True,
                           "moved": [], "cur_changes": 2}


def test_pinned_settings_that_moved_are_named(tmp_path: Path) -> None:
    cpu = _node("performance", 1_800_000, 1_800_000, 1_800_000)
    held, capped = _node("performance", 10**9, 10**9, 10**9), _node("performance", 10**9, 8 * 10**8, 8 * 10**8)
    s = shared_session(*_session(tmp_path, True, [(held, cpu), (held, cpu), (capped, cpu), (capped, cpu)]))
    assert s is not None and s.same_clocks is False and s.moved == (f"{NPU} max",)
    assert f"the pinned clocks MOVED between runs ({NPU} max)" in s.text()


def test_no_pin_with_governor_noise_is_not_moved(tmp_path: Path) -> None:
    """--no-pin: the board's own governor moves cur between every reading; the line says the clocks were not
    pinned and how often cur moved, not MOVED (which is a pinned session's failure)."""
    readings = [(_node("rknpu_ondemand", 3 * 10**8, 10**9, cur), _node("schedutil", 408_000, 1_800_000, c))
                for cur, c in ((3 * 10**8, 408_000), (10**9, 1_800_000), (6 * 10**8, 1_200_000), (3 * 10**8, 408_000))]
    s = shared_session(*_session(tmp_path, False, readings))
    assert s is not None and s.pinned is False and s.same_pin is None
    assert s.same_clocks is True and s.cur_changes == 6
    text = s.text()
    assert "MOVED" not in text and "clocks were not pinned" in text and "cur moved 6 time(s)" in text


def test_no_pin_governor_changed_is_said_plainly(tmp_path: Path) -> None:
    cpu = _node("schedutil", 408_000, 1_800_000, 408_000)
    a, b = _node("rknpu_ondemand", 3 * 10**8, 10**9, 3 * 10**8), _node("performance", 3 * 10**8, 10**9, 3 * 10**8)
    s = shared_session(*_session(tmp_path, False, [(a, cpu), (a, cpu), (b, cpu), (b, cpu)]))
    assert s is not None and s.same_clocks is False and s.moved == (f"{NPU} governor",)
    assert "MOVED" not in s.text() and f"governor/min/max changed between runs ({NPU} governor)" in s.text()


def test_same_pin_is_one_pin_and_its_restore(tmp_path: Path) -> None:
    """same_pin reads the one job's pin and restore results (A's pin.json holds them): a restore that did not
    finish, or no pin result, is not "pinned once, restored once"."""
    node = _node("performance", 10**9, 10**9, 10**9)
    flat = [(node, node)] * 4
    (tmp_path / "ok").mkdir()
    assert shared_session(*_session(tmp_path / "ok", True, flat)).same_pin is True  # type: ignore[union-attr]
    for name, kw in (("partial-restore", {"restore": "partial"}), ("failed-pin", {"pin": "error"})):
        (tmp_path / name).mkdir()
        s = shared_session(*_session(tmp_path / name, True, flat, **kw))
        assert s is not None and s.same_pin is False and "does NOT show one pin and its restore" in s.text()
