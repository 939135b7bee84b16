"""Matplotlib figures for the HTML report, returned as PNG bytes (embedded as data: URIs, so the
report stays one offline file). Uses the object API with the Agg canvas: no pyplot global state.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, NullFormatter

from rkdet.decode import Detections
from rkdet.diff.metrics import HIST_EDGES
from rkdet.textsafe import plot_label

#: inputs drawn as boxes beside the per-run plot (more would not be readable; the table lists every input)
MAX_LATENCY_BOXES = 24


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, plot_label(text, None), ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


@dataclass(frozen=True)
class RunLatency:
    """One run of one set: its inputs' latencies as a distribution (ms)."""

    run: int
    inputs: int
    low: float
    q1: float
    median: float
    q3: float
    high: float


def latency_per_run(points: list[tuple[int, float]]) -> list[RunLatency]:
    """Per run (in run order): the median, quartiles and min/max of that run's latencies over its inputs.
    Why: one line per input over runs drew eight crossing lines for the demo; a drift moves the median, an
    outlier input pulls the max away from the band."""
    by_run: dict[int, list[float]] = {}
    for run, ms in points:
        by_run.setdefault(int(run), []).append(float(ms))
    out = []
    for run in sorted(by_run):
        v = np.asarray(by_run[run])
        q1, median, q3 = (float(x) for x in np.percentile(v, [25, 50, 75]))
        out.append(RunLatency(run, len(v), float(v.min()), q1, median, q3, float(v.max())))
    return out


def latency_figure(sets: dict[str, dict[str, list[tuple[int, float]]]]) -> Figure:
    """Left: per set, the median latency of each run (line) with its inputs' interquartile range (dark
    band) and min-max (light band). Right: one box per set and input over its runs (whiskers min-max),
    so an input that is slow, or slow in some runs, stands out. `sets`: {set label: {input: [(run, ms)]}}."""
    fig = Figure(figsize=(11, 3.4))
    over_runs, per_input = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    boxes: list[tuple[str, list[float]]] = []
    for k, (label, inputs) in enumerate(sets.items()):
        stats = latency_per_run([p for pts in inputs.values() for p in pts])
        if not stats:
            continue
        colour = f"C{k % 10}"
        runs = [s.run for s in stats]
        over_runs.fill_between(runs, [s.low for s in stats], [s.high for s in stats], color=colour, alpha=0.15,
                               step="mid", lw=0, label=f"{plot_label(label)} min-max")
        over_runs.fill_between(runs, [s.q1 for s in stats], [s.q3 for s in stats], color=colour, alpha=0.35,
                               step="mid", lw=0, label=f"{plot_label(label)} IQR")
        over_runs.plot(runs, [s.median for s in stats], color=colour, lw=1.2, marker="." if len(stats) < 60 else None,
                       drawstyle="steps-mid", label=f"{plot_label(label)} median")
        boxes += [(f"{label} {name}", [ms for _, ms in pts]) for name, pts in inputs.items() if pts]
    if not boxes:
        _empty(over_runs, "no latency recorded")
        per_input.set_axis_off()
        return fig
    over_runs.set_xlabel("run")
    over_runs.set_ylabel("latency (ms)")
    over_runs.set_title("Latency per run over the inputs: median, IQR, min-max")
    over_runs.grid(alpha=0.3)
    over_runs.legend(fontsize=7, ncol=2)
    shown = boxes[:MAX_LATENCY_BOXES]
    per_input.boxplot([ms for _, ms in shown], whis=(0, 100), vert=False, widths=0.6)
    per_input.set_yticks(range(1, len(shown) + 1))
    per_input.set_yticklabels([plot_label(name, 40) for name, _ in shown], fontsize=7)
    per_input.invert_yaxis()
    per_input.set_xlabel("latency (ms)")
    more = f" (first {len(shown)} of {len(boxes)})" if len(boxes) > len(shown) else ""
    per_input.set_title(f"Per input over runs{more}")
    per_input.grid(alpha=0.3, axis="x")
    return fig


def latency_plot(sets: dict[str, dict[str, list[tuple[int, float]]]]) -> bytes:
    """`latency_figure` as PNG bytes."""
    return _png(latency_figure(sets))


