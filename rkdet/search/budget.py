"""The search's time budget and cost order: a search that finishes (docs/SEARCH.md, "Budget and cost").

Why: one rknn-toolkit2 `mmse` build of a PP-PicoDet detector ran 25 min with the toolkit estimating 1 h 46 min
more, while `normal` builds of the same model took ~2.5 min each; the default space holds six mmse variants.
So the variants are tried cheapest first by an *estimate* (fixed, so two searches of a config try the same
order), each build's time is *measured* (search.json), the measured cost of what ran replaces the estimate
for what is left, and the search stops when the budget is spent, saying how much was left untried.

The estimate is relative to the config as given: algorithm factor x (fixed part + calibration part). The
factors only order the variants and decide whether one still fits; they are not a promise.

Pure: the clock is injected (tests drive it; nothing here reads the wall clock by itself).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from rkdet.errors import InputError
from rkdet.search.space import SearchVariant

DEFAULT_BUDGET = "20m"  # a coffee break
# Relative build cost per quantize.algorithm (normal = 1): kl_divergence builds a histogram per tensor
# (a little more); mmse searches every tensor's clipping range by repeated inference over the
# calibration set (the issue-24 detector: >= 50x normal). 20 keeps mmse behind every normal and
# kl_divergence variant of the default space without claiming to predict it.
ALGORITHM_COST = {"normal": 1.0, "kl_divergence": 1.5, "mmse": 20.0}
FIXED_SHARE = 0.3  # the share of a build that does not scale with the calibration images (load, compile, simulate)
HYBRID_COST = 1.5  # hybrid_quantization_step1 + step2: a build and a half of the config as given
FLOAT_COST = 0.5  # a float16 build: no calibration at all
LAYERS_COST = 2.0  # `rkdet layers`: a rebuild plus the per-layer accuracy analysis
_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str, where: str = "--search-budget") -> float:
    """Seconds in `20m`, `1h30m`, `90s`, `45` (minutes when no unit); InputError (exit 2) otherwise."""
    value = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        seconds = float(value) * 60
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*([hms])", value)
        if not parts or re.sub(r"\s+", "", "".join(n + u for n, u in parts)) != re.sub(r"\s+", "", value):
            raise InputError(f"{where} {text!r}: expected a duration such as 20m, 1h30m, 90s (or minutes: 45)")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise InputError(f"{where} {text!r}: must be more than 0")
    return seconds


def format_duration(seconds: float) -> str:
    """`1h46m`, `25m`, `40s`: what a progress line or a table shows."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s}s"
    h, rem = divmod(s, 3600)
    m = rem // 60
    return f"{h}h{m:02d}m" if h else f"{m}m{rem % 60:02d}s" if m < 10 else f"{m}m"


def relative_cost(variant: SearchVariant, algorithm: str, images: int) -> float:
    """A variant's estimated build cost relative to the config as given (1.0)."""
    changes = variant.changes
    if variant.stage == "hybrid":
        return HYBRID_COST
    if changes.get("quantize.force_fp16"):
        return FLOAT_COST
    alg = changes.get("quantize.algorithm", algorithm)
    used = changes.get("quantize.max_images", images)
    share = used / images if images else 1.0
    own = ALGORITHM_COST.get(algorithm, 1.0)
    return ALGORITHM_COST.get(alg, 1.0) / own * (FIXED_SHARE + (1 - FIXED_SHARE) * share)


def cheapest_first(variants: list[SearchVariant], algorithm: str, images: int) -> list[SearchVariant]:
    """The config as given first (the baseline every other variant is measured against), then the rest by
    estimated cost, ties in the documented order; re-indexed in the order they are tried."""
    if not variants:
        return []
    head, rest = variants[0], variants[1:]
    ordered = [head, *sorted(rest, key=lambda v: (relative_cost(v, algorithm, images), v.index))]
    return [replace(v, index=i) for i, v in enumerate(ordered)]


@dataclass
class Budget:
    """How long the search may take, on an injected clock; what each build cost, measured."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    started: float = 0.0
    measured: dict[int, float] = field(default_factory=dict)  # variant index -> seconds its build took
    baseline: float | None = None  # seconds of one relative-cost unit (from the measured builds)

    def start(self) -> Budget:
        self.started = self.clock()
        return self

    @property
    def deadline(self) -> float:
        return self.started + self.seconds

    def elapsed(self) -> float:
        return self.clock() - self.started

    def remaining(self) -> float:
        return self.seconds - self.elapsed()

    def record(self, variant: SearchVariant, seconds: float, relative: float) -> None:
        """A finished build's measured time; one unit's cost becomes total measured time / total units."""
        self.measured[variant.index] = seconds
        self._relative[variant.index] = relative
        units = sum(self._relative[i] for i in self.measured)
        self.baseline = sum(self.measured.values()) / max(units, 1e-9)

    def estimate(self, relative: float) -> float | None:
        """Seconds a build of this relative cost should take, from what was measured (None: nothing yet)."""
        return None if self.baseline is None else self.baseline * relative

    def fits(self, relative: float) -> bool:
        """Whether a build of this relative cost should end before the deadline (unknown: it may start)."""
        guess = self.estimate(relative)
        return self.remaining() > 0 and (guess is None or guess <= self.remaining())

    def __post_init__(self) -> None:
        self._relative: dict[int, float] = {}
