"""output_hash follows the one definition in docs/FORMATS.md; JSON Lines survive torn writes."""

import hashlib
import json

import numpy as np
import pytest

from rkdet.onboard.hashing import output_hash
from rkdet.onboard.resultset import JsonlAppender, read_index, read_jsonl, summarize


def spec_hash(arr: np.ndarray) -> str:
    """The FORMATS.md definition written out independently of the implementation."""
    header = arr.dtype.str + "|" + ",".join(str(d) for d in arr.shape) + "|"
    return hashlib.sha256(header.encode() + np.ascontiguousarray(arr).tobytes()).hexdigest()


@pytest.mark.parametrize("arr", [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    np.arange(10, dtype=np.uint8),
    np.array(3.5, dtype=np.float64),
    np.zeros((0, 4), dtype=np.int8),
    np.arange(6, dtype=">i4").reshape(2, 3),
])
def test_output_hash_matches_the_documented_definition(arr):
    assert output_hash(arr) == spec_hash(arr)


def test_hash_separates_dtype_shape_and_layout():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    same_bytes_other_shape = base.reshape(4, 3)
    same_bytes_other_dtype = base.view(np.int32)
    assert len({output_hash(base), output_hash(same_bytes_other_shape), output_hash(same_bytes_other_dtype)}) == 3
    transposed = base.T  # non-contiguous: hashed as its C-contiguous copy
    assert output_hash(transposed) == output_hash(np.ascontiguousarray(transposed))
    assert output_hash(np.array(1.0, np.float32)) == spec_hash(np.array(1.0, np.float32))
    assert output_hash(np.array(1.0, np.float32)) == hashlib.sha256(b"<f4||" + np.float32(1).tobytes()).hexdigest()


def test_read_index_ignores_a_torn_last_line(tmp_path):
    good = [{"run": 0, "input": "a", "outputs": []}, {"run": 1, "input": "a", "outputs": []}]
    text = "".join(json.dumps(r) + "\n" for r in good) + '{"run": 2, "inp'
    (tmp_path / "index.jsonl").write_text(text)
    assert read_index(str(tmp_path)) == good


def test_read_jsonl_names_a_corrupt_middle_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(ValueError, match=r"x.jsonl:2"):
        read_jsonl(str(path))


def test_appender_cuts_back_a_failed_write(tmp_path, monkeypatch):
    path = tmp_path / "i.jsonl"
    appender = JsonlAppender(str(path))
    appender.append({"n": 1})
    import os as _os
    real_write = _os.write

    def half_write(fd, data):  # a disk that fills up mid-line
        real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("rkdet.onboard.resultset.os.write", half_write)
    with pytest.raises(OSError):
        appender.append({"n": 2, "pad": "x" * 50})
    monkeypatch.undo()
    appender.append({"n": 3})
    appender.close()
    assert read_jsonl(str(path)) == [{"n": 1}, {"n": 3}]


def _rec(run, name, hashes):
    return {"run": run, "input": name, "outputs": [{"name": n, "hash": h} for n, h in hashes]}


def test_summarize_counts_distinct_sets_and_names_the_first_divergence():
    records = []
    for run in range(5):
        records.append(_rec(run, "a", [("box", "h1"), ("cls", "h2")]))
        cls = "h2" if run < 3 else "BAD%d" % run
        records.append(_rec(run, "b", [("box", "h3"), ("cls", cls)]))
    summary = summarize(records, "onnxruntime")
    assert summary["runs"] == 5 and summary["backend"] == "onnxruntime"
    assert summary["inputs"]["a"] == {"distinct": 1, "runs": 5, "first_divergence": None}
    assert summary["inputs"]["b"]["distinct"] == 3
    assert summary["inputs"]["b"]["first_divergence"] == {"run": 3, "output": "cls"}
    assert summary["deterministic"] is False


def test_appender_records_are_readable_at_once_and_fsync_errors_surface(tmp_path, monkeypatch):
    path = tmp_path / "i.jsonl"
    appender = JsonlAppender(str(path))
    for n in range(50):
        appender.append({"n": n})
        assert read_jsonl(str(path))[-1] == {"n": n}  # written before append() returns
    import os as _os

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(_os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output"):
        appender.append({"n": "not durable"})
    monkeypatch.undo()
    appender.append({"n": 50})
    appender.close()
    assert read_jsonl(str(path)) == [{"n": n} for n in range(51)]  # the failed record was cut back
