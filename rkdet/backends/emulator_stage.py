"""THE writer of `model.emu.json`, what the emulated runtime double reads beside the model.

Why one writer: deploy, the bisection and the self-check install each stage the double (a real board
never gets this file): the normalisation the real .rknn has baked in (the double computes the prepared
ONNX, fed NCHW float), and, under deploy's `--emulator-npu` test control, where the simulator's outputs
it replays are. Written to a temporary file (the build folder stays read-only) and pushed verified.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rkdet.link.files import BoardLink
from rkdet.link.transfer import TransferStats, push
from rkdet.records.manifest import FedInput

SIDECAR = "model.emu.json"


def sidecar(fed: FedInput, npu: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The sidecar's content (docs/FORMATS.md): mean, std, input layout, and the NPU mode's `npu` entry."""
    prep: dict[str, Any] = {"mean": list(fed.mean), "std": list(fed.std), "input_layout": "nchw"}
    if npu is not None:
        prep["npu"] = dict(npu)
    return prep


def push_sidecar(conn: BoardLink, fed: FedInput, model_dir: str, npu: Mapping[str, Any] | None = None) -> TransferStats:
    """Write the sidecar for `fed` and push it to `model_dir`/model.emu.json (unchanged: skipped)."""
    with tempfile.TemporaryDirectory(prefix="rkdet-emu-") as tmp:
        local = Path(tmp) / SIDECAR
        local.write_text(json.dumps(sidecar(fed, npu)))
        return push(conn, local, f"{model_dir}/{SIDECAR}")
