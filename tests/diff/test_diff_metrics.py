"""Property tests of the difference metrics (hypothesis) and the tolerance semantics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rkdet.diff.metrics import abs_difference, compare_arrays, ulp_distance
from rkdet.tolerance import Tolerance
from rkdet.errors import InputError

FLOAT_DTYPES = st.sampled_from([np.float16, np.float32, np.float64])
SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6)


@st.composite
def float_pairs(draw, allow_nan: bool = True):
    """Two same-shape float arrays of any values (NaN, inf, -0.0 included), often nearly equal."""
    dtype = draw(FLOAT_DTYPES)
    shape = draw(SHAPES)
    elements = st.floats(allow_nan=allow_nan, allow_infinity=True, width=np.dtype(dtype).itemsize * 8)
    a = draw(hnp.arrays(dtype, shape, elements=elements))
    mode = draw(st.sampled_from(["copy", "random", "bitflip"]))
    if mode == "copy":
        b = a.copy()
    elif mode == "random":
        b = draw(hnp.arrays(dtype, shape, elements=elements))
    else:
        b = a.copy()
        bits = b.view(f"u{b.dtype.itemsize}").reshape(-1)
        i = draw(st.integers(0, bits.size - 1))
        bits[i] ^= bits.dtype.type(1 << draw(st.integers(0, b.dtype.itemsize * 8 - 1)))
    return a, b


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}") == b.view(f"u{b.dtype.itemsize}")


@settings(max_examples=300, deadline=None)
@given(float_pairs())
def test_ulp_zero_iff_bitwise_equal(pair) -> None:
    a, b = pair
    assert np.array_equal(ulp_distance(a, b) == 0, _bitwise_equal(a, b))


@settings(max_examples=300, deadline=None)
@given(float_pairs())
def test_metrics_symmetric(pair) -> None:
    a, b = pair
    assert np.array_equal(ulp_distance(a, b), ulp_distance(b, a))
    assert np.array_equal(abs_difference(a, b), abs_difference(b, a))
    ab, ba = compare_arrays(a, b), compare_arrays(b, a)
    assert (ab.differing, ab.max_ulp, ab.max_abs) == (ba.differing, ba.max_ulp, ba.max_abs)
    assert (ab.higher, ab.lower) == (ba.lower, ba.higher)
    if ab.cosine is not None and ba.cosine is not None:
        assert ab.cosine == pytest.approx(ba.cosine, rel=1e-9, abs=1e-9)
    assert ab.differing == int(np.count_nonzero(~_bitwise_equal(a, b)))


@settings(max_examples=200, deadline=None)
@given(float_pairs(allow_nan=False))
def test_identical_arrays_cosine_one_and_zero_distances(pair) -> None:
    a, _ = pair
    s = compare_arrays(a, a.copy())
    assert s.cosine == 1.0 and s.rel_l2 == 0.0 and s.max_ulp == 0 and s.differing == 0 and s.within


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, st.integers(2, 200), elements=st.floats(-1e3, 1e3, width=32)),
       hnp.arrays(np.float32, st.integers(2, 200), elements=st.floats(-1e3, 1e3, width=32)))
def test_cosine_and_rel_l2_match_direct_formulas(a, b) -> None:
    n = min(a.size, b.size)
    a, b = a[:n], b[:n]
    s = compare_arrays(a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    na, nb = np.linalg.norm(a64), np.linalg.norm(b64)
    if s.differing and na > 0 and nb > 0:
        assert s.cosine == pytest.approx(float(a64 @ b64 / (na * nb)), abs=1e-9)
        assert s.rel_l2 == pytest.approx(float(np.linalg.norm(b64 - a64) / na), rel=1e-9, abs=1e-12)
    assert s.max_abs == pytest.approx(float(np.max(np.abs(a64 - b64))))


def test_signed_zero_and_nan_payloads_are_deliberate() -> None:
    z = np.array([0.0, -0.0], dtype=np.float32)
    assert ulp_distance(z[:1], z[1:]).tolist() == [1]  # +0 and -0: different bits, 1 ULP apart
    assert abs_difference(z[:1], z[1:]).tolist() == [0.0]
    s = compare_arrays(z[:1], z[1:])
    assert s.differing == 1 and not s.within  # bitwise default catches a sign flip on zero
    assert compare_arrays(z[:1], z[1:], Tolerance(max_abs=1e-9)).within  # a declared abs bound accepts it
    nan1 = np.array([0x7FC00000], dtype=np.uint32).view(np.float32)
    nan2 = np.array([0x7FC00001], dtype=np.uint32).view(np.float32)
    assert ulp_distance(nan1, nan2).tolist() == [1] and abs_difference(nan1, nan2).tolist() == [0.0]
    assert abs_difference(nan1, np.float32([1.0])).tolist() == [np.inf]


def test_one_ulp_step_and_integer_outputs() -> None:
    x = np.float32([1.0, -2.5, 3e-39])  # includes a subnormal
    up = np.nextafter(x, np.float32(np.inf))
    assert ulp_distance(x, up).tolist() == [1, 1, 1]
    q = np.array([-128, 0, 127], dtype=np.int8)
    assert ulp_distance(q, q[::-1].copy()).tolist() == [255, 0, 255]
    s = compare_arrays(q, np.array([-127, 0, 127], dtype=np.int8), Tolerance(max_ulp=1))
    assert s.max_ulp == 1 and s.within and s.direction == "higher"


def test_kl_for_probability_like_outputs() -> None:
    p = np.array([[0.7, 0.2, 0.1]], dtype=np.float32)
    q = np.array([[0.6, 0.3, 0.1]], dtype=np.float32)
    s = compare_arrays(p, q)
    expected = float(np.sum(p.astype(np.float64) * np.log(p.astype(np.float64) / q.astype(np.float64))))
    assert s.kl_kind == "categorical" and s.kl == pytest.approx(expected, rel=1e-6)
    s2 = compare_arrays(np.float32([[0.9, 0.1]]) * 0.5, np.float32([[0.8, 0.2]]) * 0.5)
    assert s2.kl_kind == "bernoulli" and s2.kl > 0
    assert compare_arrays(np.float32([5.0, -1.0]), np.float32([5.0, -2.0])).kl is None


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 4), st.integers(2, 8)), elements=st.floats(0, 1, width=32)),
       st.integers(0, 31))
def test_kl_is_never_negative(p, i) -> None:
    q = p.copy()
    flat = q.reshape(-1)
    flat[i % flat.size] = np.nextafter(flat[i % flat.size], np.float32(0.5))
    s = compare_arrays(p, q)
    assert s.kl is None or s.kl >= 0.0


def test_tolerance_semantics() -> None:
    ref = np.zeros(10, dtype=np.float32)
    cand = ref.copy()
    cand[3] = 1e-4
    assert not compare_arrays(ref, cand).within
    assert compare_arrays(ref, cand, Tolerance(max_abs=1e-3)).within
    assert not compare_arrays(ref, cand, Tolerance(max_abs=1e-5)).within
    ones = np.ones(10, dtype=np.float32)
    near = ones.copy()
    near[0] = 1.001
    assert compare_arrays(ones, near, Tolerance(min_cosine=0.99)).within  # only the declared bound applies
    assert not compare_arrays(ones, near, Tolerance(max_rel_l2=1e-6)).within


def test_tolerance_from_mapping_and_flags() -> None:
    assert Tolerance.from_mapping(None).bitwise and Tolerance.from_mapping({}).describe() == "bitwise"
    t = Tolerance.from_mapping({"max_abs": "1e-3", "max_ulp": 2, "min_cosine": 0.999, "max_rel_l2": None})
    assert (t.max_abs, t.max_ulp, t.min_cosine, t.max_rel_l2) == (1e-3, 2, 0.999, None) and not t.bitwise
    assert Tolerance.from_pairs(["max_ulp=4"], t).max_ulp == 4
    for bad in ({"max_ulps": 1}, {"max_ulp": 1.5}, {"max_abs": -1}, {"min_cosine": 2}, {"max_abs": True}, [1]):
        with pytest.raises(InputError) as err:
            Tolerance.from_mapping(bad)  # type: ignore[arg-type]
        assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="KEY=VALUE"):
        Tolerance.from_pairs(["max_ulp"])


def test_choices_are_one_definition() -> None:
    """--decoder, --backend and --core-mask take rkdet.choices' tuples; core masks and backends are the
    on-board program's own (rkdet-run takes and records them), re-exported, not copied."""
    import typing

    from rkdet.onboard import resultset
    from rkdet.choices import BACKENDS, CORE_MASKS, DECODERS
    from rkdet.cli.diff import diff_command
    from rkdet.config import RunSection
    from rkdet.decode import DECODERS as DECODE

    assert DECODE is DECODERS
    decoder = next(p for p in diff_command.params if p.name == "decoder")
    assert tuple(decoder.type.choices) == DECODERS  # type: ignore[attr-defined]
    assert resultset.CORE_MASKS is CORE_MASKS and resultset.BACKENDS is BACKENDS
    assert typing.get_args(RunSection.model_fields["backend"].annotation) == BACKENDS
