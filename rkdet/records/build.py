"""What the board side reads of a build: a checked build folder and its manifest (`BuildInfo`).

Why its own record: deploy, preflight and a fleet or bisection scheduler need the build folder to
hold what a board run needs, and a handful of its manifest's fields (fingerprint, platform, the fed
input, the `.rknn` header's versions, output shapes). The manifest itself is read by the one reader
(`rkdet.records.manifest`); this is the board side's view of that record, with the folder's paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rkdet.errors import InputError
from rkdet.records.gates import GateRecord
from rkdet.records.manifest import FedInput, Manifest, read_manifest

__all__ = ["BuildInfo", "FedInput", "REQUIRED_FILES"]

REQUIRED_FILES = ("model.rknn", "model.io.json", "golden/inputs")


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
    manifest: Manifest | None = None  # the whole record (rkdet.records.manifest)

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
    def check(build: Path) -> Manifest:
        """The build folder's manifest (the typed record) when the folder holds what a board run needs;
        one line naming the folder or the manifest's field otherwise."""
        build = Path(build)
        manifest = build / "manifest.json"
        try:
            record = read_manifest(manifest)  # bounded: a FIFO, /dev/zero or 100k brackets are one line
        except FileNotFoundError:
            raise InputError(f"{build}: no manifest.json; run `rkdet convert` first or pass --build with a build "
                             "folder") from None
        except InputError as exc:
            prefix = f"{manifest}: "
            text = str(exc)[len(prefix):] if str(exc).startswith(prefix) else str(exc)
            raise InputError(f"{prefix}malformed manifest: {text}") from None
        for name in REQUIRED_FILES:
            if not (build / name).exists():
                raise InputError(f"{build}: {name} missing; the build folder is incomplete, re-run rkdet convert")
        return record

    @classmethod
    def load(cls, build: Path) -> BuildInfo:
        """`check` the folder and read its manifest (a malformed one: one line, exit 2)."""
        build = Path(build)
        return cls.from_manifest(build, cls.check(build))

    @classmethod
    def from_manifest(cls, build: Path, m: Manifest) -> BuildInfo:
        """The board side's view of a build folder's manifest record."""
        reference = m.reference or {}
        stand_in = (m.emulator_stand_in or {}).get("file")
        return cls(folder=Path(build), fingerprint=m.fingerprint, platform=m.platform, fed_input=m.fed_input,
                   toolkit_version=m.rknn.header.toolkit_version, format_version=m.rknn.header.format_version or 0,
                   output_shapes=m.output_shapes, golden_inputs=len(m.inputs.golden),
                   embedded_fingerprint=m.embedded_fingerprint,
                   rknn_sha256=_hex(m.rknn.sha256, build, "rknn.sha256"),
                   onnx_sha256=_hex(m.onnx_sha256, build, "inputs.onnx_prepared.sha256"),
                   gates=m.gate_record, origin=m.origin,
                   no_reference=str(reference.get("reason") or "no reference") if m.imported else None,
                   emulator_onnx=Path(build) / Path(str(stand_in)).name if stand_in else None, manifest=m)


def _hex(value: str | None, build: Path, field: str) -> str | None:
    from rkdet.records.io import identifier

    return identifier(value, Path(build) / "manifest.json", field, required=False)
