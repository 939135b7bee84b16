"""The build manifest: every input hashed, the two fingerprints, and the environment that built it.

The fingerprints are defined in `rkdet.convert.identity` (one place): the *model fingerprint* hashes
what the toolkit is given (prepared ONNX, fed calibration tensors, every toolkit option, target,
toolkit version) and nothing about the workstation; the *build fingerprint* adds the `.rknn` content
fingerprint, the golden inputs and the simulator's outputs. The host's Python, torch's build variant
and the other library versions are recorded under `environment`, never fingerprinted, so the same
model built on two workstations has the same fingerprints.

The *embedded fingerprint* is the model fingerprint, written into the `.rknn` through the toolkit's
`config(custom_string=...)` (`embedded_custom_string`): it is known before the toolkit runs, so the
file can carry it without depending on itself (the `.rknn` content fingerprint leaves the custom
string out). On the board, rkdet-run reads it back from the file and refuses a model whose embedded
fingerprint is not the one deploy expects (docs/FORMATS.md "Embedded fingerprint").
The manifest has stable key order and no wall-clock time unless SOURCE_DATE_EPOCH is set. Its record,
reader and writer are `rkdet.records.manifest` (SCHEMA and write_manifest are re-exported here).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rkdet.convert.identity import build_fingerprint, environment, golden_records
from rkdet.onboard.hashing import file_sha256, output_hash
from rkdet.onboard.identity import EMBED_KEY
from rkdet.records.manifest import (SCHEMA, ConfigRecord, FedInput, FileRef, InputRecord, Inputs, Manifest, NamedShape,
                                    PreparedOnnx, RknnHeader, RknnRecord, RknnTensor, write_manifest)

if TYPE_CHECKING:
    from rkdet.config import RkdetConfig
    from rkdet.convert.onnx_graph import PreparedModel
    from rkdet.convert.identity import ModelIdentity
    from rkdet.convert.images import Materialized
    from rkdet.convert.toolkits import Toolkit

# Config sections that cannot change the built model or its golden outputs (board run settings).
_NOT_IN_BUILD = ("run", "board", "tolerances", "name")

# EMBED_KEY (rkdet-fp=): defined once, by the board's parser (rkdet.onboard.identity), which reads the last occurrence
CUSTOM_STRING_MAX = 1023  # rknn_custom_string.string is char[1024] in rknn_api.h (NUL-terminated)

__all__ = ["embedded_custom_string", "EMBED_KEY", "SCHEMA", "sha256_file", "sha256_bytes", "folder_key",
           "build_manifest", "write_manifest", "rknn_content_fingerprint", "rknn_header"]


def sha256_file(path: Path) -> str:
    return file_sha256(str(path))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def build_config(cfg: RkdetConfig, platform: str) -> dict[str, Any]:
    """The result-affecting part of the resolved config, without machine-specific paths."""
    resolved = cfg.resolved_dict()
    for key in _NOT_IN_BUILD:
        resolved.pop(key, None)
    resolved["model"].pop("onnx")
    resolved["quantize"].pop("dataset")
    resolved["golden"].pop("inputs")
    if not resolved["quantize"].get("float_layers"):  # fully quantized: fingerprinted as before the key existed
        resolved["quantize"].pop("float_layers", None)
    if resolved["model"].get("input_layout") == "nchw":  # as before the key existed
        resolved["model"].pop("input_layout", None)
    if resolved["preprocess"].get("short_side") is None:  # not a centre crop: as before the key existed
        resolved["preprocess"].pop("short_side", None)
    resolved["target"] = {"platform": platform}
    resolved["toolkit"].pop("version", None)  # fingerprinted as the toolkit's own version
    return resolved


def _image_records(mat: Materialized) -> tuple[InputRecord, ...]:
    return tuple(InputRecord(output_hash(mat.tensors[f.name]), f.path.name, f.sha256) for f in mat.files)


def folder_key(cfg: RkdetConfig, platform: str, cal_files: list, gold_files: list, tk: Toolkit) -> str:
    """Names the hermetic work folder before any image is decoded (so the worker can start early):
    the build's inputs taken as file hashes instead of fed tensors (no machine paths, no versions)."""
    doc = {
        "onnx": sha256_file(Path(cfg.model.onnx)),
        "config": build_config(cfg, platform),
        "calibration": [f.sha256 for f in cal_files],
        "golden": [f.sha256 for f in gold_files],
        "toolkit": {"name": tk.name, "version": tk.version},
    }
    return sha256_bytes(_canonical(doc).encode())


