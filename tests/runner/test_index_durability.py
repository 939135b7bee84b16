"""index.jsonl's durability policy (rkdet.onboard.resultset.INDEX_FSYNC_S): every line is written as its
inference completes (what a SIGKILL needs), the fsync that a power cut needs is grouped, and nothing is
left unsynced at close."""

import os

from rkdet.onboard import resultset
from rkdet.onboard.resultset import JsonlAppender, read_jsonl


def _count_fsyncs(monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(resultset.os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    return calls


def test_grouped_policy_writes_every_line_at_once_and_fsyncs_at_close(tmp_path, monkeypatch):
    calls = _count_fsyncs(monkeypatch)
    index = JsonlAppender(str(tmp_path / "index.jsonl"), fsync_every_s=3600)
    for run in range(50):
        index.append({"run": run})
        # written, not buffered: another process (the host after a SIGKILL) reads it already
        assert read_jsonl(str(tmp_path / "index.jsonl"))[-1] == {"run": run}
    assert len(calls) == 0  # within one group: no fsync per line
    index.close()
    assert len(calls) == 1  # the lines not yet synced, at close (the end, or SIGINT/SIGTERM's unwinding)


def test_grouped_policy_fsyncs_once_a_group_is_old_enough(tmp_path, monkeypatch):
    calls = _count_fsyncs(monkeypatch)
    clock = [100.0]
    monkeypatch.setattr(resultset.time, "monotonic", lambda: clock[0])
    index = JsonlAppender(str(tmp_path / "index.jsonl"), fsync_every_s=1.0)
    for _ in range(10):
        index.append({"x": 1})
        clock[0] += 0.25
    assert len(calls) == 2  # at the lines 1.0 s and 2.0 s after the last fsync, not at every line
    index.close()
    assert len(calls) == 3


def test_zero_fsyncs_every_line_and_close_adds_none(tmp_path, monkeypatch):
    calls = _count_fsyncs(monkeypatch)
    index = JsonlAppender(str(tmp_path / "index.jsonl"), fsync_every_s=0)
    for run in range(5):
        index.append({"run": run})
    assert len(calls) == 5
    index.close()
    assert len(calls) == 5


def test_the_policy_is_a_positive_number_of_seconds():
    assert resultset.INDEX_FSYNC_S > 0  # the default groups; 0 (every line) is the user's choice
