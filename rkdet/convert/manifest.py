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
The manifest has stable key order and no wall-clock time unless SOURCE_DATE_EPOCH is set.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rkdet.convert.identity import build_fingerprint, environment, golden_records
from rkdet.runner import file_sha256, output_hash

if TYPE_CHECKING:
    from rkdet.config import RkdetConfig
    from rkdet.convert.onnx_graph import PreparedModel
    from rkdet.convert.identity import ModelIdentity
    from rkdet.convert.images import Materialized
    from rkdet.convert.toolkits import Toolkit

SCHEMA = "rkdet.manifest/2"  # /2: model_fingerprint + model_identity + environment (docs/FORMATS.md)
# Config sections that cannot change the built model or its golden outputs (board run settings).
_NOT_IN_BUILD = ("run", "board", "tolerances", "name")

EMBED_KEY = "rkdet-fp="  # the runner's parser (rkdet.runner.EMBED_KEY) reads the last occurrence
CUSTOM_STRING_MAX = 1023  # rknn_custom_string.string is char[1024] in rknn_api.h (NUL-terminated)

__all__ = ["embedded_custom_string", "EMBED_KEY", "sha256_file", "sha256_bytes", "folder_key", "build_manifest",
           "write_manifest", "rknn_content_fingerprint"]


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
    if resolved["preprocess"].get("short_side") is None:  # not a centre crop: as before the key existed
        resolved["preprocess"].pop("short_side", None)
    resolved["target"] = {"platform": platform}
    resolved["toolkit"].pop("version", None)  # fingerprinted as the toolkit's own version
    return resolved


def _image_records(mat: Materialized) -> list[dict[str, str]]:
    return [{"file": f.path.name, "sha256": f.sha256, "tensor": output_hash(mat.tensors[f.name])} for f in mat.files]


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


def rknn_header(info: Any) -> dict[str, Any]:
    """The `.rknn` facts a person checks first: format, target, toolkit, tensor types and quantization."""
    def tensors(attrs: Any) -> list[dict[str, Any]]:
        return [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "qnt_method": t.qnt_method,
                 "scale": list(t.scale), "zero_point": list(t.zero_point)} for t in attrs]

    return {"format_version": info.format_version, "model_format": info.model_format,
            "target_platform": info.target_platform, "toolkit_version": info.toolkit_version,
            "compiler_version": info.compiler_version, "source_framework": info.source_framework,
            "inputs": tensors(info.inputs), "outputs": tensors(info.outputs)}


def build_manifest(cfg: RkdetConfig, platform: str, model: PreparedModel, cal: Materialized, gold: Materialized,
                   identity: ModelIdentity, stage_dir: Path, golden_hashes: dict, fidelity: dict | None,
                   hermetic: dict, toolkit_log: dict | None = None) -> dict[str, Any]:
    rknn_path = stage_dir / "model.rknn"
    from rkdet.convert.rknn_file import read_rknn

    info = read_rknn(rknn_path)
    content = rknn_content_fingerprint(rknn_path)
    model_fp = identity.fingerprint
    source = Path(cfg.model.onnx)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "name": cfg.name,
        "platform": platform,
        "fingerprint": build_fingerprint(model_fp, golden_records(gold), content, golden_hashes.get("simulator")),
        "model_fingerprint": model_fp,
        # what the .rknn carries in its custom string (rkdet-fp=...), read back by rkdet-run on the board
        "embedded_fingerprint": model_fp if info.custom_string.endswith(EMBED_KEY + model_fp) else None,
        "model_identity": identity.as_dict(),  # exactly what model_fingerprint hashes (rkdet.convert.identity)
        "inputs": {
            "onnx": {"file": source.name, "sha256": sha256_file(source)},
            "onnx_prepared": {"file": "model.onnx", "sha256": sha256_bytes(model.onnx_bytes), "prepare": model.prepare,
                              "input": model.input_name, "input_shape_nchw": list(model.input_shape_nchw),
                              "outputs": [{"name": n, "shape": list(s)} for n, s in zip(model.output_names, model.output_shapes)],
                              "opset": model.opset},
            "config": {"sha256": sha256_bytes(_canonical(build_config(cfg, platform)).encode()),
                       "resolved": build_config(cfg, platform)},
            "calibration": _image_records(cal),
            "golden": _image_records(gold),
        },
        "fed_input": {"layout": "NHWC", "dtype": "uint8", "shape": [1, model.input_shape_nchw[2],
                                                                     model.input_shape_nchw[3], 3],
                      "channel_order": cfg.preprocess.channel_order, "mean": list(cfg.preprocess.mean),
                      "std": list(cfg.preprocess.std)},
        # what built it (versions, no machine paths) and the hermetic run: recorded, never fingerprinted
        "environment": environment(hermetic),
        "rknn": {"file": "model.rknn", "sha256": sha256_file(rknn_path), "size": rknn_path.stat().st_size,
                 "content_fingerprint": content, "header": rknn_header(info),
                 "custom_string": info.custom_string},
        "golden_outputs": golden_hashes,
        "fidelity": fidelity,
        # hybrid quantization: the RKNN layers that run in float16 (quantize.float_layers); [] fully quantized
        "float_layers": list(cfg.quantize.float_layers),
        "toolkit_log": toolkit_log,  # every E/W RKNN line classified; accepted errors with their pattern
    }
    if "SOURCE_DATE_EPOCH" in os.environ:
        doc["created_unix"] = int(os.environ["SOURCE_DATE_EPOCH"])
    return doc


def write_manifest(path: Path, doc: dict[str, Any]) -> None:
    from rkdet.records.io import write_json_atomic  # the one atomic writer

    write_json_atomic(str(path), doc)
