"""Preflight: does this board fit this build? Checked before anything on the board changes.

Why each check: an RK3568 cannot run a model compiled for RK3588; the known incompatibilities of the
board's stack with the build (`rkdet/boardinfo/compat.py`: an old librknnrt refuses model format 6, a driver
older than the runtime asks for, RV1126 needs the legacy runtime) block with their fix or warn; no Python or no rknnlite means the runner cannot start; and a full disk
would fail halfway through a run of thousands of inferences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rkdet.backends.descriptor import ROW_LEGACY_NPU, ROW_NPU_STACK, ROW_RUNTIME_IMPORT
from rkdet.backends.registry import backend as descriptor
from rkdet import socs
from rkdet.boardinfo import compat
from rkdet.records.build import BuildInfo
from rkdet.boardinfo.lock import probe_lock
from rkdet.records.probe import ProbeReport
from rkdet.errors import BoardError

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class BoardFit:
    """What preflight learned: labels for the report, and warnings that did not stop the run."""

    soc: str
    runtime_version: str | None
    emulated: bool
    warnings: tuple[str, ...]


def same_npu(soc: str, platform: str) -> bool:
    """Does a model compiled for `platform` run on this SoC's NPU (the rule preflight applies: rkdet.socs)?"""
    return socs.same_npu(soc, platform)


def _version(text: str | None) -> tuple[int, int, int] | None:
    match = _VERSION.search(text or "")
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)) if match else None


def stack_facts(probe: ProbeReport, build: BuildInfo) -> compat.StackFacts:
    """The versions the known-incompatibility table is checked against (board probe + the build's .rknn)."""
    return compat.StackFacts(soc=probe.soc, runtime_library=probe.runtime_library,
                             runtime=compat.version_of(probe.runtime_version),
                             driver=compat.version_of(probe.rknpu_version),
                             model_format=build.format_version or None,
                             model_toolkit=compat.version_of(build.toolkit_version))


def check_board(probe: ProbeReport, build: BuildInfo, *, host: str, backend: str, emulated: bool,
                need_kb: int) -> BoardFit:
    """Raise BoardError (exit 3) naming the host and the mismatch; return the fit otherwise."""
    platform = build.platform
    rows = descriptor(backend).preflight_rows
    if ROW_LEGACY_NPU in rows and socs.is_rknpu1(probe.soc):
        for finding in compat.check(stack_facts(probe, build)):  # the legacy-runtime rows say more than
            if finding.decided and finding.row.severity == "block":  # "board is rv1126, build targets ..."
                raise BoardError(f"{host}: {finding.message}")
    if not probe.soc:
        raise BoardError(f"{host}: cannot tell the SoC (no rockchip compatible string in the device tree); "
                         f"the build targets {platform}")
    if not socs.same_npu(probe.soc, platform):
        raise BoardError(f"{host}: board is {probe.soc} but the build targets {platform}; "
                         f"convert for {probe.soc} (rkdet convert --target {probe.soc}) or pick another board")
    warnings: list[str] = []
    if ROW_NPU_STACK in rows:
        runtime = _version(probe.runtime_version)
        toolkit = _version(build.toolkit_version)
        if runtime is None:
            raise BoardError(f"{host}: no RKNN runtime library found (librknnrt.so); install the runtime that "
                             f"matches rknn-toolkit2 {build.toolkit_version or '?'}")
        for finding in compat.check(stack_facts(probe, build)):
            if finding.decided and finding.row.severity == "block":
                raise BoardError(f"{host}: {finding.message}")
            warnings.append(finding.message)
        if toolkit and runtime[:2] < toolkit[:2]:
            warnings.append(f"librknnrt {'.'.join(map(str, runtime))} is older than the toolkit "
                            f"{'.'.join(map(str, toolkit))} that built the model; Rockchip recommends matching versions")
    if ROW_RUNTIME_IMPORT in rows and not probe.rknnlite:
        raise BoardError(f"{host}: python3 cannot import rknnlite; install rknn-toolkit-lite2 on the board "
                         "(or run with --backend onnxruntime)")
    if not descriptor(backend).native_runner and not probe.python_version:
        raise BoardError(f"{host}: no python3 on the board; the runner needs Python >= 3.6 with numpy")
    if probe.work_dir_free_kb is not None and probe.work_dir_free_kb < need_kb:
        raise BoardError(f"{host}: not enough disk in the work dir: {probe.work_dir_free_kb // 1024} MiB free, "
                         f"{need_kb // 1024 + 1} MiB needed; free space or pass --workdir elsewhere")
    if probe.pinned_state and probe_lock(probe.records, host).status != "held":  # held: the running job's own state
        warnings.append("a pin state from an earlier run was left on the board; pin keeps its original values "
                        "and restore will bring them back")
    return BoardFit(probe.soc, probe.runtime_version, emulated, tuple(warnings))
