"""Crafted result sets (issue 9 item 3): every one ends in ONE line naming the file and entry, exit 2,
within seconds and without allocating what the data merely declares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from bounds import ended_within
from diff_helpers import repeated_set

from rkdet.cli import main
from rkdet.onboard.hashing import output_hash

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["out"]


def _tiny(path: Path, runs: int = 3) -> Path:
    """A valid 1-input, 1-output result set of `runs` runs (16 float32 per output)."""
    return repeated_set(path, {"p": [np.arange(16, dtype=np.float32)]}, runs, NAMES).close()


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "index.jsonl").read_text().splitlines()]


def _write_records(path: Path, records: list[dict]) -> None:
    (path / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _diff(*args: str) -> tuple[int, str, float, int]:
    """Run `rkdet diff` in-process: exit code, output, seconds, tracemalloc peak bytes."""
    tracemalloc.start()
    t = time.monotonic()
    try:
        result = CliRunner().invoke(main, ["diff", *args])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(result.exception, (SystemExit, type(None))), repr(result.exception)
    return result.exit_code, result.output, time.monotonic() - t, peak


def _one_line_exit_2(out: str, *must: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, out
    line = lines[0]
    assert line.startswith("rkdet: ") and "internal error" not in line and "Traceback" not in out, line
    for word in must:
        assert word in line, (word, line)
    return line


@pytest.mark.parametrize("run", [3_000_000_000, 20_000_000, 2e7, 1, -1, True, "0"])
def test_run_numbers_are_checked_before_anything_is_sized_by_them(tmp_path: Path, run: object) -> None:
    s = _tiny(tmp_path / "s")
    recs = _records(s)
    recs[-1]["run"] = run
    _write_records(s, recs)
    code, out, seconds, peak = _diff(str(s))
    assert code == 2
    _one_line_exit_2(out, "index.jsonl:3", "run")
    assert seconds < 5 and peak < 20 << 20, (seconds, peak)


def test_run_infinity_is_exit_2(tmp_path: Path) -> None:
    s = _tiny(tmp_path / "s")
    text = (s / "index.jsonl").read_text().replace('"run": 2', '"run": Infinity')
    (s / "index.jsonl").write_text(text)
    code, out, _, _ = _diff(str(s))
    assert code == 2
    _one_line_exit_2(out, "index.jsonl:3", "run")


def test_duplicated_records_are_refused(tmp_path: Path) -> None:
    s = _tiny(tmp_path / "s")
    recs = _records(s)
    _write_records(s, recs + recs[1:])  # 5 records of a 3-run set: runs 1 and 2 twice
    code, out, _, _ = _diff(str(s))
    assert code == 2
    _one_line_exit_2(out, "index.jsonl:4", "run 1", "'p'")


@pytest.mark.parametrize("value", ["fast", [1], {"a": 1}, True])
def test_non_numeric_latency_is_exit_2(tmp_path: Path, value: object) -> None:
    s = _tiny(tmp_path / "s")
    recs = _records(s)
    recs[1]["latency_ms"] = value
    _write_records(s, recs)
    code, out, _, _ = _diff(str(s))
    assert code == 2
    _one_line_exit_2(out, "index.jsonl:2", "latency_ms")


def test_non_utf8_index_is_exit_2(tmp_path: Path) -> None:
    s = _tiny(tmp_path / "s")
    raw = (s / "index.jsonl").read_bytes().replace(b'"p"', b'"p\xff\xfe"', 1)
    (s / "index.jsonl").write_bytes(raw)
    code, out, _, _ = _diff(str(s))
    assert code == 2
    _one_line_exit_2(out, "index.jsonl:1", "UTF-8")


@pytest.mark.parametrize("field,value,word", [
    ("dtype", "float99", "dtype"),
    ("dtype", "object", "dtype"),
    ("shape", [10 ** 12, 10 ** 12], "shape"),
    ("shape", [-1], "shape"),
    ("shape", [1.5], "shape"),
    ("hash", "../../x", "hash"),
    ("hash", "/etc/passwd", "hash"),
    ("hash", "A" * 64, "hash"),
    ("name", 7, "name"),
])
def test_bad_output_entries_are_exit_2(tmp_path: Path, field: str, value: object, word: str) -> None:
    s = _tiny(tmp_path / "s")
    recs = _records(s)
    recs[2]["outputs"][0][field] = value
    _write_records(s, recs)
    code, out, seconds, peak = _diff(str(s))
    assert code == 2
    _one_line_exit_2(out, "index.jsonl:3", word)
    assert seconds < 5 and peak < 20 << 20


def _npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (dtype, shape)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1")


def test_npy_header_shape_1e12_is_refused_by_the_file_size(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.npy"
    bomb.write_bytes(_npy_header((10 ** 12, 10 ** 12)) + b"\0" * 64)
    code, out, seconds, peak = _diff(str(bomb))
    assert code == 2
    _one_line_exit_2(out, "bomb.npy", "shape")
    assert seconds < 5 and peak < 20 << 20


def test_output_file_header_disagreeing_with_index_is_refused(tmp_path: Path) -> None:
    s = _tiny(tmp_path / "s")
    h = _records(s)[0]["outputs"][0]["hash"]
    (s / "outputs" / f"{h}.npy").write_bytes(_npy_header((10 ** 12, 10 ** 12)) + b"\0" * 64)
    code, out, _, peak = _diff(str(s))
    assert code == 2
    _one_line_exit_2(out, f"{h}.npy", "shape")
    assert peak < 20 << 20


@pytest.mark.parametrize("where", ["file", "output"])
def test_zero_byte_npy_is_exit_2(tmp_path: Path, where: str) -> None:
    if where == "file":
        target = tmp_path / "empty.npy"
        target.write_bytes(b"")
        code, out, _, _ = _diff(str(target))
        name = "empty.npy"
    else:
        s = _tiny(tmp_path / "s")
        h = _records(s)[0]["outputs"][0]["hash"]
        (s / "outputs" / f"{h}.npy").write_bytes(b"")
        code, out, _, _ = _diff(str(s))
        name = f"{h}.npy"
    assert code == 2
    _one_line_exit_2(out, name)


def test_npz_member_is_size_checked_before_decompressing(tmp_path: Path) -> None:
    """A ~0.5 MB .npz whose member inflates to 512 MiB: refused by its declared size, not decompressed."""
    bomb = tmp_path / "bomb.npz"
    count = (512 << 20) // 4
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("out.npy", "w", force_zip64=True) as member:
            member.write(_npy_header((count,)))
            zeros = bytes(1 << 20)
            for _ in range((count * 4) >> 20):
                member.write(zeros)
    assert bomb.stat().st_size < 1 << 20
    code, out, seconds, peak = _diff(str(bomb))
    assert code == 2
    _one_line_exit_2(out, "bomb.npz", "out")
    assert seconds < 5 and peak < 20 << 20, (seconds, peak)


def test_npz_member_lying_about_its_size_is_refused(tmp_path: Path) -> None:
    """A member whose .npy header declares more elements than the member holds."""
    liar = tmp_path / "liar.npz"
    with zipfile.ZipFile(liar, "w") as zf:
        zf.writestr("out.npy", _npy_header((10 ** 6,)) + b"\0" * 16)
    code, out, _, _ = _diff(str(liar))
    assert code == 2
    _one_line_exit_2(out, "liar.npz", "out")


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_fifo_where_an_output_file_should_be_does_not_hang(tmp_path: Path) -> None:
    s = _tiny(tmp_path / "s")
    recs = _records(s)
    other = np.arange(16, dtype=np.float32) + 1
    h = output_hash(other)
    recs[1]["outputs"][0]["hash"] = h
    _write_records(s, recs)
    os.mkfifo(s / "outputs" / f"{h}.npy")
    t = time.monotonic()
    proc = _cli("diff", str(s), timeout=60)
    assert ended_within(t)
    assert proc.returncode == 2, proc.stderr
    _one_line_exit_2(proc.stderr, f"{h}.npy", "regular file")


@pytest.mark.parametrize("name", ["index.jsonl", "run.json"])
def test_fifo_as_index_or_run_json_does_not_hang(tmp_path: Path, name: str) -> None:
    s = _tiny(tmp_path / "s")
    (s / name).unlink()
    os.mkfifo(s / name)
    proc = _cli("diff", str(s), timeout=60)
    assert proc.returncode == 2, proc.stderr
    _one_line_exit_2(proc.stderr, name, "regular file")


def test_overlong_index_line_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    s = _tiny(tmp_path / "s")
    with (s / "index.jsonl").open("a") as f:
        f.write('{"run": 3, "input": "p", "x": "' + "a" * (64 << 20) + '"}\n')
    code, out, _, peak = _diff(str(s))
    assert code == 2
    _one_line_exit_2(out, "index.jsonl:4")
    assert peak < 40 << 20, peak


def test_bad_snapshots_are_exit_2_or_ignored_never_a_crash(tmp_path: Path) -> None:
    s = _tiny(tmp_path / "s")
    (s / "snapshots.jsonl").write_text('{"at": "before", "run": null, "thermal": {"z": 1e999}}\n')
    code, out, _, _ = _diff(str(s))
    assert code == 0, out
