"""`rkdet runner build --sdk DIR`: rkdet-run-c cross-compiled against the rknn_api.h of the user's SDK.

Why built here and never shipped: Rockchip's header and runtime are under the SDK's licence, so rkdet
ships neither; the user's SDK provides both. The runtime checks struct sizes (ret=-5 when a runner
built against an older header meets a newer runtime), so a built runner is keyed by the header's
sha256, the target architecture and the runner's source, cached under that key, and rebuilt when any
of them changes. The build is Debian's cross compiler (gcc-aarch64-linux-gnu, gcc-arm-linux-gnueabihf)
run with an argument list (never a shell) and a timeout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from rkdet.backends.capi_abi import abi_source, header_struct_sizes, known_abi, run_compiler, size_mismatches
from rkdet.errors import BoardError, InputError, RkdetError
from rkdet.records.io import write_atomic

#: target architecture -> (cross compiler, its sysroot for qemu-user -L)
ARCHES: dict[str, tuple[str, str]] = {
    "aarch64": ("aarch64-linux-gnu-gcc", "/usr/aarch64-linux-gnu"),
    "armhf": ("arm-linux-gnueabihf-gcc", "/usr/arm-linux-gnueabihf"),
}
SDK_HINT = "pass --sdk DIR (the Rockchip SDK folder holding rknn_api.h and librknnrt.so; rkdet ships neither)"
BUILD_RECORD = "runner.json"
COMPILE_TIMEOUT_S = 300
_MAX_SDK_WALK = 20000  # files looked at when finding the header in a large SDK tree


class RunnerBuildError(RkdetError):
    """The cross compiler failed or is missing (exit 3: the workstation's tools, not the input)."""

    exit_code = 3


@dataclass(frozen=True)
class BuiltRunner:
    """A cross-compiled rkdet-run-c and what it was built for (preflight shows these)."""

    path: Path
    arch: str
    header_sha256: str
    source_sha256: str
    key: str
    api: str = "rknpu2"  # rknpu2 (librknnrt) or rknpu1 (librknn_api: RV1126/RV1109)
    runtime_version: str | None = None  # the version the SDK's runtime library carries: what the header is of
    struct_sizes: Mapping[str, int] | None = field(default=None, hash=False)  # sizeof per struct (capi_abi.STRUCTS)

    def describe(self) -> str:
        """What preflight says it was built for."""
        return (f"rkdet-run-c for {self.arch} ({self.api}), built against rknn_api.h sha256 {self.header_sha256[:16]} "
                f"of runtime {self.runtime_version or 'of unknown version'}")


_VERSION = re.compile(rb"(?:librknnrt|librknn_runtime|librknn_api) version:? ?([0-9]+\.[0-9]+\.[0-9]+)")
_TEXT_VERSION = re.compile(r"([0-9]+\.[0-9]+\.[0-9]+)")


def library_version(lib: Path) -> str | None:
    """The X.Y.Z in a runtime library's "librknnrt version: X.Y.Z (...)" string (what probe.sh reads on a
    board), or None; read bounded (a runtime library is a few MiB)."""
    try:
        with open(lib, "rb") as handle:
            found = _VERSION.search(handle.read(64 << 20))
    except OSError:
        return None
    return found.group(1).decode("ascii") if found else None


def check_board_runtime(built: BuiltRunner, board_runtime: str | None, host: str) -> str | None:
    """Preflight, before any push: the runner's header against the board's runtime. The runtime checks struct
    sizes (ret=-5, rockchip-linux/rknn-toolkit#440) and a board's library does not say them, so the sizes the
    board's runtime version expects come from rkdet's table (capi_abi.KNOWN): a runner whose recorded sizes
    differ is refused (BoardError, one line naming the struct, both sizes and the table's source). Where the
    table does not know the version (or the runner recorded no sizes), the runtime version its header came
    with is compared instead, and a different one is refused. None when it matches; else the warning to keep
    (sizes equal across versions, or nothing checkable)."""
    found = _TEXT_VERSION.search(board_runtime or "")
    board = found.group(1) if found else None
    expected = known_abi(built.api, built.arch, board) if board else None
    if expected is not None and built.struct_sizes:
        sizes, source = expected
        differ = size_mismatches(built.struct_sizes, sizes)
        if differ:
            name, ours, theirs = differ[0]
            raise BoardError(f"{host}: rkdet-run-c was built against an rknn_api.h (sha256 {built.header_sha256[:16]}, "
                             f"runtime {built.runtime_version or 'unknown'}) whose {name} is {ours} bytes, but the "
                             f"board's runtime {board} expects {theirs} ({len(differ)} struct(s) differ; {source}): it "
                             f"would refuse them (ret=-5); run `rkdet runner build --sdk DIR --arch {built.arch}` with "
                             f"the SDK of runtime {board}")
        if built.runtime_version != board:
            return (f"rkdet-run-c: built against the header of runtime {built.runtime_version or 'of unknown version'}, "
                    f"the board runs {board}: their struct sizes are equal (rkdet's table), so the runtime accepts it")
        return None
    if board is None or built.runtime_version is None:
        return (f"rkdet-run-c: not checked that its header ({built.runtime_version or 'runtime version unknown'}) "
                f"is the board's runtime's ({board or 'version unknown'}); a struct-size mismatch fails as ret=-5")
    if board != built.runtime_version:
        raise BoardError(f"{host}: rkdet-run-c was built against the rknn_api.h of runtime {built.runtime_version} "
                         f"(sha256 {built.header_sha256[:16]}) but the board runs {board}, whose struct sizes rkdet "
                         f"does not know: they may differ (ret=-5); run `rkdet runner build --sdk DIR --arch "
                         f"{built.arch}` with the SDK of runtime {board}")
    return None


def runner_source() -> Path:
    """rkdet-run-c's C source, shipped in the package's board-side area."""
    return Path(__file__).resolve().parent.parent / "onboard" / "c" / "rkdet_run_c.c"


RUNNER_INCLUDES = ("rkdet_sha256.h",)  # rkdet's own headers the runner includes from beside its source
BUILD_SOURCES = (*RUNNER_INCLUDES, abi_source().name)  # and what else the build compiles (the struct sizes)
# THE compile flags of rkdet-run-c (part of the build key: a change rebuilds it); -pthread: its recorder thread
RUNNER_FLAGS = ("-std=c99", "-O2", "-Wall", "-Wno-misleading-indentation", "-pthread")


def runner_source_sha256() -> str:
    """sha256 of the runner's source and of rkdet's files the build compiles with it: a change rebuilds it."""
    source = runner_source()
    digest = hashlib.sha256(source.read_bytes())
    for name in BUILD_SOURCES:
        digest.update(b"\0" + name.encode() + b"\0" + (source.parent / name).read_bytes())
    return digest.hexdigest()


def _one(found: list[Path], what: str, sdk: Path, arch: str) -> Path:
    if not found:
        raise InputError(f"{sdk}: no {what} found; {SDK_HINT}")
    if len(found) == 1:
        return found[0]
    tags = {"aarch64": ("aarch64", "arm64"), "armhf": ("armhf", "armeabi", "arm-linux", "armv7")}[arch]
    preferred = [p for p in found if any(t in str(p).lower() for t in tags)]
    if len(preferred) == 1:
        return preferred[0]
    raise InputError(f"{sdk}: {len(found)} {what} files ({', '.join(str(p) for p in found[:4])}); "
                     f"pass --sdk the folder that holds the one for {arch}")


RKNPU2_LIB, RKNPU1_LIB = "librknnrt.so", "librknn_api.so"


def find_sdk_files(sdk: Path, arch: str) -> tuple[Path, Path, bool]:
    """The SDK's rknn_api.h, the folder of its runtime library for `arch`, and whether that is RKNPU1's
    (librknn_api.so: RV1126/RV1109, whose API differs); one line when either is missing."""
    if not sdk.is_dir():
        raise InputError(f"{sdk}: SDK folder not found; {SDK_HINT}")
    headers: list[Path] = []
    libs: list[Path] = []
    legacy: list[Path] = []
    for seen, (root, dirs, files) in enumerate(os.walk(sdk, followlinks=False)):
        if seen > _MAX_SDK_WALK:
            break
        dirs.sort()
        headers += [Path(root) / "rknn_api.h"] if "rknn_api.h" in files else []
        libs += [Path(root) / RKNPU2_LIB] if RKNPU2_LIB in files else []
        legacy += [Path(root) / RKNPU1_LIB] if RKNPU1_LIB in files else []
    header = _one(headers, "rknn_api.h", sdk, arch)
    if not libs and legacy:
        return header, _one(legacy, RKNPU1_LIB, sdk, arch).parent, True
    return header, _one(libs, RKNPU2_LIB, sdk, arch).parent, False


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_key(header: Path, arch: str, runtime_version: str | None = None) -> tuple[str, str, str]:
    """(key, header sha256, source sha256): what a built runner is cached and found by (the runtime version
    its SDK's library carries too: what preflight compares with the board's; and RUNNER_FLAGS)."""
    header_sha, source_sha = _sha256(header), runner_source_sha256()
    flags = " ".join(RUNNER_FLAGS)
    key = hashlib.sha256(f"{header_sha}|{arch}|{source_sha}|{runtime_version}|{flags}".encode()).hexdigest()[:24]
    return key, header_sha, source_sha


def build_runner(sdk: Path, arch: str, cache: Path) -> BuiltRunner:
    """rkdet-run-c for `arch` against `sdk`'s header, from the cache when built before, else compiled."""
    if arch not in ARCHES:
        raise InputError(f"--arch {arch!r}: expected {' or '.join(ARCHES)}")
    header, libdir, rknpu1 = find_sdk_files(sdk, arch)
    version = library_version(libdir / (RKNPU1_LIB if rknpu1 else RKNPU2_LIB))
    key, header_sha, source_sha = build_key(header, arch, version)
    folder = cache / f"{arch}-{key}"
    built = BuiltRunner(folder / "rkdet-run-c", arch, header_sha, source_sha, key, "rknpu1" if rknpu1 else "rknpu2",
                        version)
    if built.path.is_file() and (folder / BUILD_RECORD).is_file():
        return replace(built, struct_sizes=_recorded_sizes(folder / BUILD_RECORD))
    compiler = ARCHES[arch][0]
    if shutil.which(compiler) is None:
        raise RunnerBuildError(f"{compiler}: not installed; apt-get install gcc-{compiler[:-4]} (see .ci/setup)")
    try:  # what the runtime will check, as this compiler lays the header out (recorded; preflight compares)
        sizes = header_struct_sizes(compiler, header.parent, rknpu1, COMPILE_TIMEOUT_S)
    except ValueError as err:
        raise RunnerBuildError(f"{header}: {err}") from None
    built = replace(built, struct_sizes=sizes)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".rkdet-run-c.{os.getpid()}"
    cmd = [compiler, *RUNNER_FLAGS, "-I", str(header.parent),
           *(["-DRKDET_RKNPU1"] if rknpu1 else []), "-o", str(tmp), str(runner_source()), "-L", str(libdir),
           "-lrknn_api" if rknpu1 else "-lrknnrt"]
    try:
        run_compiler(cmd, COMPILE_TIMEOUT_S, "building rkdet-run-c",
                     f"{header}: rkdet-run-c does not compile against this header")
    except ValueError as err:
        tmp.unlink(missing_ok=True)
        raise RunnerBuildError(str(err)) from None
    os.replace(tmp, built.path)
    record = {"schema": "rkdet.runner-build/1", "arch": arch, "api": "rknpu1" if rknpu1 else "rknpu2", "header": header.name, "header_sha256": header_sha,
              "runtime_version": version, "struct_sizes": sizes,
              "source_sha256": source_sha, "key": key, "compiler": compiler}
    write_atomic(folder / BUILD_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return built


def _recorded_sizes(record: Path) -> dict[str, int] | None:
    """runner.json's struct_sizes when well formed (names to positive ints), else None (an older build)."""
    try:
        doc = json.loads(record.read_text()[:65536])
    except (OSError, ValueError):
        return None
    sizes = doc.get("struct_sizes") if isinstance(doc, dict) else None
    if not isinstance(sizes, dict) or not sizes:
        return None
    good = {k: v for k, v in sizes.items() if isinstance(k, str) and type(v) is int and 0 < v < 1 << 20}
    return good if len(good) == len(sizes) else None


def default_cache() -> Path:
    """Where built runners are kept: $RKDET_RUNNER_CACHE, else ~/.cache/rkdet/runners."""
    env = os.environ.get("RKDET_RUNNER_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rkdet" / "runners"


def arch_of_soc(rknpu1: bool) -> str:
    """The architecture a board's runner is built for: RKNPU1 SoCs (RV1126/RV1109) run armhf, RKNPU2 aarch64."""
    return "armhf" if rknpu1 else "aarch64"


def built_runner(arch: str, cache: Path | None = None) -> BuiltRunner:
    """The runner `rkdet runner build` made last for `arch`; one line saying what to run when there is none."""
    cache = cache or default_cache()
    found: list[tuple[float, Path, dict]] = []
    for record in sorted(cache.glob(f"{arch}-*/{BUILD_RECORD}")) if cache.is_dir() else ():
        try:
            doc = json.loads(record.read_text()[:65536])
        except (OSError, ValueError):
            continue
        program = record.parent / "rkdet-run-c"
        if isinstance(doc, dict) and doc.get("arch") == arch and program.is_file():
            found.append((record.stat().st_mtime, program, doc))
    if not found:
        raise InputError(f"--backend rknn_c: no rkdet-run-c built for {arch} in {cache}; "
                         f"run `rkdet runner build --sdk DIR --arch {arch}` ({SDK_HINT})")
    _, program, doc = max(found, key=lambda item: item[0])
    version = doc.get("runtime_version")
    return BuiltRunner(program, arch, str(doc.get("header_sha256")), str(doc.get("source_sha256")), str(doc.get("key")),
                       str(doc.get("api", "rknpu2")),
                       version if isinstance(version, str) and _TEXT_VERSION.fullmatch(version) else None,
                       _recorded_sizes(program.parent / BUILD_RECORD))
