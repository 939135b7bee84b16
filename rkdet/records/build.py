"""A build folder loaded once (`BuildRecord`, `load_build`) and the board side's view of it (`BuildInfo`).

Why: a build folder is input (a colleague's, CI's, a crafted one), and deploy, fleet deploy, the
diff, layers and the self-check each used to re-read and re-judge its files from the path, with
different reactions to a broken manifest (exit 2, "gates PASSED", `{}`). The CLI now resolves the
folder into one `BuildRecord` (manifest, gates, golden sets; model io, resolved config and fidelity
read on first use through their one reader each) and passes the record down: `manifest.json` is read
once per command, and a missing, unreadable, non-regular or invalid manifest is one line naming the
file (InputError, exit 2) for every command that takes a build.

`BuildInfo` is the handful of manifest fields deploy, preflight and a fleet or bisection scheduler
use (fingerprint, platform, the fed input, the `.rknn` header's versions, output shapes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.errors import InputError
from rkdet.records.fidelity import FILE as FIDELITY
from rkdet.records.fidelity import FidelityRecord, read_fidelity
from rkdet.records.gates import GateRecord
from rkdet.records.manifest import FILE as MANIFEST
from rkdet.records.manifest import FedInput, Manifest, read_manifest
from rkdet.records.model_io import FILE as MODEL_IO
from rkdet.records.model_io import ModelIo, read_model_io
from rkdet.records.resolved_config import FILE as RESOLVED_CONFIG
from rkdet.records.resolved_config import ResolvedConfig, read_resolved_config

__all__ = ["BuildInfo", "BuildRecord", "FedInput", "GOLDEN_SETS", "REQUIRED_FILES", "load_build"]

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
        record = _read_manifest(build, f"{build}: no manifest.json; run `rkdet convert` first or pass --build "
                                       "with a build folder")
        _check_complete(build)
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


def _hex(value: str | None, build: Path, name: str) -> str | None:
    from rkdet.records.io import identifier

    return identifier(value, Path(build) / MANIFEST, name, required=False)


def _read_manifest(build: Path, missing: str) -> Manifest:
    """THE read of a build folder's manifest (bounded, strict: a FIFO, /dev/zero or 100k brackets are one
    line naming the file); `missing` is the line for a folder without one."""
    path = build / MANIFEST
    try:
        return read_manifest(path)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.lexists(path):  # a dangling symlink: named as what it is
            raise InputError(f"{path}: cannot read (a link to nothing); re-run rkdet convert") from None
        raise InputError(missing) from None
    except InputError as exc:
        prefix = f"{path}: "
        text = str(exc)[len(prefix):] if str(exc).startswith(prefix) else str(exc)
        raise InputError(f"{prefix}malformed manifest: {text}") from None


def _check_complete(build: Path) -> None:
    for name in REQUIRED_FILES:
        if not (build / name).exists():
            raise InputError(f"{build}: {name} missing; the build folder is incomplete, re-run rkdet convert")


GOLDEN_SETS = ("simulator", "onnx-fp32")  # the reference result sets a build may hold (golden/<set>/)


@dataclass(frozen=True)
class BuildRecord:
    """A build folder, loaded once: its manifest (read and checked at load), and its model io, resolved
    config and fidelity report, each read on first use through its one reader and kept."""

    folder: Path
    manifest: Manifest
    info: BuildInfo
    _files: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def gates(self) -> GateRecord:
        """Convert's gate verdict (rkdet.records.gates)."""
        return self.info.gates

    @property
    def golden_sets(self) -> tuple[str, ...]:
        """The golden result sets the folder holds (`simulator`, `onnx-fp32`), in that order."""
        return tuple(name for name in GOLDEN_SETS if (self.folder / "golden" / name / "run.json").exists())

    @property
    def golden_inputs(self) -> tuple[Path, ...]:
        """The golden inputs as pushed to a board (`golden/inputs/*.npy`)."""
        return tuple(sorted((self.folder / "golden" / "inputs").glob("*.npy")))

    def model_io(self) -> ModelIo:
        """`model.io.json` (rkdet.records.model_io); missing or broken: one line naming it (exit 2)."""
        if MODEL_IO not in self._files:
            try:
                self._files[MODEL_IO] = read_model_io(self.folder / MODEL_IO)
            except FileNotFoundError:
                raise InputError(f"{self.folder}: {MODEL_IO} missing; the build folder is incomplete, "
                                 "re-run rkdet convert") from None
        return self._files[MODEL_IO]

    def resolved_config(self, error: type[InputError] = InputError) -> ResolvedConfig:
        """`config.resolved.json` (rkdet.records.resolved_config). FileNotFoundError passes for the
        caller's message (deploy: "pass --config FILE"); anything else is one line naming it (`error`)."""
        if RESOLVED_CONFIG not in self._files:
            self._files[RESOLVED_CONFIG] = read_resolved_config(self.folder / RESOLVED_CONFIG, error)
        return self._files[RESOLVED_CONFIG]

    def fidelity(self) -> FidelityRecord | None:
        """`fidelity.json` (rkdet.records.fidelity); None when the build has none (no simulator, imported)."""
        if FIDELITY not in self._files:
            try:
                self._files[FIDELITY] = read_fidelity(self.folder / FIDELITY)
            except FileNotFoundError:
                self._files[FIDELITY] = None
        return self._files[FIDELITY]


def load_build(folder: str | Path, *, complete: bool = True) -> BuildRecord:
    """THE load of a build folder: its manifest read once (bounded, strict) into a `BuildRecord`. A missing,
    unreadable, non-regular or invalid manifest is one line naming the file (InputError, exit 2);
    `complete` (deploy, fleet, layers --board, self-check) also needs what a board run needs
    (`REQUIRED_FILES`); the diff needs only the manifest beside the golden sets."""
    build = Path(folder)
    if complete:
        manifest = BuildInfo.check(build)
    else:
        manifest = _read_manifest(build, f"{build / MANIFEST}: missing; a build folder (rkdet convert, rkdet "
                                         "import-rknn) holds one: re-run rkdet convert")
    return BuildRecord(build, manifest, BuildInfo.from_manifest(build, manifest))
