"""Which layer a float16 request names: the layer itself, or for a layer the toolkit added, the nearest
ONNX layer it will honour (docs/SEARCH.md "Layers the toolkit added").

Why: rknn-toolkit2 lists layers it inserted (a reshape `…/BiasAdd:0-rs_sw`, a type conversion `x_int8`, a
transpose `x_tp`) in its per-layer analysis and in the hybrid quantization table, so asking float16 for
one is accepted — and ignored: on a VGG16 the search's hybrid variant for such a layer built a new
fingerprint with exactly the baseline's fidelity (issue 34). A request is therefore mapped before it is
built:
* a layer named after an ONNX tensor (`rkdet layers`' mapping says "exact") is requested as itself;
* a layer derived from an ONNX tensor by the toolkit's suffixes (mapping "derived") is requested as that
  tensor's layer, when the build has a measured layer by that name;
* otherwise (no ONNX counterpart, or its tensor is not a layer of the build) the nearest measured layer
  named after an ONNX tensor, by position in the toolkit's layer order (the one before it on a tie: the
  layer whose output the added one works on);
* none: no measured layer of the build is named after an ONNX tensor; the request is dropped with why.
"Honour" is rkdet's rule of thumb (a name the ONNX graph has); the search still measures each build and
reports a variant that changed nothing as "no effect" (rkdet/search/run.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rkdet.layers.report import Layer, onnx_label


@dataclass(frozen=True)
class Float16Request:
    """What a float16 request for one layer becomes."""

    layer: str  # the layer `rkdet layers` ranked (its rknn_name)
    requested: str | None  # the layer name the hybrid build asks float16 for (None: none it would honour)
    why: str  # one phrase: why this layer (or why none)

    @property
    def mapped(self) -> bool:
        return self.requested is not None and self.requested != self.layer

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _honoured(layer: Layer) -> bool:
    return layer.op != "Input" and layer.onnx.kind == "exact"


def request_for(target: Layer, layers: list[Layer]) -> Float16Request:
    """The float16 request for `target`, one of `layers` (the toolkit's measured layers, in its order)."""
    if _honoured(target):
        return Float16Request(target.rknn_name, target.rknn_name, "an ONNX layer")
    label = onnx_label(target)
    by_name = {x.rknn_name: x for x in layers}
    if target.onnx.kind == "derived" and target.onnx.tensor in by_name and _honoured(by_name[target.onnx.tensor]):
        return Float16Request(target.rknn_name, target.onnx.tensor,
                              f"added by the toolkit on ONNX tensor {target.onnx.tensor}: its layer instead")
    honoured = [x for x in layers if _honoured(x)]
    if not honoured:
        return Float16Request(target.rknn_name, None, f"{label}; no layer of this build is named after an ONNX "
                                                      "tensor, so no float16 request the toolkit would honour")
    position = {x.rknn_name: i for i, x in enumerate(layers)}
    here = position.get(target.rknn_name, target.index)
    nearest = min(honoured, key=lambda x: (abs(position[x.rknn_name] - here), position[x.rknn_name] > here))
    return Float16Request(target.rknn_name, nearest.rknn_name,
                          f"{label}: the nearest ONNX layer in the toolkit's order instead, {nearest.rknn_name} "
                          f"({onnx_label(nearest)})")


def requests(worst: list[Layer], layers: list[Layer]) -> list[Float16Request]:
    """The requests for the worst layers, in their order (a mapped layer may repeat an earlier request:
    the hybrid variants ask for each name once)."""
    return [request_for(x, layers) for x in worst]
