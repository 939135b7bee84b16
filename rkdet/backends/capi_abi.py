"""The struct sizes of an rknn_api.h, and the ones each known runtime version expects (preflight's ABI check).

Why: the C runtime checks the size of every struct it is handed and refuses a mismatch with ret=-5
(a runner built against an older header meeting a newer runtime: rockchip-linux/rknn-toolkit#440). A
board's library does not say its struct sizes, and pushing the runner to ask would push before checking,
so rkdet keeps them per runtime version here: the sizes each release's own public header declares,
computed by Debian's cross compilers with rkdet's `rkdet_abi_sizes.c` (the same way `rkdet runner build`
measures the SDK's header). A version not listed is unknown: preflight then compares versions instead.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: the structs rkdet-run-c hands the runtime (rkdet_abi_sizes.c measures them)
STRUCTS = ("rknn_input_output_num", "rknn_tensor_attr", "rknn_input", "rknn_output", "rknn_sdk_version",
           "rknn_custom_string")
_SIZE = re.compile(r"^\s*\.size\s+rkdet_sizeof_(\w+)\s*,\s*(\d+)\s*$", re.M)


def abi_source() -> Path:
    """rkdet's C file whose compiled assembly says the header's struct sizes (beside the runner's source)."""
    return Path(__file__).resolve().parent.parent / "onboard" / "c" / "rkdet_abi_sizes.c"


def run_compiler(cmd: list[str], timeout_s: float, doing: str, failed: str) -> str:
    """Run one cross-compiler command; its stdout. ValueError (one line) when it times out (`doing`: what it
    was doing) or fails (`failed`, then the compiler's first error line). The runner's build and the struct
    sizes' measurement both compile through it."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ValueError(f"{cmd[0]}: no result after {timeout_s:g} s {doing}") from None
    if done.returncode != 0:
        first = next((ln for ln in done.stderr.splitlines() if "error" in ln), done.stderr.strip()[:200])
        raise ValueError(f"{failed}: {first}")
    return done.stdout


def header_struct_sizes(compiler: str, include_dir: Path, rknpu1: bool, timeout_s: float) -> dict[str, int]:
    """sizeof each of STRUCTS as `compiler` lays out the rknn_api.h in `include_dir`: compiled to assembly
    (never linked or run: a cross compiler needs no board) and read from the `.size` directives. ValueError
    (one line) when the header does not compile or a size is missing."""
    cmd = [compiler, "-std=c99", "-O2", "-S", "-o", "-", "-I", str(include_dir),
           *(["-DRKDET_RKNPU1"] if rknpu1 else []), str(abi_source())]
    out = run_compiler(cmd, timeout_s, "measuring the header's struct sizes",
                       "the header's struct sizes could not be measured")
    sizes = {name: int(size) for name, size in _SIZE.findall(out)}
    wanted = [s for s in STRUCTS if not (rknpu1 and s == "rknn_custom_string")]
    missing = [s for s in wanted if s not in sizes]
    if missing:
        raise ValueError(f"{compiler}: no size found for {', '.join(missing)} in the compiled header")
    return {s: sizes[s] for s in wanted}


@dataclass(frozen=True)
class KnownAbi:
    """The struct sizes one runtime version's own header declares, per target arch, and where they come from."""

    api: str  # rknpu2 (librknnrt) or rknpu1 (librknn_api)
    version: str  # X.Y.Z as a board's library reports it (probe.sh)
    sizes: Mapping[str, Mapping[str, int]]  # arch -> struct -> bytes
    source: str


_RKNPU2_AARCH64 = {"rknn_input_output_num": 8, "rknn_tensor_attr": 376, "rknn_input": 32, "rknn_output": 24,
                   "rknn_sdk_version": 512, "rknn_custom_string": 1024}
_RKNPU2_ARMHF = {**_RKNPU2_AARCH64, "rknn_input": 24, "rknn_output": 16}
_TOOLKIT2 = ("airockchip/rknn-toolkit2 {commit}, rknpu2/runtime/Linux/librknn_api/include/rknn_api.h "
             "(header sha256 {sha}...), sizes by aarch64-linux-gnu-gcc / arm-linux-gnueabihf-gcc 12 with "
             "rkdet_abi_sizes.c")

#: Every RKNPU2 runtime version whose own public header rkdet measured (2026-12-06). The sizes did not change
#: from 1.6.0 to 2.3.2; a version not listed (e.g. 2.5.0, whose header is not in that repository) is unknown.
KNOWN: tuple[KnownAbi, ...] = tuple(
    KnownAbi("rknpu2", version, {"aarch64": _RKNPU2_AARCH64, "armhf": _RKNPU2_ARMHF},
             _TOOLKIT2.format(commit=commit, sha=sha) + note)
    for version, commit, sha, note in (
        ("1.6.0", "2c2d03d (RKNPU2 SDK 1.6.0)", "5dd298529d6b2e43", ""),
        ("2.0.0", "77b7109 (NPU SDK V2.0.0-beta0)", "10d4c3ca43957cb3", "; 2.0.0 shipped as beta0"),
        ("2.1.0", "deaba85 (NPU SDK V2.1.0)", "eeb7260a8439e7c8", ""),
        ("2.2.0", "7efa763 (NPU SDK V2.2.0)", "eeb7260a8439e7c8", "; the header is 2.1.0's, unchanged"),
        ("2.3.0", "a8dd54d (NPU SDK V2.3.0)", "340f16c14bc86d41", ""),
        ("2.3.2", "42aa1d4 (NPU SDK V2.3.2)", "c48e11a6f41b451a", ""),
    ))


_RKNPU1_ARMHF = {"rknn_input_output_num": 8, "rknn_tensor_attr": 360, "rknn_input": 24, "rknn_output": 16,
                 "rknn_sdk_version": 512}  # no custom-string query in RKNPU1's API
_RKNPU1_AARCH64 = {**_RKNPU1_ARMHF, "rknn_input": 32, "rknn_output": 24}
_RKNPU = ("rockchip-linux/rknpu {commit}, rknn/rknn_api/librknn_api/include/rknn_api.h (header sha256 {sha}...), "
          "sizes by arm-linux-gnueabihf-gcc / aarch64-linux-gnu-gcc 12 with rkdet_abi_sizes.c -DRKDET_RKNPU1")

#: RKNPU1 (RV1126/RV1109 armhf, RK1808/RK3399Pro aarch64: librknn_api over librknn_runtime), the same way.
KNOWN_RKNPU1: tuple[KnownAbi, ...] = tuple(
    KnownAbi("rknpu1", version, {"armhf": _RKNPU1_ARMHF, "aarch64": _RKNPU1_AARCH64},
             _RKNPU.format(commit=commit, sha=sha) + note)
    for version, commit, sha, note in (
        ("1.6.0", "b010399 (NPU driver 1.6.0)", "a871339b8b0d1b47", ""),
        ("1.7.0", "f4624cb (NPU driver 1.7.0)", "a871339b8b0d1b47", "; the header is 1.6.0's, unchanged"),
        ("1.7.1", "8fc0bf8 (NPU driver 1.7.1)", "a871339b8b0d1b47", "; the header is 1.6.0's, unchanged"),
        ("1.7.3", "8e5a116 (NPU driver 1.7.3)", "704ff9bd6cc05f37", ""),
        ("1.7.5", "e0cb42b (NPU driver 1.7.5)", "704ff9bd6cc05f37", "; the header is 1.7.3's, unchanged"),
    ))


def known_abi(api: str, arch: str, version: str | None) -> tuple[Mapping[str, int], str] | None:
    """(struct sizes, source) the runtime `version` of `api` expects on `arch`; None when rkdet does not know."""
    for abi in (*KNOWN, *KNOWN_RKNPU1):
        if abi.api == api and abi.version == version and arch in abi.sizes:
            return abi.sizes[arch], abi.source
    return None


def size_mismatches(built: Mapping[str, int], expected: Mapping[str, int]) -> list[tuple[str, int | None, int]]:
    """(struct, the runner's header's size, the runtime's) for every struct whose sizes differ."""
    return [(name, built.get(name), size) for name, size in expected.items() if built.get(name) != size]
