"""Matplotlib figures for the HTML report, returned as PNG bytes (embedded as data: URIs, so the
report stays one offline file). Uses the object API with the Agg canvas: no pyplot global state.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, NullFormatter

from rkdet.decode import Detections
from rkdet.diff.metrics import HIST_EDGES
from rkdet.textsafe import plot_label


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, plot_label(text, None), ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def latency_plot(series: dict[str, list[tuple[int, float]]]) -> bytes:
    """Latency (ms) over runs, one line per set/input."""
    fig = Figure(figsize=(9, 3.2))
    ax = fig.add_subplot()
    drawn = False
    for label, points in series.items():
        if points:
            runs, ms = zip(*points)
            ax.plot(runs, ms, lw=0.8, marker="." if len(points) < 60 else None, label=plot_label(label))
            drawn = True
    if drawn:
        ax.set_xlabel("run")
        ax.set_ylabel("latency (ms)")
        ax.set_title("Inference latency over runs")
        ax.grid(alpha=0.3)
        if len(series) <= 12:
            ax.legend(fontsize=7, ncol=2)
    else:
        _empty(ax, "no latency recorded")
    return _png(fig)


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
