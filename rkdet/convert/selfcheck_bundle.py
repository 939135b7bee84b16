"""The self-check bundle `rkdet convert` leaves in each build folder (`selfcheck.json`).

Why: a serving app must know, before it takes traffic, that the board computes what the build
promised. The bundle carries just enough for `rkdet-selfcheck` (rkdet/onboard/selfcheck.py, on the board):
the model's sha256 and build fingerprint, a few golden inputs as fed, their expected outputs (hash
and data, for both references: the board's NPU runtime is judged against the simulator, onnxruntime
and the emulated runtime against onnx-fp32) and the decision summary per input; with a declared `decision:` section, the rule per output
(`decision_rules`), so the self-check says whether the app's decision changed. The format and its
encoding are defined once, in rkdet/onboard/bundle.py (the reader); this module only chooses and writes.

Size: inputs are taken in sorted order while the bundle stays within `cap_bytes` (default 8 MiB;
at least one input always): each input costs its compressed tensor plus both references' outputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rkdet import decode
from rkdet.onboard.backend_table import TABLE as BACKEND_TABLE
from rkdet.errors import ConversionError
from rkdet.onboard import bundle as bundle_format  # the format: its reader's bounds and codec
from rkdet.onboard.resultset import read_index
from rkdet.records.io import write_json_atomic
from rkdet.records.model_io import FILE as MODEL_IO
from rkdet.records.model_io import read_model_io
from rkdet.records.manifest import Manifest

DEFAULT_CAP_BYTES = 8 << 20


@dataclass(frozen=True)
class BundleInfo:
    """What was written: where, how big, which inputs of how many."""

    path: Path
    size: int
    inputs: list[str]
    golden_inputs: int
    references: list[str]


def _reference_outputs(result_set: Path) -> dict[str, list[tuple[str, np.ndarray]]]:
    """{input: [(output name, array)]} of a golden result set (one run per input)."""
    found: dict[str, list[tuple[str, np.ndarray]]] = {}
    for record in read_index(str(result_set)):
        found[record["input"]] = [(o["name"], np.load(result_set / "outputs" / f"{o['hash']}.npy", allow_pickle=False))
                                  for o in record["outputs"]]
    return found


def decision_summary(outputs: list[tuple[str, np.ndarray]], input_hw: tuple[int, int] | None = None,
                     declared: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the model decides for these outputs: detections (any family rkdet decodes; a segmentation's
    masks as their pixel counts, so the bundle stays small JSON), a classifier's top-1, the declared
    rules' decisions (config `decision:`), or nothing (the same decoder `rkdet diff` judges decisions with)."""
    arrays = dict(outputs)
    layout = decode.detect_layout([(n, tuple(a.shape)) for n, a in outputs], input_size=input_hw, declared=declared)
    task = decode.task_of(layout)  # its task says what the bundle records (rkdet/decode/tasks/)
    return {"kind": "none"} if task is None else task.bundle_summary(layout, arrays)


def declared_rules(outputs: list[tuple[str, np.ndarray]], declared: Mapping[str, Any]) -> dict[str, Any]:
    """The bundle's `decision_rules`: the declared rule per output, checked against these outputs (the
    layout's JSON), so rkdet-selfcheck can decide as the app does (rkdet/onboard/decisions.py)."""
    layout = decode.detect_layout([(n, tuple(a.shape)) for n, a in outputs], declared=declared)
    return {n: {k: v for k, v in r.items() if k not in ("top_k", "range")} for n, r in layout.to_json().get("rules", {}).items()}


def _entry(name: str, tensor: np.ndarray, refs: dict[str, dict[str, list[tuple[str, np.ndarray]]]],
           declared: Mapping[str, Any] | None = None) -> dict[str, Any]:
    hw = decode.input_hw(tuple(tensor.shape))
    return {"name": name, "tensor": bundle_format.encode_array(tensor),
            "expected": {ref: [dict(bundle_format.encode_array(a), name=out) for out, a in sets[name]] for ref, sets in refs.items()},
            "decisions": {ref: decision_summary(sets[name], hw, declared) for ref, sets in refs.items()}}


def write_bundle(build: Path, manifest: Manifest, cap_bytes: int = DEFAULT_CAP_BYTES) -> BundleInfo:
    """Write `build/selfcheck.json` from the build's golden data (atomically, the runner's writer)."""
    if not 0 < cap_bytes <= bundle_format.MAX_BUNDLE_BYTES:
        raise ConversionError(f"self-check bundle cap {cap_bytes} bytes: expected 1..{bundle_format.MAX_BUNDLE_BYTES}")
    refs = {ref: _reference_outputs(build / "golden" / ref) for ref in bundle_format.REFERENCES
            if (build / "golden" / ref / "index.jsonl").is_file()}
    pages = sorted((build / "golden" / "inputs").glob("*.npy"))
    config = manifest.inputs.config
    section = (config.resolved or {}).get("decision") if config is not None else None
    declared = section.get("outputs") if isinstance(section, dict) else None  # the app's rules, when declared
    io_spec = read_model_io(build / MODEL_IO).to_json()  # the one model.io.json reader
    fed = manifest.need_fed_input(build / "manifest.json").to_json()
    model_sha = {"model.rknn": manifest.rknn.sha256, "model.onnx": manifest.onnx_sha256}  # each backend's model file
    doc: dict[str, Any] = {
        "schema": bundle_format.BUNDLE_SCHEMA, "name": manifest.name, "platform": manifest.platform,
        "fingerprint": manifest.fingerprint,
        "models": {f.name: {"file": f.model_file, "sha256": model_sha[f.model_file]} for f in BACKEND_TABLE.values()},
        "fed_input": {k: fed[k] for k in ("layout", "dtype", "shape", "mean", "std")},
        "io": io_spec, "references": {ref: {"result_set": f"golden/{ref}",
                                            "judges": "rknnlite on an NPU" if ref == "simulator"
                                            else "onnxruntime, and the emulated rknnlite"} for ref in refs},
        "golden_inputs": len(pages), "cap_bytes": cap_bytes, "inputs": [],
    }
    size = len(json.dumps(doc, sort_keys=True, indent=2))
    chosen = []
    for page in pages[:bundle_format.MAX_INPUTS]:
        entry = _entry(page.stem, np.load(page, allow_pickle=False), refs, declared)
        text = json.dumps(entry, sort_keys=True, indent=2)
        cost = len(text) + 4 * (text.count("\n") + 1) + 2  # as written: one list level deeper, plus ",\n"
        if chosen and size + cost > cap_bytes:
            break
        doc["inputs"].append(entry)
        chosen.append(page.stem)
        size += cost
    if declared and doc["inputs"] and refs:
        first = sorted(refs)[0]
        doc["decision_rules"] = declared_rules(refs[first][doc["inputs"][0]["name"]], declared)
    path = build / bundle_format.BUNDLE_FILE
    write_json_atomic(str(path), doc)
    return BundleInfo(path, path.stat().st_size, chosen, len(pages), sorted(refs))
