"""The recorder hashes only outputs whose bytes differ from that input's last output.

Why this matters: sha256 of 2.5 MB per inference was the runner's whole overhead on the 640 model,
and most runs repeat the previous output. The index must not change: every record still names the
sha256 of its own output (docs/FORMATS.md), and every distinct output gets its own file.
"""

import numpy as np
import pytest

from rkdet.onboard import backends, recorder
from rkdet.onboard.hashing import output_hash, same_bytes
from rkdet.onboard.recorder import Recorder
from rkdet.onboard.resultset import ResultWriter, prepare_out_dir, read_index


class HashSpy(object):
    """Counts real output_hash calls (the real function still computes every hash)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = recorder.output_hash

        def counted(array):
            self.calls += 1
            return real(array)

        monkeypatch.setattr(recorder, "output_hash", counted)


def _record(tmp_path, submissions, budget=None):
    """Run the real ResultWriter + Recorder over [(sample, [arrays])]; return index, outputs dir."""
    out = tmp_path / "out"
    prepare_out_dir(str(out))
    writer = ResultWriter(str(out))
    recorder = Recorder(writer, "onnxruntime") if budget is None else Recorder(writer, "onnxruntime", last_bytes=budget)
    for run, (sample, arrays) in enumerate(submissions):
        recorder.submit(run, sample, 0.001, 0.0, ["o%d" % i for i in range(len(arrays))], arrays)
    summary = recorder.finish()
    writer.close()
    return read_index(str(out)), out / "outputs", summary


def _one_byte_changed(arr, at):
    flat = arr.copy().reshape(-1).view(np.uint8)
    flat[at] ^= 0x01
    return flat.view(arr.dtype).reshape(arr.shape)


def test_identical_outputs_reuse_the_hash_and_a_one_byte_change_gets_its_own(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    box = rng.random((1, 64, 80, 80), dtype=np.float32)
    cls = rng.random((1, 11, 80, 80), dtype=np.float32)
    changed = _one_byte_changed(box, 123457)
    spy = HashSpy(monkeypatch)
    index, outputs, summary = _record(tmp_path, [
        ("a", [box, cls]), ("a", [box.copy(), cls.copy()]), ("a", [changed, cls.copy()]),
        ("a", [box.copy(), cls.copy()]), ("a", [box.copy(), cls.copy()])])
    want = [[output_hash(box), output_hash(cls)], [output_hash(box), output_hash(cls)],
            [output_hash(changed), output_hash(cls)], [output_hash(box), output_hash(cls)],
            [output_hash(box), output_hash(cls)]]
    assert [[o["hash"] for o in r["outputs"]] for r in index] == want
    assert want[2][0] != want[0][0]
    # hashed: run 0 (2 outputs), the changed box, and the box again after it (compared with `changed`)
    assert spy.calls == 4
    assert sorted(p.stem for p in outputs.iterdir()) == sorted({h for row in want for h in row})
    assert np.load(outputs / (want[2][0] + ".npy")).tobytes() == changed.tobytes()
    assert summary["inputs"]["a"]["distinct"] == 2 and summary["inputs"]["a"]["first_divergence"] == {"run": 2, "output": "o0"}


@pytest.mark.parametrize("other", [
    np.array([0.0, 1.0, -0.0], np.float32),            # -0.0 == 0.0 as numbers, not as bytes
    np.array([0.0, 1.0, np.float32("nan")], np.float32),  # NaN != NaN as numbers, equal bytes elsewhere
    np.array([0.0, 1.0, 0.0], np.float32).view(np.int32),  # same bytes, other dtype
    np.array([0.0, 1.0, 0.0], np.float32).reshape(3, 1),    # same bytes, other shape
    np.array([0.0, 1.0, 0.0], ">f4"),                        # other byte order
])
def test_equal_numbers_are_not_enough_only_equal_dtype_shape_and_bytes(tmp_path, other):
    base = np.array([0.0, 1.0, 0.0], np.float32)
    index, outputs, _ = _record(tmp_path, [("a", [base]), ("a", [other]), ("a", [other.copy()])])
    got = [r["outputs"][0]["hash"] for r in index]
    assert got == [output_hash(base), output_hash(other), output_hash(other)]
    assert got[0] != got[1]
    assert index[1]["outputs"][0]["dtype"] == other.dtype.name and index[1]["outputs"][0]["shape"] == list(other.shape)
    assert (outputs / (got[1] + ".npy")).exists()


def test_same_bytes_is_a_byte_compare_of_what_the_hash_covers():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert same_bytes(a, a.copy())
    assert same_bytes(a.T, np.ascontiguousarray(a.T))  # non-contiguous: its C-order bytes, as hashed
    assert not same_bytes(a, a.reshape(4, 3, 2))
    assert not same_bytes(a, _one_byte_changed(a, 95))  # the very last byte
    assert same_bytes(np.array(2.5), np.array(2.5)) and not same_bytes(np.array(2.5), np.array([2.5]))
    assert same_bytes(np.zeros((0, 3), np.uint8), np.zeros((0, 3), np.uint8))
    odd = np.arange(7, dtype=np.uint8)  # not a multiple of 8 bytes
    assert same_bytes(odd, odd.copy()) and not same_bytes(odd, _one_byte_changed(odd, 6))


def test_inputs_beyond_the_memory_bound_are_still_hashed_correctly(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    first, second = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    spy = HashSpy(monkeypatch)
    # room for one input's last outputs (4000 bytes): "b" is never kept, so it is hashed every run
    index, _, _ = _record(tmp_path, [("a", [first]), ("b", [second])] * 3, budget=4000)
    assert [r["outputs"][0]["hash"] for r in index] == [output_hash(first), output_hash(second)] * 3
    assert spy.calls == 1 + 3


def test_kept_outputs_are_not_changed_by_later_inferences():
    """The recorder keeps the last arrays per input: a backend that reused buffers would fool the
    compare, so own() must hand over arrays nobody writes again (rknnlite copies)."""
    buf = np.zeros(4, np.float32)
    owned = backends.RknnLiteBackend.own([buf])
    buf[0] = 9.0
    assert owned[0][0] == 0.0 and not np.shares_memory(owned[0], buf)
