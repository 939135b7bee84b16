"""What the board side reads of a build: a typed, read-only view of `manifest.json` (`BuildInfo`).

Why its own record: deploy, preflight and a fleet or bisection scheduler need a handful of a
manifest's fields (fingerprint, platform, the fed input, the `.rknn` header's versions, output
shapes); reading them here, once, names a malformed manifest in one line (exit 2) instead of a
KeyError deep in a board run, and keeps convert's manifest format a single reader's concern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.records.gates import GateRecord, from_manifest
from rkdet.errors import InputError
from rkdet.records.io import identifier, read_json_object

REQUIRED_FILES = ("model.rknn", "model.io.json", "golden/inputs")


@dataclass(frozen=True)
class FedInput:
    """The input as the model is fed (`manifest.fed_input`): layout and normalization."""

    layout: str | None
    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclass(frozen=True)
class BuildInfo:
    """The manifest fields the board side uses, checked once at load."""

    folder: Path
    fingerprint: str
    platform: str
    fed_input: FedInput | None
    toolkit_version: str | None  # of the toolkit that built the .rknn (its header)
    format_version: int  # the .rknn format (0 when the header does not say)
    output_shapes: tuple[tuple[int, ...], ...]  # of the prepared ONNX graph
    golden_inputs: int  # how many golden inputs the manifest lists
    embedded_fingerprint: str | None = None  # what the .rknn carries (rkdet-fp=…): rkdet-run --expect-fingerprint
    rknn_sha256: str | None = None  # the .rknn file's: rkdet-run --expect-sha256 (a model without a fingerprint)
    onnx_sha256: str | None = None  # the prepared model.onnx's (--backend onnxruntime)
    origin: str = "converted"  # "imported": `rkdet import-rknn` (no ONNX, no golden references)
    no_reference: str | None = None  # why the agrees verdict is not applicable (imported builds), else None
    emulator_onnx: Path | None = None  # imported: the TEST CONTROL stand-in the emulated runtime double computes
    gates: GateRecord = GateRecord(True)  # convert's gate verdict (manifest `gates`): a failed build is refused

    def refuse_failed(self, what: str, allowed: bool) -> str | None:
        """Refuse (exit 2, one line naming the build and its failing gate) a build that failed a gate at
        convert, unless `allowed` (--allow-failed-build); then the caveat every verdict line carries."""
        if self.gates.passed:
            return None
        if not allowed:
            raise InputError(self.gates.refusal(self.folder, what))
        return self.gates.caveat(self.folder)

    @property
    def short(self) -> str:
        """The fingerprint's first 16 hex digits (run folder and remote model names)."""
        return self.fingerprint[:16]

    def need_fed_input(self) -> FedInput:
        if self.fed_input is None:
            raise InputError(f"{self.folder}: manifest.json has no fed_input; re-run rkdet convert")
        return self.fed_input

    @staticmethod
    def check(build: Path) -> dict[str, Any]:
        """The build folder's manifest (parsed) when the folder holds what a board run needs; one line
        naming the folder otherwise. Fields are read by `load` (so a command can check its other
        inputs, e.g. the build's config, between the two)."""
        build = Path(build)
        manifest = build / "manifest.json"
        try:
            doc = read_json_object(manifest)  # bounded: a FIFO, /dev/zero or 100k brackets are one line
        except FileNotFoundError:
            raise InputError(f"{build}: no manifest.json; run `rkdet convert` first or pass --build with a build "
                             "folder") from None
        except InputError as exc:
            raise InputError(f"{exc}; re-run rkdet convert") from None
        for name in REQUIRED_FILES:
            if not (build / name).exists():
                raise InputError(f"{build}: {name} missing; the build folder is incomplete, re-run rkdet convert")
        return doc

    @classmethod
    def load(cls, build: Path) -> BuildInfo:
        """`check` the folder, then read the manifest's fields (a malformed one: one line, exit 2)."""
        build = Path(build)
        doc = cls.check(build)
        try:
            return cls._from(build, doc)
        except InputError as exc:  # a field named by _from: said as a malformed manifest, like the others
            prefix = f"{build / 'manifest.json'}: "
            text = str(exc)[len(prefix):] if str(exc).startswith(prefix) else str(exc)
            raise InputError(f"{prefix}malformed manifest: {text}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"{build / 'manifest.json'}: malformed manifest ({type(exc).__name__}: {exc}); "
                             "re-run rkdet convert") from None

    @classmethod
    def _from(cls, build: Path, doc: Any) -> BuildInfo:
        where = build / "manifest.json"
        fingerprint = identifier(doc.get("fingerprint"), where, "fingerprint")
        platform = doc["platform"]
        if not isinstance(platform, str) or not re.fullmatch(r"[a-z0-9_]{1,32}", platform):
            raise InputError(f"{where}: platform {str(platform)[:40]!r} is not a platform name; re-run rkdet convert")
        fed = doc.get("fed_input")
        fed_input = None if fed is None else FedInput(
            fed.get("layout"), tuple(float(v) for v in fed["mean"]), tuple(float(v) for v in fed["std"]))
        header = (doc.get("rknn") or {}).get("header") or {}
        inputs = doc.get("inputs") or {}
        outputs = ((inputs.get("onnx_prepared") or {}).get("outputs")) or []
        origin = str(doc.get("origin") or "converted")
        if origin == "imported":  # no prepared ONNX: the shapes the .rknn's own header gives
            outputs = header.get("outputs") or []
        reference = doc.get("reference") or {}
        stand_in = (doc.get("emulator_stand_in") or {}).get("file")
        return cls(folder=build, fingerprint=fingerprint, platform=platform, fed_input=fed_input,
                   toolkit_version=header.get("toolkit_version"), format_version=int(header.get("format_version") or 0),
                   output_shapes=tuple(tuple(int(d) for d in out["shape"]) for out in outputs),
                   golden_inputs=len(inputs.get("golden") or ()),
                   embedded_fingerprint=identifier(doc.get("embedded_fingerprint"), where, "embedded_fingerprint",
                                                   required=False),
                   rknn_sha256=identifier((doc.get("rknn") or {}).get("sha256"), where, "rknn.sha256",
                                          required=False),
                   onnx_sha256=identifier((inputs.get("onnx_prepared") or {}).get("sha256"), where,
                                          "inputs.onnx_prepared.sha256", required=False),
                   gates=from_manifest(doc), origin=origin,
                   no_reference=str(reference.get("reason") or "no reference") if origin == "imported" else None,
                   emulator_onnx=build / Path(str(stand_in)).name if stand_in else None)
