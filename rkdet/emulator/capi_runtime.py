"""The emulated board's C runtime: rkdet's test double of librknnrt.so, and the numbers it serves.

Why: the real, cross-compiled rkdet-run-c is what tests must exercise (its argument handling, buffer
sizes, result writing), so the emulated board gives it a librknnrt.so of its own (capi_double/,
rkdet's code and ABI declarations, labelled a test double in the versions it reports) and computes
the model's outputs itself, handing them to the double through a folder (the narrow interface:
model.txt and outputs/KEY.bin, see capi_double/rknnrt_double.c). The double computes nothing.
Run it under Debian's qemu-user, invoked explicitly (`qemu_command`): no binfmt registration.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rkdet.emulator.capi_double import board_exec
from rkdet.emulator.capi_double.board_exec import DOUBLE_ENV, FORMATS, TARGETS, TENSOR_TYPES, fnv1a64

DOUBLE_DIR = Path(__file__).resolve().parent / "capi_double"
TEST_HEADER = DOUBLE_DIR / "rknn_api.h"  # rkdet's own ABI declarations (tests only)
__all__ = ["DOUBLE_ENV", "FORMATS", "TARGETS", "TENSOR_TYPES", "Tensor", "build_double", "fnv1a64", "qemu_command",
           "serve"]


@dataclass(frozen=True)
class Tensor:
    """One tensor of the emulated model as the runtime describes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    fmt: str = "nchw"
    zero_point: int = 0
    scale: float = 1.0


def build_double(arch: str, sdk: Path, *, grown_abi: bool = False, rknpu1: bool = False,
                 version: str | None = None) -> Path:
    """An SDK-shaped folder (include/rknn_api.h: rkdet's declarations; lib/librknnrt.so: the double)
    for `arch`; `grown_abi` makes both the header and the double those of a newer runtime (another
    struct size), `rknpu1` RKNPU1's librknn_api.so (4-argument rknn_init, no custom string, no core
    mask); `version` the runtime version the library carries (default 2.5.0)."""
    (sdk / "include").mkdir(parents=True, exist_ok=True)
    (sdk / "lib").mkdir(parents=True, exist_ok=True)
    header = TEST_HEADER.read_text()
    if grown_abi:  # the header of that newer runtime declares the grown struct
        header = "#define RKDET_TEST_ABI_GROWN 1\n" + header
    (sdk / "include" / "rknn_api.h").write_text(header)
    out = sdk / "lib" / board_exec.library_name(rknpu1)
    subprocess.run(board_exec.compile_command(arch, str(out), grown_abi, rknpu1, version), check=True, timeout=300,
                   capture_output=True)
    return sdk


def serve(folder: Path, model_input: Tensor, outputs: Sequence[Tensor],
          computed: Mapping[bytes, Sequence[np.ndarray]], *, cores: int = 3, custom: str = "",
          version: str | None = None, npu_us: int = 0) -> Path:
    """Leave the emulator's computation where the double reads it: the model's tensors and, for each
    input (its native bytes), every output's native array; `npu_us` (a bench control) makes each
    rknn_run take at least that long, as a real NPU's compute would."""
    (folder / "outputs").mkdir(parents=True, exist_ok=True)
    lines = board_exec.model_lines((model_input.name, model_input.dtype, model_input.fmt, model_input.shape),
                                   [(o.name, o.dtype, o.zero_point, o.scale, o.shape) for o in outputs], cores, custom,
                                   version)
    lines += [f"npu_us {int(npu_us)}"] if npu_us > 0 else []
    (folder / "model.txt").write_text("\n".join(lines) + "\n")
    for raw, arrays in computed.items():
        data = b"".join(np.ascontiguousarray(a, dtype=t.dtype).tobytes() for a, t in zip(arrays, outputs))
        (folder / "outputs" / f"{fnv1a64(raw)}.bin").write_bytes(data)
    return folder


def qemu_command(arch: str, program: Path, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The command that runs a cross-compiled program under qemu-user, explicitly (no binfmt)."""
    _, qemu, sysroot = TARGETS[arch]
    sets = [x for k, v in env.items() for x in ("-E", f"{k}={v}")]
    return [qemu, "-L", sysroot, *sets, str(program), *args]
