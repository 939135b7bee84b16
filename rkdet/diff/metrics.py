"""Element-wise and whole-array difference metrics, vectorised with numpy.

ULP distance is measured in IEEE-754 *totalOrder*: each bit pattern maps to one unsigned key
(the classic radix-sort key), and the distance is the difference of keys. So the distance is 0
iff the two values are bitwise identical, on purpose: ``-0.0`` and ``+0.0`` are 1 ULP apart
(a sign flip on zero is a real non-determinism signal), and NaNs with different payloads are a
non-zero distance apart. A NaN against a number is a huge distance; its absolute difference is
``inf`` (two NaNs have absolute difference 0). Integer outputs (quantized INT8/UINT8) use
``|a - b|`` for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rkdet.tolerance import Tolerance

# Histogram of absolute differences: decade bins 1e-12 .. 1e4, plus under/overflow.
HIST_EDGES = tuple(10.0 ** e for e in range(-12, 5))
_PROB_EPS = 1e-7


def _unsigned_view(x: np.ndarray) -> np.ndarray:
    """The raw bits of `x` as unsigned integers of the same width (no copy when contiguous)."""
    x = np.ascontiguousarray(x)
    if x.dtype.kind == "b":
        return x.view(np.uint8)
    return x.view(f"u{x.dtype.itemsize}")


def ordered_keys(x: np.ndarray) -> np.ndarray:
    """Unsigned keys whose order is IEEE totalOrder for floats and numeric order for integers."""
    if x.dtype.kind == "f":
        bits = _unsigned_view(x)
        sign = np.array(1 << (8 * x.dtype.itemsize - 1), dtype=bits.dtype)
        return np.where(bits & sign, ~bits, bits | sign)
    if x.dtype.kind in "iub":
        wide = x.astype(np.int64)
        return (wide.view(np.uint64) ^ np.uint64(1 << 63)) if x.dtype.kind == "i" else wide.view(np.uint64)
    raise TypeError(f"unsupported dtype {x.dtype} for ULP distance")


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise ULP distance (uint64); 0 exactly where `a` and `b` are bitwise identical."""
    ka = ordered_keys(np.asarray(a)).astype(np.uint64).ravel()
    kb = ordered_keys(np.asarray(b)).astype(np.uint64).ravel()
    return np.where(ka >= kb, ka - kb, kb - ka).reshape(np.shape(a))


def abs_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float64, with NaN against NaN as 0 and NaN against a number as inf."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is NaN, handled just below
        d = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    bad = np.isnan(d)
    if bad.any():
        with np.errstate(invalid="ignore"):  # casting a signalling NaN payload warns; it stays NaN
            both = np.isnan(np.asarray(a, dtype=np.float64)) & np.isnan(np.asarray(b, dtype=np.float64))
        d[bad] = np.where(both[bad], 0.0, np.inf)
    return d


@dataclass
class NumericStats:
    """How a candidate array differs from a reference array (all metrics, one pass each)."""

    elements: int
    differing: int  # elements whose bits differ
    first_index: int | None = None  # flat C-order index of the first differing element
    first_reference: float | int | None = None
    first_candidate: float | int | None = None
    max_abs: float = 0.0
    mean_abs: float = 0.0
    max_ulp: int = 0
    max_lsb: float | None = None  # in quantization steps: integer outputs, or float outputs with a known scale
    cosine: float | None = 1.0
    rel_l2: float | None = 0.0
    kl: float | None = None  # KL(reference || candidate) for probability-like outputs
    kl_kind: str | None = None  # "categorical" (last axis sums to 1) | "bernoulli" (values in [0, 1])
    higher: int = 0  # differing elements where candidate > reference
    lower: int = 0
    mean_signed: float = 0.0  # mean of candidate - reference over all elements
    failing: int = 0  # elements outside the element-wise tolerance
    within: bool = True
    reasons: list[str] = field(default_factory=list)
    abs_hist: list[int] = field(default_factory=list)  # counts per HIST_EDGES bin (len + 1)

    @property
    def direction(self) -> str:
        """"higher", "lower", "mixed" or "none": the sign of candidate - reference where they differ."""
        if self.higher and not self.lower:
            return "higher"
        if self.lower and not self.higher:
            return "lower"
        return "mixed" if self.differing else "none"

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in (
            "elements", "differing", "first_index", "first_reference", "first_candidate", "max_abs", "mean_abs",
            "max_ulp", "max_lsb", "cosine", "rel_l2", "kl", "kl_kind", "higher", "lower", "mean_signed", "failing",
            "within", "reasons")}
        out["direction"] = self.direction
        return out