def board_plot(snapshots: list[dict[str, Any]], n_runs: int) -> bytes:
    """Temperatures (°C, left axis) and NPU frequency (MHz, right axis) over runs from snapshots.jsonl."""
    fig = Figure(figsize=(9, 3.2))
    ax = fig.add_subplot()
    xs: list[int] = []
    temps: dict[str, list[float]] = {}
    npu: dict[str, list[float]] = {}
    for i, snap in enumerate(snapshots):
        at, run = snap.get("at"), snap.get("run")
        x = 0 if at == "before" else (run + 1 if isinstance(run, int) and at == "periodic" else n_runs)
        xs.append(x)
        for zone, mc in (snap.get("thermal") or {}).items():
            temps.setdefault(zone, [np.nan] * len(snapshots))[i] = float(mc) / 1000 if isinstance(mc, (int, float)) else np.nan
        for node, info in (snap.get("devfreq") or {}).items():
            if "npu" in node and isinstance(info, dict) and isinstance(info.get("cur_hz"), (int, float)):
                npu.setdefault(node, [np.nan] * len(snapshots))[i] = info["cur_hz"] / 1e6
    if not xs:
        _empty(ax, "no board snapshots")
        return _png(fig)
    for zone, ys in temps.items():
        ax.plot(xs, ys, marker="o", ms=3, lw=1, label=f"{plot_label(zone)} (°C)")
    ax.set_xlabel("run")
    ax.set_ylabel("temperature (°C)")
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    for node, ys in npu.items():
        ax2.step(xs, ys, where="post", color="#c0392b", lw=1.5, label=f"{plot_label(node)} (MHz)")
    ax2.set_ylabel("NPU frequency (MHz)")
    handles = ax.get_legend_handles_labels()
    handles2 = ax2.get_legend_handles_labels()
    ax.legend(handles[0] + handles2[0], handles[1] + handles2[1], fontsize=7, loc="lower right")
    ax.set_title("Board temperature and NPU frequency over runs")
    return _png(fig)


def histogram_plot(counts: list[int]) -> bytes:
    """Absolute differences of differing elements, per decade bin."""
    fig = Figure(figsize=(9, 3.0))
    ax = fig.add_subplot()
    labels = [f"<1e{int(np.log10(HIST_EDGES[0]))}"] + [f"1e{int(np.log10(e))}" for e in HIST_EDGES]
    if sum(counts) == 0:
        _empty(ax, "no differing elements: every compared output is bit-identical")
        return _png(fig)
    ax.bar(range(len(counts)), counts, color="#2c7fb8")
    ax.set_xticks(range(len(counts)))
    ax.set_xticklabels(labels, rotation=45, fontsize=7)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # plain text, no mathtext
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("|difference| >= (decade)")
    ax.set_ylabel("differing elements")
    ax.set_title("Histogram of absolute differences (once per distinct output)")
    return _png(fig)


def _as_rgb(image: np.ndarray | None) -> np.ndarray | None:
    """An input tensor as H x W x 3 uint8 (NHWC uint8 or NCHW float 0..1 accepted)."""
    if image is None:
        return None
    img = np.asarray(image)
    while img.ndim > 3 and img.shape[0] == 1:
        img = img[0]
    if img.ndim != 3:
        return None
    if img.shape[0] in (1, 3) and img.shape[-1] not in (1, 3):
        img = img.transpose(1, 2, 0)
    if img.shape[-1] == 1:
        img = np.repeat(img, 3, axis=-1)
    if img.dtype.kind == "f":
        img = np.clip(img * (255.0 if img.max() <= 1.0 else 1.0), 0, 255)
    return img.astype(np.uint8)


def detection_plot(image: np.ndarray | None, reference: Detections, candidate: Detections | None,
                   size: tuple[int, int] | None, ref_label: str, cand_label: str) -> bytes:
    """The input image with reference boxes (green, solid) and candidate boxes (red, dashed)."""
    rgb = _as_rgb(image)
    fig = Figure(figsize=(9.5, 9.5))
    ax = fig.add_subplot()
    if rgb is not None:
        ax.imshow(rgb)
    else:
        h, w = size or (640, 640)
        ax.imshow(np.full((h, w, 3), 235, dtype=np.uint8))
        ax.text(w / 2, h / 2, "input image not kept in this result set", ha="center", color="#666")
    for dets, colour, style, label in ((reference, "#1a9850", "-", ref_label), (candidate, "#d73027", "--", cand_label)):
        if dets is None:
            continue
        for i, (box, score, cls) in enumerate(zip(dets.boxes, dets.scores, dets.classes)):
            x1, y1, x2, y2 = box
            ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, ec=colour, ls=style, lw=1.6,
                                   label=plot_label(label) if i == 0 else None))
            ax.text(x1, y1 - 2, f"{int(cls)}:{score:.2f}", color=colour, fontsize=6, va="bottom")
    ax.set_axis_off()
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Detections: reference (green) vs candidate (red, dashed)")
    return _png(fig)
