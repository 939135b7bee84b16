"""The emulated board's C runtime: rkdet's test double of librknnrt.so, and the numbers it serves.

Why: the real, cross-compiled rkdet-run-c is what tests must exercise (its argument handling, buffer
sizes, result writing), so the emulated board gives it a librknnrt.so of its own (capi_double/,
rkdet's code and ABI declarations, labelled a test double in the versions it reports) and computes
the model's outputs itself, handing them to the double through a folder (the narrow interface:
model.txt and outputs/KEY.bin, see capi_double/rknnrt_double.c). The double computes nothing.
Run it under Debian's qemu-user, invoked explicitly (`qemu_command`): no binfmt registration.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DOUBLE_DIR = Path(__file__).resolve().parent / "capi_double"
TEST_HEADER = DOUBLE_DIR / "rknn_api.h"  # rkdet's own ABI declarations (tests only)
#: architecture -> (cross compiler, qemu-user program, sysroot)
TARGETS = {"aarch64": ("aarch64-linux-gnu-gcc", "qemu-aarch64", "/usr/aarch64-linux-gnu"),
           "armhf": ("arm-linux-gnueabihf-gcc", "qemu-arm", "/usr/arm-linux-gnueabihf")}
#: rknn_tensor_type / rknn_tensor_format numbers of the documented ABI
TENSOR_TYPES = {"float32": 0, "float16": 1, "int8": 2, "uint8": 3, "int16": 4, "uint16": 5, "int32": 6}
FORMATS = {"nchw": 0, "nhwc": 1}
DOUBLE_ENV = "RKDET_RKNN_DOUBLE"  # where the double finds the emulator's folder


@dataclass(frozen=True)
class Tensor:
    """One tensor of the emulated model as the runtime describes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    fmt: str = "nchw"
    zero_point: int = 0
    scale: float = 1.0


def build_double(arch: str, sdk: Path, *, grown_abi: bool = False, rknpu1: bool = False) -> Path:
    """An SDK-shaped folder (include/rknn_api.h: rkdet's declarations; lib/librknnrt.so: the double)
    for `arch`; `grown_abi` builds the double as a runtime of a newer header (another struct size),
    `rknpu1` as RKNPU1's librknn_api.so (4-argument rknn_init, no custom string, no core mask)."""
    compiler = TARGETS[arch][0]
    (sdk / "include").mkdir(parents=True, exist_ok=True)
    (sdk / "lib").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(TEST_HEADER, sdk / "include" / "rknn_api.h")
    cmd = [compiler, "-std=c99", "-O2", "-fPIC", "-shared", "-Wno-misleading-indentation", "-I", str(DOUBLE_DIR),
           *(["-DRKDET_TEST_ABI_GROWN"] if grown_abi else []), *(["-DRKDET_RKNPU1"] if rknpu1 else []),
           "-o", str(sdk / "lib" / ("librknn_api.so" if rknpu1 else "librknnrt.so")), str(DOUBLE_DIR / "rknnrt_double.c")]
    subprocess.run(cmd, check=True, timeout=300, capture_output=True)
    return sdk


def fnv1a64(data: bytes) -> str:
    """The double's key for an input: FNV-1a 64 of the input's bytes in the model's own type and layout."""
    h = 1469598103934665603
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def serve(folder: Path, model_input: Tensor, outputs: Sequence[Tensor],
          computed: Mapping[bytes, Sequence[np.ndarray]], *, cores: int = 3, custom: str = "",
          version: str | None = None) -> Path:
    """Leave the emulator's computation where the double reads it: the model's tensors and, for each
    input (its native bytes), every output's native array."""
    (folder / "outputs").mkdir(parents=True, exist_ok=True)
    lines = [f"input {model_input.name} {TENSOR_TYPES[model_input.dtype]} {FORMATS[model_input.fmt]} "
             f"{len(model_input.shape)} {' '.join(map(str, model_input.shape))}"]
    lines += [f"output {t.name} {TENSOR_TYPES[t.dtype]} {t.zero_point} {t.scale!r} {len(t.shape)} "
              f"{' '.join(map(str, t.shape))}" for t in outputs]
    lines += [f"cores {cores}"] + ([f"custom {custom}"] if custom else []) + ([f"version {version}"] if version else [])
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
