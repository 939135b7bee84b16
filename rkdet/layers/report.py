"""Per-layer findings: aggregate the analysed inputs, locate the loss, write layers.json and the HTML.

Per layer the worst input counts (lowest cosine, highest relative L2 and max abs), so a loss that only
one golden input shows is not averaged away. The *first loss* is the first layer in graph order whose
entire cosine (accumulated error) is below `fidelity.min_layer_cosine`; the *worst single* layers are
the k with the lowest single cosine (that layer alone, fed float inputs): the layers that cause the loss,
not the ones that inherit it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from rkdet.layers.analysis import InputAnalysis, Metrics
from rkdet.textsafe import html_text as escape  # controls/bidi made visible, then HTML-escaped
from rkdet.layers.mapping import OnnxIndex, OnnxRef

SCHEMA = "rkdet.layers/1"


@dataclass(frozen=True)
class Layer:
    """One RKNN layer, its ONNX origin (and the ONNX nodes fused into it), its worst errors."""

    index: int
    op: str
    rknn_name: str
    onnx: OnnxRef
    fused: list[OnnxRef]
    entire: Metrics
    single: Metrics
    worst_input: str


@dataclass
class LayersReport:
    source: str
    toolkit: str
    fingerprint: str
    build_fingerprint: str | None
    min_layer_cosine: float
    inputs: list[str]
    layers: list[Layer]
    first_loss: Layer | None
    worst_single: list[Layer]
    timings: dict[str, float] = field(default_factory=dict)
    output_cosine: dict[str, float] = field(default_factory=dict)  # golden input -> lowest output cosine

    @property
    def fingerprint_match(self) -> bool | None:
        return None if self.build_fingerprint is None else self.fingerprint == self.build_fingerprint

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "source": self.source, "toolkit": self.toolkit,
                "fingerprint": self.fingerprint, "build_fingerprint": self.build_fingerprint,
                "fingerprint_match": self.fingerprint_match, "min_layer_cosine": self.min_layer_cosine,
                "inputs": self.inputs, "verdict": "loss" if self.first_loss else "within",
                "first_loss": self.first_loss.index if self.first_loss else None,
                "worst_single": [x.index for x in self.worst_single],
                "layers": [asdict(x) for x in self.layers], "timings": self.timings,
                "output_cosine": self.output_cosine}


def _worst(values: list[Metrics]) -> Metrics:
    def pick(attr: str, lowest: bool) -> float | None:
        xs = [getattr(v, attr) for v in values if getattr(v, attr) is not None]
        return (min(xs) if lowest else max(xs)) if xs else None

    return Metrics(pick("cosine", True), pick("rel_l2", False), pick("max_abs", False))


def build_report(analyses: list[InputAnalysis], onnx_bytes: bytes, min_layer_cosine: float, top: int, *,
                 source: str, toolkit: str, fingerprint: str, build_fingerprint: str | None,
                 timings: dict[str, float], output_cosine: dict[str, float] | None = None) -> LayersReport:
    """Join the inputs' tables (same layers, same order) and the ONNX mapping into one report."""
    index = OnnxIndex(onnx_bytes)
    first = analyses[0].rows
    refs = [index.lookup(row.name) for row in first]
    measured_at: dict[str, int] = {}  # ONNX node -> its first measured layer (cls0_int8 before its exDataConvert cls0)
    for pos, (row, ref) in enumerate(zip(first, refs)):
        if row.entire is not None and ref.node:
            measured_at.setdefault(ref.node, pos)
    fused_into: dict[int, list[OnnxRef]] = {}
    for row, ref in zip(first, refs):
        if row.entire is None and ref.tensor:  # fused: attach to the measured layer that reads its output
            target = next((measured_at[n] for n in index.downstream(ref.tensor) if n in measured_at), None)
            if target is not None:
                fused_into.setdefault(target, []).append(ref)
    layers: list[Layer] = []
    for pos, row in enumerate(first):
        if row.entire is None:
            continue
        per_input = [(a.name, a.rows[pos]) for a in analyses if pos < len(a.rows) and a.rows[pos].name == row.name]
        entire = _worst([r.entire for _, r in per_input if r.entire])
        single = _worst([r.single for _, r in per_input if r.single])
        worst_input = min(per_input, key=lambda p: p[1].entire.cosine if p[1].entire and p[1].entire.cosine
                          is not None else 2.0)[0]
        layers.append(Layer(len(layers), row.op, row.name, refs[pos], fused_into.get(pos, []), entire, single,
                            worst_input))
    measured = [x for x in layers if x.op != "Input"]
    first_loss = next((x for x in measured if x.entire.cosine is not None and x.entire.cosine < min_layer_cosine), None)
    ranked = sorted((x for x in measured if x.single.cosine is not None), key=lambda x: (x.single.cosine, x.index))
    return LayersReport(source, toolkit, fingerprint, build_fingerprint, min_layer_cosine,
                        [a.name for a in analyses], layers, first_loss, ranked[:top], timings,
                        dict(output_cosine or {}))


