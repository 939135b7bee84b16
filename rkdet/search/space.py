"""The search space of `rkdet convert --search`, in its fixed order (docs/SEARCH.md).

1. The config as given.
2. Quantization options: the product of quantize.algorithm (normal, mmse, kl_divergence), quantize.method
   (channel, layer) and the calibration subset (all images, the first half, the first quarter: quantize.max_images),
   each dimension starting with the config's own value, ordered by how many keys change (fewest first), then
   by which keys change (algorithm before method before calibration), then by the values' order.
3. Hybrid quantization of the config as given: quantize.float_layers = the k worst layers by *single* error
   (`rkdet layers` on the config's build), k = 1, 2, 4, ... up to 64 while k is less than the number of
   measured layers (every layer float16 is a whole-float build, which quantize.force_fp16: false forbids).
   When `rkdet layers` says the loss *accumulates* (no single layer below fidelity.min_layer_cosine while
   the whole model is), single-layer hybrids cannot fix it: the stage is then one float16 build
   (quantize.force_fp16: true), labelled as a float build, never as INT8.

The variants of stages 1-2 are tried cheapest first by estimated cost (rkdet/search/budget.py), the config
as given always first.

Pure functions: no toolkit here, so the order is tested without building anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any

from rkdet.errors import InputError

ALGORITHMS = ("normal", "mmse", "kl_divergence")
METHODS = ("channel", "layer")
CALIBRATION_DIVISORS = (1, 2, 4)  # all images, the first half, the first quarter
DIMENSIONS = ("algorithm", "method", "calibration", "hybrid")
MAX_HYBRID_K = 64  # the default k stops here (and below the number of measured layers)
FLOAT_LABEL = "FLOAT16 build, not INT8 (quantize.force_fp16: true)"


@dataclass(frozen=True)
class Space:
    """Which values each dimension may take (`--search-space` narrows them); hybrid None: k = 1, 2, 4, ..."""

    algorithms: tuple[str, ...] = ALGORITHMS
    methods: tuple[str, ...] = METHODS
    calibration: tuple[int, ...] = CALIBRATION_DIVISORS
    hybrid: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": list(self.algorithms), "method": list(self.methods), "calibration": list(self.calibration),
                "hybrid": "1, 2, 4, ... below the number of measured layers" if self.hybrid is None else list(self.hybrid)}


@dataclass(frozen=True)
class SearchVariant:
    """One candidate: its place in the order, its stage and exactly the config keys it changes."""

    index: int
    stage: str  # "config" | "quantize" | "hybrid" | "float"
    changes: dict[str, Any] = field(default_factory=dict)  # dotted key -> value, in dimension order

    def label(self) -> str:
        if not self.changes:
            return "the config as given"
        if self.stage == "float":
            return FLOAT_LABEL
        return ", ".join(f"{k}={_short(v)}" for k, v in self.changes.items())


def _short(value: Any) -> str:
    if isinstance(value, list):
        return f"[{', '.join(map(str, value[:4]))}{', ...' if len(value) > 4 else ''}] ({len(value)})"
    return str(value)


def parse_space(specs: tuple[str, ...]) -> Space:
    """`--search-space DIM=V1,V2` (repeatable) narrows a dimension; `hybrid=none` skips the hybrid stage."""
    space = Space()
    seen = set()
    for spec in specs:
        dim, sep, values = spec.partition("=")
        dim = dim.strip()
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or dim not in DIMENSIONS or not items:
            raise InputError(f"--search-space {spec!r}: expected DIM=V1,V2 with DIM one of {', '.join(DIMENSIONS)}")
        if dim in seen:
            raise InputError(f"--search-space: {dim} given twice")
        seen.add(dim)
        if dim in ("algorithm", "method"):
            allowed = ALGORITHMS if dim == "algorithm" else METHODS
            bad = [v for v in items if v not in allowed]
            if bad:
                raise InputError(f"--search-space {dim}: {', '.join(bad)} not allowed (allowed: {', '.join(allowed)})")
            space = replace(space, **{"algorithms" if dim == "algorithm" else "methods": tuple(dict.fromkeys(items))})
            continue
        if dim == "hybrid" and items == ["none"]:
            space = replace(space, hybrid=())
            continue
        try:
            numbers = tuple(dict.fromkeys(int(v) for v in items))
        except ValueError:
            raise InputError(f"--search-space {spec!r}: {dim} takes whole numbers"
                             f"{' (or none)' if dim == 'hybrid' else ' (divisors: 1 all, 2 half, 4 quarter)'}") from None
        if any(n < 1 for n in numbers):
            raise InputError(f"--search-space {spec!r}: values must be >= 1")
        space = replace(space, **{dim: numbers})
    return space


def _first(own: Any, values: tuple) -> tuple:
    """The config's own value first (it changes nothing), then the others in the space's order."""
    return (own, *[v for v in values if v != own])


def quantize_variants(space: Space, algorithm: str, method: str, calibration_count: int) -> list[SearchVariant]:
    """Stage 1 and 2: the config as given, then the quantization options (fewest changed keys first)."""
    sizes: list[int | None] = [None]  # None: the config's own calibration images
    for divisor in space.calibration:
        m = math.ceil(calibration_count / divisor)
        if divisor > 1 and m < calibration_count and m not in sizes:
            sizes.append(m)
    candidates = []
    for order, (alg, meth, size) in enumerate(product(_first(algorithm, space.algorithms), _first(method, space.methods),
                                                      sizes)):
        changes: dict[str, Any] = {}
        if alg != algorithm:
            changes["quantize.algorithm"] = alg
        if meth != method:
            changes["quantize.method"] = meth
        if size is not None:
            changes["quantize.max_images"] = size
        dims = tuple(i for i, changed in enumerate((alg != algorithm, meth != method, size is not None)) if changed)
        candidates.append(((len(dims), dims, order), changes))
    candidates.sort(key=lambda c: c[0])  # fewest changes first; then algorithm before method before calibration
    return [SearchVariant(i, "config" if not ch else "quantize", ch) for i, (_, ch) in enumerate(candidates)]


def hybrid_ks(space: Space, measured_layers: int, ranked: int) -> list[int]:
    """k = 1, 2, 4, ... (or the space's list) below the measured layer count and within the ranked layers."""
    if space.hybrid is not None:
        return [k for k in space.hybrid if k < measured_layers and k <= ranked]
    ks, k = [], 1
    while k < measured_layers and k <= ranked and k <= MAX_HYBRID_K:
        ks.append(k)
        k *= 2
    return ks


def hybrid_variants(start: int, ks: list[int], worst: list[str], existing: list[str]) -> list[SearchVariant]:
    """Stage 3: the k worst single-error layers in float16 (added to any the config already names). The
    config's own float layers are not counted among the k: a variant that adds no layer would be the build
    that just failed, so none is proposed (issue 36 §3)."""
    fresh = [w for w in dict.fromkeys(worst) if w not in existing]
    out: list[SearchVariant] = []
    seen: set[int] = set()
    for k in ks:
        added = fresh[:k]
        if not added or len(added) in seen:
            continue
        seen.add(len(added))
        out.append(SearchVariant(start + len(out), "hybrid", {"quantize.float_layers": [*existing, *added]}))
    return out


def float_variant(index: int, clear_float_layers: bool) -> SearchVariant:
    """The remedy for an accumulating loss: the whole model in float16, labelled as a float build."""
    changes: dict[str, Any] = {"quantize.force_fp16": True}
    if clear_float_layers:  # float_layers is hybrid quantization of a quantized build: not with force_fp16
        changes["quantize.float_layers"] = []
    return SearchVariant(index, "float", changes)
