"""The table users ask for: each variant's accuracy, its delta against FP32, and MLPerf's quality lines.

MLPerf Inference accepts a quantized submission whose accuracy is at least 99 % of the FP32 reference
(99.9 % for its high-accuracy category); each row says whether it holds each line. The FP32 row is the
reference (ratio 1 by definition).
"""

from __future__ import annotations

from rkdet.accuracy.metrics import Score
from rkdet.records.accuracy import AccuracyRow

LINES = (0.99, 0.999)  # MLPerf Inference's quality targets, as fractions of the FP32 accuracy


def rows(scores: list[tuple[str, str, Score]]) -> list[AccuracyRow]:
    """(variant, detail, score), FP32 first -> the table's rows with delta and pass/fail per line."""
    reference = scores[0][2].value
    out = []
    for name, detail, score in scores:
        ratio = score.value / reference if reference > 0 else (1.0 if score.value == reference else 0.0)
        out.append(AccuracyRow(name, detail, score.metric, score.value, score.value - reference, ratio,
                               tuple((line, ratio >= line) for line in LINES), dict(score.others)))
    return out


def terminal_lines(table: list[AccuracyRow]) -> list[str]:
    """A plain-text table (the report console prints it)."""
    metric = table[0].metric
    others = list(table[0].others)
    head = [f"{'variant':<28}", f"{metric:>18}", f"{'delta vs FP32':>14}"] + [f"{k:>14}" for k in others] + \
        [f"{f'>= {100 * line:g}% FP32':>14}" for line in LINES]
    lines = ["".join(head)]
    for row in table:
        cells = [f"{row.variant[:27]:<28}", f"{100 * row.value:>17.2f}%", f"{100 * row.delta:>+13.2f}%"]
        cells += [f"{(100 * row.others[k]):>13.2f}%" if k in ("top-5", "mAP@0.5", "pixel accuracy")
                  else f"{row.others.get(k, 0):>14g}" for k in others]
        cells += [f"{'(reference)' if row.variant == table[0].variant else ('pass' if ok else 'FAIL'):>14}"
                  for _, ok in row.lines]
        lines.append("".join(cells))
    return lines
