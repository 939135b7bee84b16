"""Canary and shadow: the two comparisons the audited runtime makes while it serves (docs/AUDIT.md).

Canary: the build's golden inputs, run again every N inferences or T seconds, must give bitwise the
outputs of the baseline (the first canary run after start, or the outputs deploy recorded); the first
differing element is named. Shadow: a sampled share of live inputs also runs on a candidate build; the
served decision (argmax per output, or the app's own `decide`) is compared and the absolute error per
output is accumulated into P50/P99/max for each reporting period. The candidate's answer is never
returned to the app.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence

from .hashing import output_hash
from .numpy_or_none import np

MAX_SAMPLES_PER_PERIOD = 20000  # abs errors kept per output and period: a bound on memory


def first_difference(expected, got):
    # type: (Any, Any) -> Dict[str, Any]
    """Where two outputs first differ: flat index and both values, or the dtype/shape that differs."""
    a, b = np.asarray(expected), np.asarray(got)
    if a.dtype != b.dtype or a.shape != b.shape:
        return {"expected": "%s%s" % (a.dtype.str, list(a.shape)), "got": "%s%s" % (b.dtype.str, list(b.shape))}
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    neq = np.flatnonzero(_differs(flat_a, flat_b))  # bitwise: NaN payloads and -0.0 count
    index = int(neq[0]) if len(neq) else 0
    return {"index": index, "expected": _scalar(flat_a[index]), "got": _scalar(flat_b[index])}


def _differs(a, b):
    # type: (Any, Any) -> Any
    width = a.dtype.itemsize
    ua = np.frombuffer(a.tobytes(), dtype=np.uint8).reshape(-1, width)
    ub = np.frombuffer(b.tobytes(), dtype=np.uint8).reshape(-1, width)
    return (ua != ub).any(axis=1)


def _scalar(value):
    # type: (Any) -> Any
    v = value.item()
    if isinstance(v, float) and v != v:
        return "nan"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return str(v)
    return v


class Canary(object):
    """The golden inputs and their baseline outputs (arrays: the first differing element is nameable)."""

    def __init__(self, inputs, every_n=1000, every_s=0.0, baseline=None):
        # type: (Sequence[Sequence[Any]], int, float, Optional[Sequence[Sequence[Any]]]) -> None
        self.inputs = [list(x) for x in inputs]
        self.every_n, self.every_s = int(every_n), float(every_s)
        self.baseline = [list(o) for o in baseline] if baseline is not None else None
        self.baseline_from = "given" if baseline is not None else "first-run"

    def due(self, since_n, since_s):
        # type: (int, float) -> bool
        return bool(self.inputs) and ((self.every_n > 0 and since_n >= self.every_n)
                                      or (self.every_s > 0 and since_s >= self.every_s))

    def check(self, run):
        # type: (Callable[[List[Any]], List[Any]]) -> Dict[str, Any]
        """Run every golden input; the record's fields (ok, hashes, the first difference)."""
        results = [[np.asarray(o) for o in run(x)] for x in self.inputs]
        fields = {"golden": len(results), "outputs": [[output_hash(o) for o in outs] for outs in results]}
        if self.baseline is None:
            self.baseline = results
            fields.update(ok=True, baseline=True)
            return fields
        fields["ok"] = True
        for g, (want, got) in enumerate(zip(self.baseline, results)):
            for k, (a, b) in enumerate(zip(want, got)):
                if output_hash(a) != output_hash(b):
                    diff = dict(first_difference(a, b), golden=g, output=k)
                    fields.update(ok=False, first_difference=diff)
                    return fields
        return fields


def _decision(outputs):
    # type: (Sequence[Any]) -> List[int]
    return [int(np.argmax(np.asarray(o))) for o in outputs]


class Shadow(object):
    """A candidate runtime fed every `sample_every`-th live input; statistics per reporting period."""

    def __init__(self, candidate, sample_every=10, report_every=1000, decide=None, build=""):
        # type: (Any, int, int, Optional[Callable[[Sequence[Any]], Any]], str) -> None
        self.candidate = candidate
        self.sample_every = max(1, int(sample_every))
        self.report_every = max(1, int(report_every))
        self.decide = decide or _decision
        self.build = build
        self._reset()

    def _reset(self):
        # type: () -> None
        self.samples, self.disagreements = 0, 0
        self.errors = {}  # type: Dict[int, List[Any]]

    def wants(self, count):
        # type: (int) -> bool
        return count % self.sample_every == 0

    def compare(self, inputs, served):
        # type: (List[Any], Sequence[Any]) -> Optional[Dict[str, Any]]
        """Run the candidate on `inputs`; a disagreement record's fields, or None when it agrees."""
        shadow = [np.asarray(o) for o in self.candidate.inference(inputs=inputs)]
        self.samples += 1
        for k, (a, b) in enumerate(zip(served, shadow)):
            if np.asarray(a).shape == b.shape:
                err = np.abs(np.asarray(a, dtype=np.float64) - b.astype(np.float64)).reshape(-1)
                kept = self.errors.setdefault(k, [])
                if sum(len(e) for e in kept) < MAX_SAMPLES_PER_PERIOD:
                    kept.append(err[:MAX_SAMPLES_PER_PERIOD])
        want, got = self.decide(served), self.decide(shadow)
        if want == got:
            return None
        self.disagreements += 1
        return {"served_decision": want, "shadow_decision": got,
                "outputs": [output_hash(o) for o in shadow]}

    def period_due(self):
        # type: () -> bool
        return self.samples >= self.report_every

    def summary(self):
        # type: () -> Dict[str, Any]
        """This period's statistics (then a new period starts)."""
        per_output = []
        for k in sorted(self.errors):
            err = np.concatenate(self.errors[k]) if self.errors[k] else np.zeros(1)
            per_output.append({"output": k, "p50": float(np.percentile(err, 50)),
                               "p99": float(np.percentile(err, 99)), "max": float(err.max())})
        fields = {"samples": self.samples, "disagreements": self.disagreements,
                  "agreement": (1.0 - self.disagreements / float(self.samples)) if self.samples else 1.0,
                  "errors": per_output, "candidate": self.build}
        self._reset()
        return fields
