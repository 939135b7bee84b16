"""`manifest.json`, typed: the one record of a build folder's manifest, its one writer and one reader.

Why: convert writes the manifest and deploy, diff, layers, bisection, the search, the self-check and
compare-builds read it. Each used to read the nested dict by key (`doc["rknn"]["header"]["outputs"]`);
a damaged or crafted manifest then failed as a KeyError far from the file. Here it is read once,
bounded (records/io.py) and strictly typed: a field of the wrong type is one line naming the file
and the dotted field (exit 2). Fields a hand-made or older manifest lacks are None (or empty); the
consumer that needs one says so. Free-form sections whose own format is documented elsewhere
(`model_identity`, `environment`, `fidelity`, `toolkit_log`, ...) are kept as read.

`to_json` writes exactly the keys convert and import-rknn have always written (docs/FORMATS.md
"Build folder", "Imported build folder"); `tests/records/test_formats.py` checks the two agree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.errors import InputError
from rkdet.records import fields as f
from rkdet.records.gates import GateRecord, from_manifest
from rkdet.records.io import identifier, read_json_object, write_json

SCHEMA = "rkdet.manifest/2"  # /2: model_fingerprint + model_identity + environment (docs/FORMATS.md)
FILE = "manifest.json"
CONVERTED, IMPORTED = "converted", "imported"
ADVICE = "re-run rkdet convert"


@dataclass(frozen=True)
class FileRef:
    """A file by name and sha256 (`inputs.onnx`, `inputs.rknn`)."""

    file: str | None
    sha256: str | None

    @classmethod
    def read(cls, doc: Mapping[str, Any], where: f.Where) -> FileRef:
        return cls(f.text(doc, "file", where), f.text(doc, "sha256", where))

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256}


@dataclass(frozen=True)
class InputRecord:
    """One calibration or golden input: converted `{file, sha256, tensor}`, imported `{name, tensor}`."""

    tensor: str | None  # the output_hash of the tensor as fed
    file: str | None = None
    sha256: str | None = None
    name: str | None = None

    @classmethod
    def read(cls, value: Any, where: f.Where) -> InputRecord:
        doc = f.obj(value, where)
        return cls(f.text(doc, "tensor", where), f.text(doc, "file", where), f.text(doc, "sha256", where),
                   f.text(doc, "name", where))

    @property
    def stem(self) -> str | None:
        """The input's name (a golden input's file stem)."""
        return self.name if self.name is not None else (Path(self.file).stem if self.file else None)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in (("file", self.file), ("sha256", self.sha256), ("name", self.name),
                                  ("tensor", self.tensor)) if v is not None}


@dataclass(frozen=True)
class NamedShape:
    """An output of the prepared ONNX graph."""

    name: str | None
    shape: tuple[int, ...]

    @classmethod
    def read(cls, value: Any, where: f.Where) -> NamedShape:
        doc = f.obj(value, where)
        return cls(f.text(doc, "name", where), f.items(doc, "shape", where, f.an_int, required=True) or ())

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape)}


@dataclass(frozen=True)
class PreparedOnnx:
    """`inputs.onnx_prepared`: the ONNX as handed to the toolkit (after graph preparation)."""

    file: str | None
    sha256: str | None
    prepare: str | None
    input: str | None
    input_shape_nchw: tuple[int, ...] | None
    outputs: tuple[NamedShape, ...]
    opset: int | None

    @classmethod
    def read(cls, doc: Mapping[str, Any], where: f.Where) -> PreparedOnnx:
        return cls(f.text(doc, "file", where), f.text(doc, "sha256", where), f.text(doc, "prepare", where),
                   f.text(doc, "input", where), f.items(doc, "input_shape_nchw", where, f.an_int),
                   f.items(doc, "outputs", where, NamedShape.read) or (), f.integer(doc, "opset", where))

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256, "prepare": self.prepare, "input": self.input,
                "input_shape_nchw": None if self.input_shape_nchw is None else list(self.input_shape_nchw),
                "outputs": [o.to_json() for o in self.outputs], "opset": self.opset}


@dataclass(frozen=True)
class ConfigRecord:
    """`inputs.config`: the result-affecting sections of the resolved config and their hash."""

    sha256: str | None
    resolved: Mapping[str, Any] | None

    @classmethod
    def read(cls, doc: Mapping[str, Any], where: f.Where) -> ConfigRecord:
        return cls(f.text(doc, "sha256", where), f.mapping(doc, "resolved", where))

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "resolved": self.resolved}


@dataclass(frozen=True)
class Inputs:
    """`inputs`: every input of the build by file (imported builds: the .rknn and the golden inputs)."""

    onnx: FileRef | None = None
    onnx_prepared: PreparedOnnx | None = None
    config: ConfigRecord | None = None
    calibration: tuple[InputRecord, ...] | None = None
    golden: tuple[InputRecord, ...] = ()
    rknn: FileRef | None = None  # imported builds only

    @classmethod
    def read(cls, doc: Mapping[str, Any], where: f.Where) -> Inputs:
        return cls(f.nested(doc, "onnx", where, FileRef.read), f.nested(doc, "onnx_prepared", where, PreparedOnnx.read),
                   f.nested(doc, "config", where, ConfigRecord.read),
                   f.items(doc, "calibration", where, InputRecord.read),
                   f.items(doc, "golden", where, InputRecord.read) or (), f.nested(doc, "rknn", where, FileRef.read))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "onnx": None if self.onnx is None else self.onnx.to_json(),
            "onnx_prepared": None if self.onnx_prepared is None else self.onnx_prepared.to_json(),
            "calibration": None if self.calibration is None else [r.to_json() for r in self.calibration],
            "golden": [r.to_json() for r in self.golden]}
        if self.config is not None:
            out["config"] = self.config.to_json()
        if self.rknn is not None:
            out["rknn"] = self.rknn.to_json()
        return out


@dataclass(frozen=True)
class FedInput:
    """`fed_input`: the input exactly as the model is fed (layout, dtype, shape, normalization)."""

    layout: str | None
    mean: tuple[float, ...]
    std: tuple[float, ...]
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    channel_order: str | None = None
    sources: Mapping[str, Any] | None = None  # imported: where each value came from

    @classmethod
    def read(cls, doc: Mapping[str, Any], where: f.Where) -> FedInput:
        return cls(f.text(doc, "layout", where), f.items(doc, "mean", where, f.a_number, required=True) or (),
                   f.items(doc, "std", where, f.a_number, required=True) or (), f.text(doc, "dtype", where),
                   f.items(doc, "shape", where, f.an_int), f.text(doc, "channel_order", where),
                   f.mapping(doc, "sources", where))

    def to_json(self) -> dict[str, Any]:
        out = {"layout": self.layout, "dtype": self.dtype, "shape": None if self.shape is None else list(self.shape),
               "channel_order": self.channel_order, "mean": list(self.mean), "std": list(self.std)}
        if self.sources is not None:
            out["sources"] = self.sources
        return out


@dataclass(frozen=True)
class RknnTensor:
    """One input or output tensor of the `.rknn` header (type and quantization)."""

    name: str | None
    shape: tuple[int, ...]
    dtype: str | None = None
    qnt_method: str | None = None
    scale: tuple[float, ...] = ()
    zero_point: tuple[int, ...] = ()

    @classmethod
    def read(cls, value: Any, where: f.Where) -> RknnTensor:
        doc = f.obj(value, where)
        return cls(f.text(doc, "name", where), f.items(doc, "shape", where, f.an_int) or (), f.text(doc, "dtype", where),
                   f.text(doc, "qnt_method", where), f.items(doc, "scale", where, f.a_number) or (),
                   f.items(doc, "zero_point", where, f.an_int) or ())

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "qnt_method": self.qnt_method,
                "scale": list(self.scale), "zero_point": list(self.zero_point)}


@dataclass(frozen=True)
class RknnHeader:
    """`rknn.header`: the `.rknn` facts a person checks first (format, target, toolkit, tensors)."""

    format_version: int | None = None
    model_format: str | int | None = None
    target_platform: str | None = None
    toolkit_version: str | None = None
    compiler_version: str | None = None
    source_framework: str | None = None
    inputs: tuple[RknnTensor, ...] = ()
    outputs: tuple[RknnTensor, ...] = ()

    @classmethod
    def read(cls, doc: Mapping[str, Any], where: f.Where) -> RknnHeader:
        fmt = doc.get("model_format")
        if fmt is not None and (isinstance(fmt, bool) or not isinstance(fmt, (str, int))):
            raise where.at("model_format").fail("a string or an integer", fmt)
        return cls(f.integer(doc, "format_version", where), fmt, f.text(doc, "target_platform", where),
                   f.text(doc, "toolkit_version", where), f.text(doc, "compiler_version", where),
                   f.text(doc, "source_framework", where), f.items(doc, "inputs", where, RknnTensor.read) or (),
                   f.items(doc, "outputs", where, RknnTensor.read) or ())

    def to_json(self) -> dict[str, Any]:
        return {"format_version": self.format_version, "model_format": self.model_format,
                "target_platform": self.target_platform, "toolkit_version": self.toolkit_version,
                "compiler_version": self.compiler_version, "source_framework": self.source_framework,
                "inputs": [t.to_json() for t in self.inputs], "outputs": [t.to_json() for t in self.outputs]}


@dataclass(frozen=True)
class RknnRecord:
    """`rknn`: the exported `.rknn` (file hash, content fingerprint, header, custom string)."""

    file: str | None = "model.rknn"
    sha256: str | None = None
    size: int | None = None
    content_fingerprint: str | None = None
    header: RknnHeader = RknnHeader()
    custom_string: str | None = None

    @classmethod
    def read(cls, doc: Mapping[str, Any], where: f.Where) -> RknnRecord:
        return cls(f.text(doc, "file", where), f.text(doc, "sha256", where), f.integer(doc, "size", where),
                   f.text(doc, "content_fingerprint", where),
                   f.nested(doc, "header", where, RknnHeader.read) or RknnHeader(), f.text(doc, "custom_string", where))

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256, "size": self.size,
                "content_fingerprint": self.content_fingerprint, "header": self.header.to_json(),
                "custom_string": self.custom_string}


INT8_EMULATION_FILE = "model.int8emu.onnx"  # a build's INT8 emulation (rkdet.convert.int8emu), for emulated boards


@dataclass(frozen=True)
class Manifest:
    """A build folder's `manifest.json` (schema rkdet.manifest/2; converted or imported)."""

    fingerprint: str  # the build fingerprint (64 hex): results folders, history, fleet, cut cache
    platform: str
    schema: str | None = SCHEMA
    name: str | None = None
    origin: str = CONVERTED  # "imported": `rkdet import-rknn` (no ONNX, no golden references)
    model_fingerprint: str | None = None  # converted: the hash of model_identity
    embedded_fingerprint: str | None = None  # what the .rknn carries (rkdet-fp=…); None when it does not
    model_identity: Mapping[str, Any] | None = None  # exactly what model_fingerprint hashes (convert/identity.py)
    inputs: Inputs = Inputs()
    fed_input: FedInput | None = None
    environment: Mapping[str, Any] | None = None  # what built it: recorded, never fingerprinted
    rknn: RknnRecord = RknnRecord()
    golden_outputs: Mapping[str, Any] | None = None  # {set: {input: {output: hash}}}
    fidelity: Mapping[str, Any] | None = None  # the fidelity report's summary (fidelity.json has the whole)
    float_layers: tuple[str, ...] | None = None  # hybrid quantization's float16 layers; () fully quantized
    toolkit_log: Mapping[str, Any] | None = None  # every E/W RKNN line classified
    gates: GateRecord | None = None  # convert's gate verdict (None: not recorded, see `gate_record`)
    created_unix: int | None = None  # only with SOURCE_DATE_EPOCH
    # imported builds only (docs/FORMATS.md "Imported build folder")
    input_fingerprint: str | None = None
    toolchain: Mapping[str, Any] | None = None
    reference: Mapping[str, Any] | None = None  # {agrees, reason, simulator}: why no reference
    emulator_stand_in: Mapping[str, Any] | None = None  # TEST CONTROL: the emulated runtime double's stand-in
    # the INT8 emulation the emulated board computes (rkdet.convert.int8emu): {file, sha256, ...}; None: none
    int8_emulation: Mapping[str, Any] | None = None

    # -- the one reader ------------------------------------------------------------------------
    @classmethod
    def from_json(cls, doc: Any, where: str | Path) -> Manifest:
        """The record of a parsed manifest; a missing or wrongly typed field is one line naming the file
        and the field (InputError)."""
        at = f.Where(str(where), advice=ADVICE)
        doc = f.obj(doc, at)
        fingerprint = identifier(doc.get("fingerprint"), where, "fingerprint")
        platform = f.text(doc, "platform", at, required=True)
        if not (0 < len(platform) <= 32 and all(c.isascii() and (c.isalnum() or c == "_") and not c.isupper()
                                                 for c in platform)):
            raise InputError(f"{where}: platform {platform[:40]!r} is not a platform name; {ADVICE}")
        floats = f.items(doc, "float_layers", at, f.a_str)
        gates = from_manifest(doc) if doc.get("gates") is not None else None  # else `gate_record` derives it
        return cls(
            fingerprint=fingerprint, platform=platform, schema=f.text(doc, "schema", at), name=f.text(doc, "name", at),
            origin=f.text(doc, "origin", at) or CONVERTED,
            model_fingerprint=identifier(doc.get("model_fingerprint"), where, "model_fingerprint", required=False),
            embedded_fingerprint=identifier(doc.get("embedded_fingerprint"), where, "embedded_fingerprint",
                                            required=False),
            model_identity=f.mapping(doc, "model_identity", at),
            inputs=f.nested(doc, "inputs", at, Inputs.read) or Inputs(),
            fed_input=f.nested(doc, "fed_input", at, FedInput.read), environment=f.mapping(doc, "environment", at),
            rknn=f.nested(doc, "rknn", at, RknnRecord.read) or RknnRecord(),
            golden_outputs=f.mapping(doc, "golden_outputs", at), fidelity=f.mapping(doc, "fidelity", at),
            float_layers=floats, toolkit_log=f.mapping(doc, "toolkit_log", at), gates=gates,
            created_unix=f.integer(doc, "created_unix", at), input_fingerprint=f.text(doc, "input_fingerprint", at),
            toolchain=f.mapping(doc, "toolchain", at), reference=f.mapping(doc, "reference", at),
            emulator_stand_in=f.mapping(doc, "emulator_stand_in", at),
            int8_emulation=f.mapping(doc, "int8_emulation", at))

    # -- the one writer ------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The manifest as convert (or import-rknn, `origin: imported`) writes it."""
        doc: dict[str, Any] = {
            "schema": self.schema, "name": self.name, "platform": self.platform, "fingerprint": self.fingerprint,
            "embedded_fingerprint": self.embedded_fingerprint, "inputs": self.inputs.to_json(),
            "fed_input": None if self.fed_input is None else self.fed_input.to_json(), "rknn": self.rknn.to_json(),
            "golden_outputs": self.golden_outputs, "fidelity": self.fidelity}
        if self.imported:
            doc.update(origin=self.origin, input_fingerprint=self.input_fingerprint, toolchain=self.toolchain,
                       reference=self.reference, emulator_stand_in=self.emulator_stand_in)
        else:
            doc.update(model_fingerprint=self.model_fingerprint, model_identity=self.model_identity,
                       environment=self.environment,
                       float_layers=None if self.float_layers is None else list(self.float_layers),
                       toolkit_log=self.toolkit_log, int8_emulation=self.int8_emulation)
        if self.gates is not None:
            doc["gates"] = self.gates.to_json()
        if self.created_unix is not None:
            doc["created_unix"] = self.created_unix
        return doc

    def replace(self, **changes: Any) -> Manifest:
        return dataclasses.replace(self, **changes)

    # -- what consumers ask ----------------------------------------------------------------------
    @property
    def imported(self) -> bool:
        return self.origin == IMPORTED

    @property
    def gate_record(self) -> GateRecord:
        """Did the build pass its gates (rkdet.records.gates: the `gates` record, else derived from an older
        manifest's `fidelity.gates`, else passed)."""
        return self.gates if self.gates is not None else from_manifest({"fidelity": self.fidelity})

    @property
    def output_shapes(self) -> tuple[tuple[int, ...], ...]:
        """The model's output shapes: the prepared ONNX graph's, or (imported) the `.rknn` header's."""
        if self.imported or self.inputs.onnx_prepared is None:
            return tuple(t.shape for t in self.rknn.header.outputs) if self.imported else ()
        return tuple(o.shape for o in self.inputs.onnx_prepared.outputs)

    @property
    def onnx_sha256(self) -> str | None:
        """The prepared model.onnx's sha256 (None for an imported build)."""
        return None if self.inputs.onnx_prepared is None else self.inputs.onnx_prepared.sha256

    @property
    def toolkit_version(self) -> str | None:
        """The version of the toolkit that built the model: its model identity's (converted), its
        toolchain record's (imported)."""
        record = self.model_identity if self.model_identity is not None else self.toolchain
        toolkit = (record or {}).get("toolkit")
        version = toolkit.get("version") if isinstance(toolkit, dict) else None
        return version if isinstance(version, str) else None

    @property
    def quant_steps(self) -> dict[str, float]:
        """Output name -> quantization step (the int8 scale) from `rknn.header.outputs`, for the diff's
        `max_lsb`; only outputs with one per-tensor scale (the reader checked names, dtypes, numbers)."""
        return {t.name: float(t.scale[0]) for t in self.rknn.header.outputs
                if t.name is not None and t.dtype in ("int8", "uint8") and len(t.scale) == 1 and t.scale[0] > 0}

    @property
    def int8_emulation_sha256(self) -> str | None:
        """The sha256 the build recorded for its INT8 emulation (what deploy checks before staging it)."""
        digest = (self.int8_emulation or {}).get("sha256")
        return digest if isinstance(digest, str) else None

    def need_fed_input(self, where: str | Path) -> FedInput:
        if self.fed_input is None:
            raise InputError(f"{where}: manifest.json has no fed_input; {ADVICE}")
        return self.fed_input


def read_manifest(path: str | Path) -> Manifest:
    """THE reader of a manifest file (bounded, strict). FileNotFoundError passes for the caller's message;
    anything else wrong is one line naming the file (InputError, exit 2)."""
    path = Path(path)
    try:
        doc = read_json_object(path)
    except InputError as exc:
        raise InputError(f"{exc}; {ADVICE}") from None
    return Manifest.from_json(doc, path)


def write_manifest(path: str | Path, manifest: Manifest) -> None:
    """THE writer of a manifest file (sorted keys, atomic: records/io.py)."""
    write_json(path, manifest.to_json())


__all__ = ["CONVERTED", "ConfigRecord", "FILE", "FedInput", "FileRef", "IMPORTED", "InputRecord", "Inputs", "Manifest",
           "NamedShape", "PreparedOnnx", "RknnHeader", "RknnRecord", "RknnTensor", "SCHEMA", "read_manifest",
           "write_manifest"]
