"""Statistical process control: an individuals chart's limits and the Western Electric rules.

Why individuals (X-mR): each point (a canary run, a shadow period, a latency window) is one value;
sigma is estimated from the mean moving range (/1.128, d2 for n=2), so a slow drift does not widen its
own limits the way a plain standard deviation would.
"""

from __future__ import annotations

from dataclasses import dataclass

D2 = 1.128


@dataclass(frozen=True)
class Limits:
    center: float
    sigma: float

    def zone(self, value: float) -> float:
        """Signed distance from the center in sigmas (0 when sigma is 0 and the value is the center)."""
        if self.sigma == 0:
            return 0.0 if value == self.center else (float("inf") if value > self.center else float("-inf"))
        return (value - self.center) / self.sigma


@dataclass(frozen=True)
class Signal:
    rule: int  # 1..4, Western Electric
    index: int  # the point that completes the pattern
    text: str


RULES = {
    1: "one point beyond 3 sigma",
    2: "two of three successive points beyond 2 sigma on one side",
    3: "four of five successive points beyond 1 sigma on one side",
    4: "eight successive points on one side of the center",
}


def limits(values: list[float]) -> Limits:
    if not values:
        return Limits(0.0, 0.0)
    center = sum(values) / len(values)
    ranges = [abs(b - a) for a, b in zip(values, values[1:])]
    sigma = (sum(ranges) / len(ranges) / D2) if ranges else 0.0
    return Limits(center, sigma)


def western_electric(values: list[float], lim: Limits) -> list[Signal]:
    """Every point where one of the four rules fires (each rule reported once per run of points)."""
    z = [lim.zone(v) for v in values]
    found: list[Signal] = []
    for i in range(len(z)):
        for rule, window, need, bound in ((1, 1, 1, 3.0), (2, 3, 2, 2.0), (3, 5, 4, 1.0), (4, 8, 8, 0.0)):
            if i + 1 < window:
                continue
            part = z[i + 1 - window:i + 1]
            for side in (1, -1):
                hits = sum(1 for v in part if side * v > bound)
                if hits >= need and side * z[i] > bound:
                    if not any(s.rule == rule and s.index == i - 1 for s in found):
                        found.append(Signal(rule, i, RULES[rule]))
                    else:  # extend the run: move its marker rather than repeating it
                        found = [s for s in found if not (s.rule == rule and s.index == i - 1)]
                        found.append(Signal(rule, i, RULES[rule]))
                    break
    return found
