"""The model fingerprint and the build fingerprint, defined once; what built a model is only recorded.

Why: a build must be the same model on every workstation. The *model fingerprint* (what the `.rknn`
carries as `rkdet-fp=`, what `rkdet-run --expect-fingerprint` and a board check) hashes exactly what
the toolkit is given and nothing about the machine: the prepared ONNX, the fed calibration tensors in
dataset order, every toolkit option (config() and build() keyword arguments, quantization on/off,
float16 layers), the target platform, and the toolkit's name and version (`ModelIdentity`). The
*build fingerprint* adds what came out: the `.rknn` content fingerprint (rknn_file: volatile parts and
the custom string left out), the golden inputs as fed and the simulator's outputs on them. The host's
Python version, torch's build variant (`+cpu`/`+cu130`) and the other libraries are the *environment*:
recorded in the manifest (`environment`), never hashed into either fingerprint (docs/FORMATS.md).
"""

from __future__ import annotations

import hashlib
import json
import platform as pyplatform
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from rkdet import __version__
from rkdet.convert.toolkits import Toolkit, job_options
from rkdet.errors import InputError
from rkdet.onboard.hashing import output_hash
from rkdet.onboard.reference import cpu_class

if TYPE_CHECKING:
    from rkdet.config import RkdetConfig
    from rkdet.convert.images import Materialized
    from rkdet.convert.onnx_graph import PreparedModel

MODEL_SCHEME = "rkdet.model-identity/1"
BUILD_SCHEME = "rkdet.build-fingerprint/2"
# Recorded as the environment (versions only), never fingerprinted.
_ENVIRONMENT_DISTS = ("rknn-toolkit2", "onnx", "onnxruntime", "numpy", "opencv-python-headless", "torch", "protobuf")

__all__ = ["ModelIdentity", "model_identity", "build_fingerprint", "golden_records", "environment"]


def _digest(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class ModelIdentity:
    """Everything the NPU model is made from, and nothing about the machine that made it."""

    toolkit: str
    toolkit_version: str
    platform: str
    onnx_prepared: str  # sha256 of the ONNX bytes handed to the toolkit
    calibration: tuple[str, ...]  # output_hash of each fed calibration tensor, in dataset order (() unquantized)
    options: dict[str, Any]  # the toolkit job's: config, build, do_quantization, float_layers

    def to_json(self) -> dict[str, Any]:
        return {"scheme": MODEL_SCHEME, "toolkit": {"name": self.toolkit, "version": self.toolkit_version},
                "platform": self.platform, "onnx_prepared": self.onnx_prepared,
                "calibration": list(self.calibration), "options": self.options}

    @property
    def fingerprint(self) -> str:
        return _digest(self.to_json())

    @classmethod
    def from_dict(cls, doc: Any, where: str) -> "ModelIdentity":
        """Read a manifest's `model_identity`; a malformed one is one line naming `where` (exit 2)."""
        try:
            if doc["scheme"] != MODEL_SCHEME:
                raise ValueError(f"scheme {doc['scheme']!r}, not {MODEL_SCHEME!r}")
            calibration = doc["calibration"]
            if not isinstance(calibration, list) or not all(isinstance(h, str) for h in calibration):
                raise ValueError("calibration is not a list of hashes")
            if not isinstance(doc["options"], dict):
                raise ValueError("options is not an object")
            return cls(str(doc["toolkit"]["name"]), str(doc["toolkit"]["version"]), str(doc["platform"]),
                       str(doc["onnx_prepared"]), tuple(calibration), doc["options"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{where}: malformed model_identity ({exc.__class__.__name__}: {exc}); "
                             "rebuild it with rkdet convert") from None


def model_identity(cfg: RkdetConfig, platform: str, model: PreparedModel, cal: Materialized,
                   tk: Toolkit) -> ModelIdentity:
    """The identity of the model `cfg` builds for `platform` here (known before the toolkit runs)."""
    options = job_options(tk, cfg, platform)  # the user's custom string: rkdet's own is added after
    calibration = tuple(output_hash(cal.tensors[f.name]) for f in cal.files) if options["do_quantization"] else ()
    return ModelIdentity(tk.name, tk.version, platform, hashlib.sha256(model.onnx_bytes).hexdigest(), calibration,
                         options)


def golden_records(gold: Materialized) -> list[list[str]]:
    """[name, output_hash of the fed tensor] per golden input, in order: what the build fingerprint takes."""
    return [[f.name, output_hash(gold.tensors[f.name])] for f in gold.files]


def build_fingerprint(model_fp: str, golden: list[list[str]], rknn_content: str,
                      simulator_hashes: dict | None) -> str:
    """The build's identity: the model, its `.rknn` content, its golden inputs and simulator outputs."""
    return _digest({"scheme": BUILD_SCHEME, "model": model_fp, "rknn_content": rknn_content, "golden": golden,
                    "simulator_outputs": simulator_hashes})


def environment(hermetic: dict[str, Any]) -> dict[str, Any]:
    """What built it, for the record (versions, the CPU class, the hermetic environment; never fingerprinted)."""
    versions: dict[str, str | None] = {}
    for dist in _ENVIRONMENT_DISTS:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    # the CPU features onnxruntime's FP32 kernels dispatch on: the onnx-fp32 reference's bits follow its class
    # (docs/FORMATS.md "CPU class"); recorded, never fingerprinted, compared by --check-against
    return {"python": pyplatform.python_version(), "implementation": sys.implementation.name,
            "rkdet": __version__, "host": f"{sys.platform}-{pyplatform.machine()}", "libraries": versions,
            "cpu": cpu_class(), "hermetic": hermetic}
