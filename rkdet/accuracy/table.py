"""The table users ask for: each variant's accuracy, its delta against FP32, and MLPerf's quality lines.

MLPerf Inference accepts a quantized submission whose accuracy is at least 99 % of the FP32 reference
(99.9 % for its high-accuracy category); each row says whether it holds each line. The FP32 row is the
reference (ratio 1 by definition).
"""

from __future__ import annotations

from rkdet.accuracy.metrics import Score
from rkdet.records.accuracy import LINES, AccuracyRow  # LINES: MLPerf's quality targets, fractions of FP32's


def rows(scores: list[tuple[str, str, Score]]) -> list[AccuracyRow]:
    """(variant, detail, score), FP32 first -> the table's rows with delta and pass/fail per line."""
    reference = scores[0][2].value
    out = []
    for name, detail, score in scores:
        ratio = score.value / reference if reference > 0 else (1.0 if score.value == reference else 0.0)
        out.append(AccuracyRow(name, detail, score.metric, score.value, score.value - reference, ratio,
                               tuple((line, ratio >= line) for line in LINES), dict(score.others)))
    return out


# the side metrics shown as percentages (the rest are counts)
PERCENT = ("top-5", "mAP@0.5", "pixel accuracy", "mask mAP@0.5", "box mAP@0.5:0.95")


def terminal_lines(table: list[AccuracyRow]) -> list[str]:
    """A plain-text table (the report console prints it): one column per metric, then each MLPerf line."""
    others = list(table[0].others)
    lines_head = [f">= {100 * line:g}% FP32" for line in LINES]
    heads = [table[0].metric, "delta vs FP32", *others, *lines_head]
    widths = [max(12, len(h) + 2) for h in heads]
    name_w = max(10, *(len(r.variant) for r in table)) + 2
    out = ["variant".ljust(name_w) + "".join(h.rjust(w) for h, w in zip(heads, widths))]
    for row in table:
        cells = [f"{100 * row.value:.2f}%", f"{100 * row.delta:+.2f}%"]
        cells += [f"{100 * row.others.get(k, 0):.2f}%" if k in PERCENT else f"{row.others.get(k, 0):g}" for k in others]
        cells += ["(reference)" if row is table[0] else ("pass" if ok else "FAIL") for _, ok in row.lines]
        out.append(row.variant.ljust(name_w) + "".join(c.rjust(w) for c, w in zip(cells, widths)))
    return out