def onnx_label(layer: Layer) -> str:
    """`node (OpType)` for the layer and its fused members, or why there is no ONNX counterpart."""
    parts = [f"{r.node} ({r.op_type})" for r in [*layer.fused, layer.onnx] if r.node]
    if not parts:
        return "graph input" if layer.onnx.kind == "input" else "no ONNX counterpart (added by the toolkit)"
    return " + ".join(dict.fromkeys(parts))


def to_json(report: LayersReport) -> str:
    return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"


def cosine_plot(report: LayersReport) -> bytes:
    """Entire and single cosine along the graph, the threshold, the culprits marked."""
    from matplotlib.figure import Figure

    from rkdet.diff.plots import _png

    fig = Figure(figsize=(11, 3.6))
    ax = fig.add_subplot()
    xs = [x.index for x in report.layers]
    ax.plot(xs, [x.entire.cosine for x in report.layers], lw=1.4, color="#1f5fa8", label="entire (accumulated)")
    ax.plot(xs, [x.single.cosine for x in report.layers], lw=1.0, color="#8a8a8a", ls="--", label="single (alone)")
    ax.axhline(report.min_layer_cosine, color="#c62828", lw=0.8, ls=":", label="fidelity.min_layer_cosine")
    for x in report.worst_single:
        ax.plot([x.index], [x.single.cosine], "o", color="#e08a00", ms=6)
    if report.worst_single:
        ax.plot([], [], "o", color="#e08a00", label="worst single")
    if report.first_loss:
        ax.axvline(report.first_loss.index, color="#c62828", lw=1.2)
        ax.plot([report.first_loss.index], [report.first_loss.entire.cosine], "v", color="#c62828", ms=8,
                label=f"first loss: layer {report.first_loss.index}")
    ax.set_xlabel("RKNN layer (graph order)")
    ax.set_ylabel("cosine vs float")
    ax.legend(loc="lower left", fontsize=8)
    return _png(fig)


def _n(x: float | None, spec: str) -> str:
    return "–" if x is None else escape(format(x, spec))


def _row(x: Layer, marks: str) -> str:
    e, s = x.entire, x.single
    return (f"<tr><td class='num'>{x.index}</td><td>{marks}</td><td>{escape(x.op)}</td><td><code>{escape(x.rknn_name)}"
            f"</code></td><td>{escape(onnx_label(x))}</td><td class='num'>{_n(e.cosine, '.5f')}</td>"
            f"<td class='num'>{_n(e.rel_l2, '.3g')}</td><td class='num'>{_n(e.max_abs, '.3g')}</td>"
            f"<td class='num'>{_n(s.cosine, '.5f')}</td><td class='num'>{_n(s.rel_l2, '.3g')}</td>"
            f"<td>{escape(x.worst_input)}</td></tr>")


def render_html(report: LayersReport) -> str:
    from rkdet.diff.html import _CSS, _img

    worst = {x.index for x in report.worst_single}
    loss = report.first_loss
    if loss:
        verdict = (f"<div class='verdict different'>loss located: layer {loss.index} {escape(loss.rknn_name)} — "
                   f"{escape(onnx_label(loss))}: entire cosine {_n(loss.entire.cosine, '.5f')} &lt; "
                   f"{report.min_layer_cosine}</div>")
    else:
        verdict = (f"<div class='verdict same'>every layer within fidelity.min_layer_cosine "
                   f"{report.min_layer_cosine}</div>")
    match = report.fingerprint_match
    fp = ("rebuilt from a config (no build to compare)" if match is None else
          "rebuilt fingerprint equals the build's" if match else
          "<span class='bad'>rebuilt fingerprint DIFFERS from the build's</span>")
    head = ("<tr><th>#</th><th></th><th>op</th><th>RKNN layer</th><th>ONNX node(s)</th><th>entire cos</th>"
            "<th>entire rel L2</th><th>entire max abs</th><th>single cos</th><th>single rel L2</th>"
            "<th>worst input</th></tr>")
    rows = []
    for x in report.layers:
        marks = ("<span class='bad'>first loss</span> " if loss is not None and x.index == loss.index else "") + \
                ("<span class='bad'>worst single</span>" if x.index in worst else "")
        rows.append(_row(x, marks))
    culprits = "".join(_row(x, "") for x in report.worst_single)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>rkdet layers</title><style>{_CSS}</style>"
            f"</head><body><h1>rkdet layers: {escape(report.source)}</h1>{verdict}"
            f"<p>{escape(report.toolkit)} simulator vs float, {len(report.inputs)} input(s): "
            f"{escape(', '.join(report.inputs))}. Build {escape(report.fingerprint[:16])}: {fp}.</p>"
            f"{_img(cosine_plot(report), 'cosine along the graph')}"
            f"<h2>Worst layers by single error (the cause, not the inherited loss)</h2><table>{head}{culprits}</table>"
            f"<h2>All layers</h2><table>{head}{''.join(rows)}</table></body></html>\n")