def embedded_custom_string(user: str | None, model_fp: str) -> str:
    """The custom_string given to the toolkit: the user's `toolkit.custom_string` (if any), then
    `;rkdet-fp=<model fingerprint>` (alone when the user set none). The user's text is a toolkit option
    in the model identity, so nothing here depends on itself."""
    from rkdet.errors import InputError

    mine = f"{EMBED_KEY}{model_fp}"
    text = f"{user};{mine}" if user else mine
    if len(text.encode("utf-8")) > CUSTOM_STRING_MAX:
        raise InputError(f"toolkit.custom_string is {len(user.encode('utf-8')) if user else 0} bytes; with rkdet's "
                         f"';{EMBED_KEY}<64 hex>' it must fit the runtime's {CUSTOM_STRING_MAX + 1}-byte custom "
                         f"string: shorten it to at most {CUSTOM_STRING_MAX - len(mine) - 1} bytes")
    return text


def rknn_content_fingerprint(path: Path) -> str:
    from rkdet.convert.rknn_file import content_fingerprint

    return content_fingerprint(path)


def rknn_header(info: Any) -> RknnHeader:
    """The `.rknn` facts a person checks first: format, target, toolkit, tensor types and quantization."""
    def tensors(attrs: Any) -> tuple[RknnTensor, ...]:
        return tuple(RknnTensor(t.name, tuple(t.shape), t.dtype, t.qnt_method, tuple(t.scale), tuple(t.zero_point))
                     for t in attrs)

    return RknnHeader(info.format_version, info.model_format, info.target_platform, info.toolkit_version,
                      info.compiler_version, info.source_framework, tensors(info.inputs), tensors(info.outputs))


def build_manifest(cfg: RkdetConfig, platform: str, model: PreparedModel, cal: Materialized, gold: Materialized,
                   identity: ModelIdentity, stage_dir: Path, golden_hashes: dict, fidelity: dict | None,
                   hermetic: dict, toolkit_log: dict | None = None) -> Manifest:
    """The build's manifest record (`rkdet.records.manifest.Manifest`, its one definition and writer)."""
    rknn_path = stage_dir / "model.rknn"
    from rkdet.convert.rknn_file import read_rknn

    info = read_rknn(rknn_path)
    content = rknn_content_fingerprint(rknn_path)
    model_fp = identity.fingerprint
    source = Path(cfg.model.onnx)
    resolved = build_config(cfg, platform)
    return Manifest(
        schema=SCHEMA, name=cfg.name, platform=platform,
        fingerprint=build_fingerprint(model_fp, golden_records(gold), content, golden_hashes.get("simulator")),
        model_fingerprint=model_fp,
        # what the .rknn carries in its custom string (rkdet-fp=...), read back by rkdet-run on the board
        embedded_fingerprint=model_fp if info.custom_string.endswith(EMBED_KEY + model_fp) else None,
        model_identity=identity.to_json(),  # exactly what model_fingerprint hashes (rkdet.convert.identity)
        inputs=Inputs(
            onnx=FileRef(source.name, sha256_file(source)),
            onnx_prepared=PreparedOnnx("model.onnx", sha256_bytes(model.onnx_bytes), model.prepare, model.input_name,
                                       tuple(model.input_shape_nchw),
                                       tuple(NamedShape(n, tuple(s)) for n, s in zip(model.output_names,
                                                                                     model.output_shapes)),
                                       model.opset),
            config=ConfigRecord(sha256_bytes(_canonical(resolved).encode()), resolved),
            calibration=_image_records(cal), golden=_image_records(gold)),
        fed_input=FedInput("NHWC", tuple(cfg.preprocess.mean), tuple(cfg.preprocess.std), "uint8",
                           (1, model.input_shape_nchw[2], model.input_shape_nchw[3], 3), cfg.preprocess.channel_order),
        # what built it (versions, no machine paths) and the hermetic run: recorded, never fingerprinted
        environment=environment(hermetic),
        rknn=RknnRecord("model.rknn", sha256_file(rknn_path), rknn_path.stat().st_size, content, rknn_header(info),
                        info.custom_string),
        golden_outputs=golden_hashes, fidelity=fidelity,
        # hybrid quantization: the RKNN layers that run in float16 (quantize.float_layers); () fully quantized
        float_layers=tuple(cfg.quantize.float_layers),
        toolkit_log=toolkit_log,  # every E/W RKNN line classified; accepted errors with their pattern
        created_unix=int(os.environ["SOURCE_DATE_EPOCH"]) if "SOURCE_DATE_EPOCH" in os.environ else None)
