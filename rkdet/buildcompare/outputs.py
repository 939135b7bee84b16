"""The two builds' golden outputs on the same golden inputs: bitwise first, then rkdet diff's numeric
distances and decisions (`rkdet.diff.api.compare`, B's set as the reference), per reference kind.

Why per kind: the simulator outputs are what the NPU program computes (a toolkit upgrade changes them
only through the program); the FP32 outputs come from onnxruntime on the prepared ONNX, so they change
only when the graph preparation or the inputs did. An imported build has neither: "not applicable".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.diff.api import Comparison, compare
from rkdet.tolerance import Tolerance
from rkdet.errors import InputError
from rkdet.records.build import BuildRecord, load_build

KINDS = ("simulator", "onnx-fp32")


@dataclass(frozen=True)
class BuildFacts:
    """The manifest fields a comparison reads (checked here, one line on trouble)."""

    folder: Path
    origin: str
    toolkit: str | None
    golden_inputs: dict[str, str]  # name -> fed tensor hash
    golden_outputs: dict[str, Any]  # kind -> {input: {output: hash}}
    record: BuildRecord | None = None  # the build folder loaded once (rkdet.records.build), for the diff too

    @classmethod
    def load(cls, folder: Path) -> BuildFacts:
        path = folder / "manifest.json"
        if not os.path.lexists(path):
            raise InputError(f"{folder}: no manifest.json; give two build folders (rkdet convert or import-rknn)")
        try:
            record = load_build(folder, complete=False)  # the one load (bounded, strict): a build folder is input too
        except OSError as exc:
            raise InputError(f"{path}: unreadable manifest ({exc.strerror or exc}); re-run rkdet convert") from None
        doc = record.manifest
        inputs = {}
        for i, g in enumerate(doc.inputs.golden):
            if g.stem is None or g.tensor is None:
                raise InputError(f"{path}: inputs.golden[{i}]: expected a name (or file) and a tensor hash; "
                                 "re-run rkdet convert")
            inputs[g.stem] = g.tensor
        # converted (manifest 2): the model identity's toolkit; imported: its toolchain record
        return cls(folder, doc.origin, doc.toolkit_version, inputs, dict(doc.golden_outputs or {}), record)


@dataclass
class OutputsComparison:
    kind: str
    applicable: bool
    reason: str = ""
    bitwise_identical: bool | None = None
    comparison: Comparison | None = None  # A's set against B's (numeric distances, decisions)

    def line(self) -> str:
        if not self.applicable:
            return f"{self.kind} outputs: not applicable ({self.reason})"
        if self.bitwise_identical:
            return f"{self.kind} outputs: bit-identical on every golden input"
        c = self.comparison
        ag = c.agrees if c is not None else None
        if ag is None:
            return f"{self.kind} outputs: differ"
        decisions = ("decisions not judged (no decoder ran)" if ag.decisions_changed is None
                     else f"{ag.decisions_changed} decision(s) changed")
        return (f"{self.kind} outputs: DIFFER: {ag.outputs_differing} output(s) not bit-identical, max |a-b| "
                f"{ag.max_abs:.4g}, {decisions}")

    def to_json(self) -> dict[str, Any]:
        from rkdet.diff.report import to_json

        return {"kind": self.kind, "applicable": self.applicable, "reason": self.reason or None,
                "bitwise_identical": self.bitwise_identical, "line": self.line(),
                "diff": to_json(self.comparison) if self.comparison is not None else None}


def same_inputs(a: BuildFacts, b: BuildFacts) -> None:
    if a.golden_inputs != b.golden_inputs:
        only = sorted(set(a.golden_inputs) ^ set(b.golden_inputs))
        what = f"inputs only in one: {', '.join(only[:5])}" if only else "same names, different fed tensors"
        raise InputError(f"{a.folder} and {b.folder}: not the same golden inputs ({what}); compare builds made from "
                         "the same golden set")


def compare_outputs(a: BuildFacts, b: BuildFacts, decoder: str = "auto") -> list[OutputsComparison]:
    same_inputs(a, b)
    out = []
    for kind in KINDS:
        missing = [f.folder for f in (a, b) if not (f.folder / "golden" / kind / "run.json").is_file()]
        if missing:
            why = "an imported .rknn has no golden outputs" if any(f.origin == "imported" for f in (a, b)) \
                else f"no golden/{kind} in {', '.join(map(str, missing))}"
            out.append(OutputsComparison(kind, False, why))
            continue
        ha, hb = a.golden_outputs.get(kind), b.golden_outputs.get(kind)
        bitwise = ha is not None and ha == hb
        comp = compare(a.folder / "golden" / kind, b.folder / "golden" / kind, Tolerance(), decoder,
                       builds=[f.record for f in (a, b) if f.record is not None])
        if comp.agrees is not None and bitwise != (comp.agrees.outputs_differing == 0):
            raise InputError(f"{a.folder}, {b.folder}: the manifests' golden output hashes and the golden/{kind} "
                             "files disagree; a build folder was changed after it was made")
        out.append(OutputsComparison(kind, True, bitwise_identical=bitwise, comparison=comp))
    return out
