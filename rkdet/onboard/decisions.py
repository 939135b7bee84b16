"""THE per-position decision of a declared rule (config `decision:`), for the host and the board alike.

Why here, stdlib + numpy, Python 3.6: the host's declared task (rkdet/decode/tasks/declared.py: convert's
gate, `rkdet diff`) and the on-board self-check (rkdet/onboard/selfcheck.py) must decide the same way, so
the rule's decision is defined once, in the on-board program, and the host imports it. The self-check
bundle carries the rules (`decision_rules`: output -> {rule, axis, channel, threshold, top_k, boxes}); this
module checks them as untrusted input (`check_rules`) before they are used.

Rules: `argmax`/`pixel-argmax`: the index of the largest value along `axis` at every other position (the
first maximum: a tie goes to the lower index); `threshold`/`pixel-threshold`: `value[channel] > threshold`
along `axis`; `boxes`: a score head whose candidates are kept while their best score > threshold — on
the board judged per candidate (kept or not, and its best class), the host pairs the kept boxes by IoU.
"""

from typing import Any, Dict, List, Optional, Tuple

from .numpy_or_none import np

RULES = ("argmax", "threshold", "pixel-argmax", "pixel-threshold", "boxes")
MAX_AXIS = 8


def along(axis, array):
    # type: (int, Any) -> Any
    """The array as float64 with the rule's axis last."""
    return np.moveaxis(np.asarray(array, dtype=np.float64), axis, -1)


def decide(rule, axis, channel, threshold, array):
    # type: (str, int, Optional[int], Optional[float], Any) -> Any
    """The decision at every position: a label (argmax; the first maximum) or a bool (threshold)."""
    x = along(axis, array)
    if rule.endswith("threshold"):
        return x[..., channel] > threshold
    return np.argmax(x, axis=-1).astype(np.int64)


def decide_candidates(axis, threshold, scores):
    # type: (int, float, Any) -> Any
    """A box + score head per candidate: its best class where its best score > threshold, else -1."""
    x = along(axis, scores)
    x = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x.reshape(-1, 1)
    best = np.argmax(x, axis=1).astype(np.int64)
    return np.where(x[np.arange(x.shape[0]), best] > threshold, best, -1)


def _number(value, integer):
    # type: (Any, bool) -> bool
    kinds = (int,) if integer else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool)


def check_rules(rules, outputs, where):
    # type: (Any, List[str], str) -> Tuple[Optional[str], Dict[str, Dict[str, Any]]]
    """(None, the rules) when `rules` is a valid `decision_rules` object naming `outputs`, else (why, {})."""
    if rules is None:
        return None, {}
    if not isinstance(rules, dict) or len(rules) > len(outputs):
        return "%s: expected an object of at most %d rules keyed by output" % (where, len(outputs)), {}
    out = {}  # type: Dict[str, Dict[str, Any]]
    for name, r in rules.items():
        at = "%s.%s" % (where, name)
        if name not in outputs or not isinstance(r, dict) or r.get("rule") not in RULES:
            return "%s: expected a rule (%s) for one of the outputs" % (at, "|".join(RULES)), {}
        axis, channel, threshold, boxes = r.get("axis", 1), r.get("channel"), r.get("threshold"), r.get("boxes")
        if not _number(axis, True) or not -MAX_AXIS <= axis < MAX_AXIS:
            return "%s.axis: expected an integer in %d..%d" % (at, -MAX_AXIS, MAX_AXIS - 1), {}
        if r["rule"].endswith("threshold") and not (_number(channel, True) and channel >= 0 and _number(threshold, False)):
            return "%s: a threshold rule needs channel (>= 0) and threshold" % at, {}
        if r["rule"] == "boxes" and not (boxes in outputs and _number(threshold, False)):
            return "%s: a boxes rule needs boxes (an output) and threshold" % at, {}
        out[name] = {"rule": r["rule"], "axis": axis, "channel": channel,
                     "threshold": None if threshold is None else float(threshold), "boxes": boxes}
    return None, out


def decisions(rules, arrays):
    # type: (Dict[str, Dict[str, Any]], Dict[str, Any]) -> Dict[str, Any]
    """Every declared output's decision (a box + score head's per candidate) from its arrays; an output
    whose shape does not fit its rule raises ValueError (or IndexError) for the caller to report."""
    out = {}
    for name, r in sorted(rules.items()):
        x = arrays[name]
        if not -x.ndim <= r["axis"] < x.ndim:
            raise ValueError("output %s %s has no axis %d" % (name, list(x.shape), r["axis"]))
        if r["rule"] == "boxes":
            out[name] = decide_candidates(r["axis"], r["threshold"], x)
            continue
        if r["rule"].endswith("threshold") and r["channel"] >= x.shape[r["axis"]]:
            raise ValueError("output %s %s has no channel %d on axis %d" % (name, list(x.shape), r["channel"], r["axis"]))
        out[name] = decide(r["rule"], r["axis"], r["channel"], r["threshold"], x)
    return out


def changed_positions(expected, actual):
    # type: (Dict[str, Any], Dict[str, Any]) -> List[Tuple[str, int, int, Any, Any]]
    """(output, changed positions, positions, expected, got) of each output whose decision changed; the
    last two are the decision's values when it is a single one (else None)."""
    rows = []
    for name in sorted(expected):
        e, a = expected[name], actual[name]
        changed = int(e.size) if e.shape != a.shape else int((e != a).sum())
        if changed:
            single = e.size == 1 and a.size == 1
            rows.append((name, changed, int(e.size), e.reshape(-1)[0].item() if single else None,
                         a.reshape(-1)[0].item() if single else None))
    return rows
