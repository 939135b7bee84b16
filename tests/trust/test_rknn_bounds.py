"""Issue 21 §5: the `.rknn` reader (host `read_rknn`, board `read_rknn_facts`) is bounded by
construction: every table/vector read is paid for against the file's size (aliasing cannot make it
quadratic), strings and the build_info literal are capped before parsing, the file is mapped and
hashed in chunks (never read whole), nested JSON is depth-checked, a FIFO is refused. Plus a
property-based fuzz of both readers and of the bounded JSON reader."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rknn_craft as craft
from rkdet.convert import rknn_file
from rkdet.convert.rknn_file import RknnFormatError, read_rknn
from rkdet.errors import InputError
from rkdet.records import io
from rkdet.onboard.identity import read_rknn_facts

FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _write(tmp_path: Path, data: bytes, name: str = "m.rknn") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_a_minimal_crafted_file_parses(tmp_path: Path) -> None:
    path = _write(tmp_path, craft.minimal())
    info = read_rknn(path)
    assert info.graph_count == 1 and info.toolkit_version == "2.5.0"
    assert info.file_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()  # hashed in chunks, same digest
    assert read_rknn_facts(str(path))["toolkit_version"] == "2.5.0"


def test_aliased_tables_are_refused_within_the_work_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, craft.aliased(20_000))  # 160 KB: 4e8 tensor decodes unbounded (it ran past 60 s)
    decoded = []
    real = rknn_file._decode
    monkeypatch.setattr(rknn_file, "_decode", lambda fb, t, spec: decoded.append(t) or real(fb, t, spec))
    with pytest.raises(RknnFormatError) as err:
        read_rknn(path)
    assert str(path) in str(err.value) and "aliased tables" in str(err.value)
    size = path.stat().st_size  # the mechanism: work is linear in the file's size, not quadratic
    assert len(decoded) * 12 <= rknn_file.MAX_WORK_FACTOR * size + rknn_file.MAX_WORK_BASE


def test_a_huge_string_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    path = _write(tmp_path, craft.with_string(3, b"{" + b"1:1," * (13 << 20) + b"}"))  # a 52 MiB build_info
    with pytest.raises(RknnFormatError) as err:
        read_rknn(path)
    assert str(path) in str(err.value) and "over the 16 MiB" in str(err.value)


def test_a_large_build_info_is_never_literal_evaluated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = b"{" + b"1:1," * (1 << 19) + b"}"  # 2 MiB: over MAX_LITERAL
    path = _write(tmp_path, craft.with_string(3, text))
    monkeypatch.setattr(rknn_file.ast, "literal_eval", lambda s: pytest.fail("literal_eval of an oversized literal"))
    info = read_rknn(path)
    assert info.build_info == {"unparsed_sha256": hashlib.sha256(text).hexdigest(), "unparsed_bytes": len(text)}


def test_nested_metadata_json_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    path = _write(tmp_path, craft.minimal(b"[" * 100_000 + b"]" * 100_000))
    with pytest.raises(RknnFormatError) as err:
        read_rknn(path)
    assert str(path) in str(err.value) and "nested deeper than 64" in str(err.value)
    assert read_rknn_facts(str(path))["toolkit_version"] is None  # the board's reader: no RecursionError
    deep_io = _write(tmp_path, craft.with_string(12, b"[" * 100_000 + b"]" * 100_000), "io.rknn")
    assert read_rknn(deep_io).graph_count == 1


def test_a_fifo_rknn_is_refused_on_host_and_board(tmp_path: Path) -> None:
    path = tmp_path / "m.rknn"
    os.mkfifo(path)
    with pytest.raises(RknnFormatError, match="a FIFO"):
        read_rknn(path)
    assert read_rknn_facts(str(path)) is None  # opened O_NONBLOCK, refused by fstat: never blocks


def test_a_big_sparse_file_is_mapped_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = craft.minimal()
    path = tmp_path / "big.rknn"
    with path.open("wb") as fh:
        fh.write(data[:-30])  # a header promising 1 GiB of model, sparse
        fh.truncate(1 << 30)
    reads: list[int] = []
    real_read = rknn_file.io.open_regular

    def counting(p, error=InputError):
        handle = real_read(p, error)
        original = handle.read
        handle.read = lambda n=-1: reads.append(n) or original(n)  # type: ignore[method-assign]
        return handle

    monkeypatch.setattr(rknn_file.io, "open_regular", counting)
    with pytest.raises(RknnFormatError):
        read_rknn(path)
    assert reads == []  # mapped: no read() of the whole file


# -- fuzz: both readers end in a result or their one refusal, never anything else --

SEEDS = [craft.minimal(), craft.aliased(40), craft.with_string(3, b"{'a': 1}"), craft.with_string(12, b'{"x": {}}')]


@FUZZ
@given(seed=st.sampled_from(SEEDS), edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=8),
       cut=st.integers(0, 10_000))
def test_fuzz_rknn_readers(tmp_path_factory: pytest.TempPathFactory, seed: bytes, edits: list[tuple[int, int]],
                           cut: int) -> None:
    data = bytearray(seed)
    for at, value in edits:
        data[at % len(data)] = value
    data = data[: max(0, len(data) - cut % 64)] if cut % 3 == 0 else data
    path = tmp_path_factory.mktemp("fuzz") / "m.rknn"
    path.write_bytes(bytes(data))
    try:
        read_rknn(path)
    except RknnFormatError as err:
        assert str(path) in str(err)
    facts = read_rknn_facts(str(path))
    assert facts is None or set(facts) == {"custom_string", "format_version", "embedded_fingerprint", "toolkit_version"}


JSON_ATOMS = st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b":", b",", b"1", b"-", b"e9", b"null", b"NaN",
                              b'"a"', b"\xff", b"0" * 70, b" "])


@FUZZ
@given(st.one_of(st.binary(max_size=300), st.lists(JSON_ATOMS, max_size=200).map(b"".join)))
def test_fuzz_bounded_json_reader(data: bytes) -> None:
    try:
        io.loads(data, "fuzz.json")
    except InputError as err:
        assert str(err).startswith("fuzz.json: ")


@FUZZ
@given(st.recursive(st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.text(max_size=5),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
                    max_leaves=30))
def test_fuzz_the_depth_is_the_real_depth(value: object) -> None:
    import json

    def real(v: object) -> int:
        if isinstance(v, list):
            return 1 + max((real(x) for x in v), default=0)
        if isinstance(v, dict):
            return 1 + max((real(x) for x in v.values()), default=0)
        return 0

    text = json.dumps(value).encode()
    assert io.depth(text) == real(value)
    assert io.loads(text, "x") == value


# -- issue 30 findings 7 (the .rknn side) and 15 --

def test_a_big_metadata_json_is_refused_before_it_is_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, craft.minimal(b'{"version": "2.5.0", "pad": "' + b"x" * (2 << 20) + b'"}'))
    monkeypatch.setattr(io, "loads", lambda *a, **k: pytest.fail("a 2 MiB metadata JSON was parsed"))
    with pytest.raises(RknnFormatError) as err:
        read_rknn(path)
    assert str(path) in str(err.value) and "over the 1 MiB" in str(err.value) and "\n" not in str(err.value)


def test_build_info_is_evaluated_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, craft.with_string(3, b"{'a': {1, 2}, 'b': 3}"))
    calls = []
    real = rknn_file.ast.literal_eval
    monkeypatch.setattr(rknn_file.ast, "literal_eval", lambda s: calls.append(len(s)) or real(s))
    info = read_rknn(path)
    assert calls == [len("{'a': {1, 2}, 'b': 3}")] and info.build_info == {"a": {1, 2}, "b": 3}


def test_the_shape_product_stops_at_the_buffer_size() -> None:
    huge = [2 ** 62] * 100_000  # math.prod of this took minutes (a 1.2 MB file)
    assert rknn_file._bounded_prod(huge, 1 << 20) == (1 << 20) + 1
    assert rknn_file._bounded_prod([1, 3, 4, 4], 100) == 48 and rknn_file._bounded_prod([2, -1], 100) is None
    assert rknn_file._bounded_prod([0, 2 ** 62], 10) == 0


def test_compare_builds_node_lists_are_compared_in_linear_work() -> None:
    from types import SimpleNamespace

    from rkdet.buildcompare import content

    a = SimpleNamespace(tables={"nodes": [{"type": "Conv", "name": f"n{i}"} for i in range(50_000)], "tensors": []})
    b = SimpleNamespace(tables={"nodes": [{"type": "Conv", "name": f"m{i}"} for i in range(50_000)], "tensors": []})
    [change] = content._tables(a, b)  # type: ignore[arg-type]  # 50 000 x 50 000 `in` a list took 294 s
    assert change.category == "node list" and "('Conv', 'n0')" in change.detail and "('Conv', 'm0')" in change.detail
