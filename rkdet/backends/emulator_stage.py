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


def sidecar(fed: FedInput, npu: Mapping[str, Any] | None = None, *, int8emu: str | None = None,
            cut: bool | None = None) -> dict[str, Any]:
    """The sidecar's content (docs/FORMATS.md): mean, std, input layout, the NPU mode's `npu` entry, the
    INT8 emulation's file name (what the emulated NPU computes by default) and, for a bisection cut,
    `cut` (a fault tensor past the cut's end is then no error)."""
    prep: dict[str, Any] = {"mean": list(fed.mean), "std": list(fed.std), "input_layout": "nchw"}
    if npu is not None:
        prep["npu"] = dict(npu)
    if int8emu is not None:
        prep["int8emu"] = int8emu
    if cut is not None:
        prep["cut"] = cut
    return prep


def push_int8_emulation(conn: BoardLink, folder: Path, model_dir: str, progress: bool = False,
                        sha256: str | None = None) -> tuple[TransferStats, str | None]:
    """The build's (or cut's) INT8 emulation beside the model when it has one, checked a regular file
    inside the folder (never a link followed) and, when the manifest recorded one, its sha256; its file
    name for the sidecar, or None."""
    from rkdet.records.build_files import regular_file
    from rkdet.records.manifest import INT8_EMULATION_FILE

    if not (Path(folder) / INT8_EMULATION_FILE).exists():
        return TransferStats(), None
    local = regular_file(Path(folder), INT8_EMULATION_FILE, sha256, "int8_emulation.sha256")
    return push(conn, local, f"{model_dir}/{INT8_EMULATION_FILE}", progress=progress), INT8_EMULATION_FILE


def push_sidecar(conn: BoardLink, fed: FedInput, model_dir: str, npu: Mapping[str, Any] | None = None, *,
                 int8emu: str | None = None, cut: bool | None = None) -> TransferStats:
    """Write the sidecar for `fed` and push it to `model_dir`/model.emu.json (unchanged: skipped)."""
    with tempfile.TemporaryDirectory(prefix="rkdet-emu-") as tmp:
        local = Path(tmp) / SIDECAR
        local.write_text(json.dumps(sidecar(fed, npu, int8emu=int8emu, cut=cut)))
        return push(conn, local, f"{model_dir}/{SIDECAR}")