# -- board bisection (`rkdet layers BUILD --board H`, run by rkdet/bisection/): same schema family, mode "board" --


@dataclass(frozen=True)
class BisectStep:
    """One model run on the board: where it ends, whether the board departed there, what it cost."""

    position: int
    node: str
    op: str
    frontier: list[str]
    departs: bool
    model: str  # "the build's own model" | "cut (built)" | "cut (cached)"
    build_s: float
    board_s: float
    worst_tensor: str | None
    cosine: float | None
    max_abs: float | None
    why: str
    quant_changed: int  # tensors whose cut step-1 parameters differed from the full build's (then replaced)


@dataclass
class BisectionReport:
    source: str
    board: str
    against: str
    fingerprint: str
    toolkit: str
    tolerance: str
    layers: int
    bound: int
    first_departing: dict | None  # {position, node, op, tensors}
    last_agreeing: dict | None
    op_between: str | None
    steps: list[BisectStep]
    board_runs: int
    cut_builds: int
    cut_cache_hits: int
    timings: dict[str, float] = field(default_factory=dict)
    pinned: bool = False  # every run through run-pinned.sh (pin, run, restore)
    warnings: list[str] = field(default_factory=list)  # what the board runs' pulls survived (rkdet.deploy.pulled)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "mode": "board", "pinned": self.pinned, "source": self.source, "board": self.board, "against": self.against,
                "fingerprint": self.fingerprint, "toolkit": self.toolkit, "tolerance": self.tolerance,
                "verdict": "departs" if self.first_departing else "no departure", "layers": self.layers,
                "cut_build_bound": self.bound, "first_departing": self.first_departing,
                "last_agreeing": self.last_agreeing, "op_between": self.op_between,
                "steps": [asdict(s) for s in self.steps], "board_runs": self.board_runs,
                "cut_builds": self.cut_builds, "cut_cache_hits": self.cut_cache_hits, "timings": self.timings,
                "warnings": list(self.warnings)}


def bisection_json(report: BisectionReport) -> str:
    return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"


def render_bisection_html(report: BisectionReport) -> str:
    from rkdet.diff.html import _CSS

    first = report.first_departing
    if first:
        last = report.last_agreeing or {}
        verdict = (f"<div class='verdict different'>the board departs first at {escape(', '.join(first['tensors']))} "
                   f"(op {escape(report.op_between or '')}); last agreeing: {escape(', '.join(last.get('tensors') or []))}"
                   f"</div>")
    else:
        verdict = f"<div class='verdict same'>no departure from {escape(report.against)} at any of {report.layers} cut points</div>"
    head = ("<tr><th>position</th><th>node</th><th>op</th><th>model</th><th>board</th><th>worst tensor</th>"
            "<th>cosine</th><th>max abs</th><th>why</th></tr>")
    rows = "".join(
        f"<tr><td class='num'>{s.position}</td><td><code>{escape(s.node)}</code></td><td>{escape(s.op)}</td>"
        f"<td>{escape(s.model)}</td><td>{'<span class=bad>departs</span>' if s.departs else 'agrees'}</td>"
        f"<td><code>{escape(s.worst_tensor or '–')}</code></td><td class='num'>{_n(s.cosine, '.6f')}</td>"
        f"<td class='num'>{_n(s.max_abs, '.3g')}</td><td>{escape(s.why)}</td></tr>" for s in report.steps)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>rkdet layers --board</title><style>{_CSS}</style>"
            f"</head><body><h1>rkdet layers --board: {escape(report.source)} on {escape(report.board)}</h1>{verdict}"
            f"<p>Against {escape(report.against)} ({escape(report.tolerance)}); build {escape(report.fingerprint[:16])}; "
            f"{report.board_runs} board run(s), {report.cut_builds} cut build(s), {report.cut_cache_hits} from the cache "
            f"(bound {report.bound} for {report.layers} cut points).</p>"
            f"<h2>Bisection steps (graph order)</h2><table>{head}{rows}</table></body></html>\n")