def _scalar(x: np.generic) -> float | int:
    return x.item()


def _finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _probability_kind(ref: np.ndarray, cand: np.ndarray) -> str | None:
    """"categorical" (last axis sums to 1), "bernoulli" (values in [0, 1]) or None; no full copies."""
    if ref.dtype.kind != "f" or ref.size == 0:
        return None
    for arr in (ref, cand):
        lo, hi = arr.min(), arr.max()
        if not (np.isfinite(lo) and np.isfinite(hi) and lo >= 0 and hi <= 1):
            return None
    if ref.ndim >= 1 and ref.shape[-1] > 1:
        sums = [np.sum(a, axis=-1, dtype=np.float64) for a in (ref, cand)]
        if all(np.allclose(s, 1.0, atol=1e-3) for s in sums):
            return "categorical"
    return "bernoulli"


def _kl_terms(kind: str, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per-element KL contributions; zero wherever p == q, so only differing elements are needed."""
    p = p.astype(np.float64)
    q = q.astype(np.float64)
    if kind == "categorical":
        p, q = np.clip(p, _PROB_EPS, 1.0), np.clip(q, _PROB_EPS, 1.0)
        return p * np.log(p / q)
    p, q = np.clip(p, _PROB_EPS, 1 - _PROB_EPS), np.clip(q, _PROB_EPS, 1 - _PROB_EPS)
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


def reference_norm2(reference: np.ndarray) -> float:
    """|reference|^2 in float64: compare_arrays accepts it precomputed, since references repeat."""
    flat = np.asarray(reference).reshape(-1)
    return float(np.einsum("i,i->", flat, flat, dtype=np.float64))


def compare_arrays(reference: np.ndarray, candidate: np.ndarray, tolerance: Tolerance | None = None,
                   ref_norm2: float | None = None, lsb: float | None = None) -> NumericStats:
    """All metrics of `candidate` against `reference` (same shape and dtype) and the tolerance check.

    Memory-light on purpose: besides one buffered float64 pass for |r|^2 (skipped when `ref_norm2` is
    given), all work and every temporary is proportional to the number of differing elements:
    |c|^2 = |r|^2 + sum_d(c^2 - r^2) and r.c = |r|^2 + sum_d r(c - r); when those come out small
    against |r|^2 (cancellation), both are recomputed over the full arrays.
    `lsb`: the quantization step of a dequantized int8 output (its scale), for `max_lsb`.
    `tolerance`: ONE output's bounds (the caller resolves a per-output map with `Tolerance.for_output`).
    """
    tolerance = tolerance or Tolerance()
    ref = np.asarray(reference)
    cand = np.asarray(candidate)
    if ref.shape != cand.shape or ref.dtype != cand.dtype:
        raise ValueError(f"shape/dtype mismatch: {ref.shape} {ref.dtype} vs {cand.shape} {cand.dtype}")
    ref = ref if ref.flags.c_contiguous else ref.copy(order="C")
    cand = cand if cand.flags.c_contiguous else cand.copy(order="C")
    n = int(ref.size)
    ra, ca = _unsigned_view(ref).reshape(-1), _unsigned_view(cand).reshape(-1)
    idx = np.flatnonzero(ra != ca)
    stats = NumericStats(elements=n, differing=int(idx.size), abs_hist=[0] * (len(HIST_EDGES) + 1))
    if idx.size == 0:
        return stats
    r_flat, c_flat = ref.reshape(-1), cand.reshape(-1)
    rd, cd = r_flat[idx], c_flat[idx]
    absd = abs_difference(rd, cd)
    ulps = ulp_distance(rd, cd)
    stats.first_index = int(idx[0])
    stats.first_reference = _scalar(rd[0])
    stats.first_candidate = _scalar(cd[0])
    stats.max_abs = float(absd.max())
    with np.errstate(over="ignore"):  # differences near float64's max sum to inf: the mean is inf then
        stats.mean_abs = float(absd.sum() / n)
    stats.max_ulp = int(ulps.max())
    step = 1.0 if ref.dtype.kind in "iu" else lsb if lsb and lsb > 0 else None
    if step is not None:
        stats.max_lsb = round(stats.max_abs / step, 3) if np.isfinite(stats.max_abs) else None
    with np.errstate(invalid="ignore", over="ignore"):  # signalling NaNs warn on the cast; they stay NaN
        r64, c64 = rd.astype(np.float64), cd.astype(np.float64)
        signed = c64 - r64
    stats.higher = int(np.count_nonzero(signed > 0))
    stats.lower = int(np.count_nonzero(signed < 0))
    with np.errstate(over="ignore", invalid="ignore"):
        stats.mean_signed = float(np.nansum(signed) / n)
    stats.abs_hist = np.bincount(np.searchsorted(HIST_EDGES, absd[np.isfinite(absd)], side="right"),
                                 minlength=len(HIST_EDGES) + 1).tolist()
    with np.errstate(all="ignore"):
        nr = float(np.einsum("i,i->", r_flat, r_flat, dtype=np.float64)) if ref_norm2 is None else ref_norm2
        # Only the differing elements change |c|^2 and r.c; exact unless cancellation looms, then recompute.
        nc = nr + float(np.sum(c64 * c64 - r64 * r64))
        dot = nr + float(np.sum(r64 * signed))
        if not (nc >= nr / 4 and dot >= nr / 4):
            nc = float(np.einsum("i,i->", c_flat, c_flat, dtype=np.float64))
            dot = float(np.einsum("i,i->", r_flat, c_flat, dtype=np.float64))
        diff2 = float(np.sum(signed * signed))
        stats.cosine = _finite_or_none(dot / np.sqrt(nr * nc)) if nr > 0 and nc > 0 else None
        if stats.cosine is not None:
            stats.cosine = min(1.0, max(-1.0, stats.cosine))
        stats.rel_l2 = _finite_or_none(np.sqrt(diff2 / nr)) if nr > 0 else None
        stats.kl_kind = _probability_kind(ref, cand)
        if stats.kl_kind:
            terms = _kl_terms(stats.kl_kind, rd, cd)
            if stats.kl_kind == "categorical":  # KL >= 0 per row (distribution); rounding can dip below
                width = ref.shape[-1]
                row_kl = np.bincount(idx // width, weights=terms)
                stats.kl = float(np.maximum(row_kl, 0.0).sum() / (n // width))
            else:  # KL >= 0 per element (a Bernoulli distribution each)
                stats.kl = float(np.maximum(terms, 0.0).sum() / n)
    _apply_tolerance(stats, absd, ulps, tolerance, step)
    return stats


def _apply_tolerance(stats: NumericStats, absd: np.ndarray, ulps: np.ndarray, tol: Tolerance,
                     step: float | None = None) -> None:
    """Decide `within` and list the bounds that failed (absd/ulps cover the differing elements)."""
    reasons: list[str] = []
    if tol.bitwise:
        stats.failing = stats.differing
        reasons.append(f"{stats.differing} element(s) differ bitwise")
    else:
        if tol.max_abs > 0 or tol.max_ulp > 0 or tol.max_lsb > 0:
            ok = np.zeros(absd.shape, dtype=bool)
            if tol.max_lsb > 0 and step is not None:  # half a step of slack for the float dequantization
                ok |= absd <= (tol.max_lsb + 0.5) * step
            if tol.max_abs > 0:
                ok |= absd <= tol.max_abs
            if tol.max_ulp > 0:
                ok |= ulps <= np.uint64(tol.max_ulp)
            stats.failing = int(absd.size - np.count_nonzero(ok))
            if stats.failing:
                lsb = f", max_lsb {stats.max_lsb:g}" if stats.max_lsb is not None else (
                    ", no quantization step known for max_lsb" if tol.max_lsb > 0 else "")
                reasons.append(f"{stats.failing} element(s) beyond max_abs/max_ulp/max_lsb "
                               f"(max_abs {stats.max_abs:.3g}, max_ulp {stats.max_ulp}{lsb})")
        if tol.min_cosine is not None and (stats.cosine is None or stats.cosine < tol.min_cosine):
            reasons.append(f"cosine {stats.cosine} < min_cosine {tol.min_cosine:g}")
        if tol.max_rel_l2 is not None and (stats.rel_l2 is None or stats.rel_l2 > tol.max_rel_l2):
            reasons.append(f"rel_l2 {stats.rel_l2} > max_rel_l2 {tol.max_rel_l2:g}")
    stats.reasons = reasons
    stats.within = not reasons
