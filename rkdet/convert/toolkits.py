"""Toolkit adapters: which toolkit builds which platform, whether it is installed, and its job options.

rknn-toolkit2 2.5.0 builds RK3562/66/68/76/88 and RV1126B. It rejects RV1126 (a different chip from
RV1126B), which only the legacy RKNN-Toolkit 1.7.x can build: that toolkit is not on PyPI for current
Pythons, so it runs in its own interpreter given in the config (`target.toolkit1_python`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.config import TOOLKIT1_PLATFORMS, RkdetConfig
from rkdet.errors import ConversionError, InputError

WORKER_DIR = Path(__file__).resolve().parent
TOOLKIT2_PYTHON_ENV = "RKDET_TOOLKIT2_PYTHON"

_VERSION_PROBE = (
    "import importlib.metadata as m, sys\n"
    "try:\n    print(m.version(sys.argv[1]))\n"
    "except m.PackageNotFoundError:\n    sys.exit(3)\n"
)
_VERSION_PROBE_PY36 = (  # importlib.metadata is 3.8+; toolkit1 Pythons are 3.6/3.7
    "import sys, pkg_resources\n"
    "try:\n    print(pkg_resources.get_distribution(sys.argv[1]).version)\n"
    "except Exception:\n    sys.exit(3)\n"
)


@dataclass(frozen=True)
class Toolkit:
    """A toolkit as found on this machine: which interpreter runs it, which worker script, its version."""

    name: str  # "rknn-toolkit2" | "rknn-toolkit"
    python: str
    worker: Path
    version: str
    has_simulator: bool


def _installed_version(python: str, dist: str, probe: str) -> str | None:
    try:
        proc = subprocess.run([python, "-c", probe, dist], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def find_toolkit(platform: str, cfg: RkdetConfig) -> Toolkit:
    """The toolkit that builds `platform`, or a one-line error saying what to install."""
    if platform in TOOLKIT1_PLATFORMS:
        python = cfg.target.toolkit1_python
        hint = (f"{platform} needs the legacy RKNN-Toolkit 1.7.x (rknn-toolkit2 rejects it; RV1126B is a different "
                "chip, supported by toolkit2 as rv1126b): install rknn-toolkit 1.7.x in a Python 3.6/3.7 environment "
                "and set target.toolkit1_python to that python")
        if python is None:
            raise ConversionError(f"cannot build {platform}: {hint}")
        if not Path(python).exists():
            raise ConversionError(f"cannot build {platform}: target.toolkit1_python {python} does not exist; {hint}")
        version = _installed_version(str(python), "rknn-toolkit", _VERSION_PROBE_PY36)
        if version is None:
            raise ConversionError(f"cannot build {platform}: rknn-toolkit is not installed for {python}; {hint}")
        return Toolkit("rknn-toolkit", str(python), WORKER_DIR / "toolkit1_worker.py", version, has_simulator=False)
    python = os.environ.get(TOOLKIT2_PYTHON_ENV) or sys.executable
    if cfg.toolkit.version is not None and cfg.toolkit.version != _installed_version(python, "rknn-toolkit2",
                                                                                     _VERSION_PROBE):
        from rkdet.convert.toolkit_env import ensure  # a pinned per-version environment (created on first use)

        python = str(ensure(cfg.toolkit.version).python)
    version = _installed_version(python, "rknn-toolkit2", _VERSION_PROBE)
    if version is not None and cfg.toolkit.version is not None and version != cfg.toolkit.version:
        raise ConversionError(f"{python}: its rknn-toolkit2 is {version}, not the {cfg.toolkit.version} its environment "
                              "was made for; delete that folder and build again")
    if version is None:
        raise ConversionError(f"rknn-toolkit2 is not installed for {python}: run `bash .ci/setup` (or "
                              "`pip install --no-deps rknn-toolkit2==2.5.0` after requirements/host.lock.txt)")
    return Toolkit("rknn-toolkit2", python, WORKER_DIR / "toolkit2_worker.py", version, has_simulator=True)


def toolkit2_options(cfg: RkdetConfig, platform: str, custom_string: str | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """(config() kwargs, build() kwargs, do_quantization): every option explicit, from rkdet's config.
    `custom_string`: what the `.rknn` carries (convert passes `manifest.embedded_custom_string`, the
    user's `toolkit.custom_string` plus the model fingerprint); None: the user's alone."""
    tk, q, pp = cfg.toolkit, cfg.quantize, cfg.preprocess
    config = {
        "mean_values": [list(pp.mean)],
        "std_values": [list(pp.std)],
        "quantized_dtype": q.dtype,
        "quantized_algorithm": q.algorithm,
        "quantized_method": q.method,
        "quantized_hybrid_level": tk.quantized_hybrid_level,
        "target_platform": platform,
        "quant_img_RGB2BGR": tk.quant_img_RGB2BGR,
        "float_dtype": tk.float_dtype,
        "optimization_level": tk.optimization_level,
        "custom_string": tk.custom_string if custom_string is None else custom_string,
        "remove_weight": tk.remove_weight,
        "compress_weight": tk.compress_weight,
        "inputs_yuv_fmt": None,
        "single_core_mode": tk.single_core_mode,
        "dynamic_input": None,
        "model_pruning": tk.model_pruning,
        "op_target": None,
        "quantize_weight": tk.quantize_weight,
        "remove_reshape": tk.remove_reshape,
        "sparse_infer": tk.sparse_infer,
        "mini_rknn": tk.mini_rknn,
        "enable_flash_attention": tk.enable_flash_attention,
        "auto_hybrid_cos_thresh": tk.auto_hybrid_cos_thresh,
        "auto_hybrid_euc_thresh": None,
        "memory_plan_strategy": tk.memory_plan_strategy,
        "compute_order": tk.compute_order,
        "compiler_control_file": None,
    }
    build = {"rknn_batch_size": tk.rknn_batch_size, "auto_hybrid": tk.auto_hybrid}
    return config, build, q.enabled and not q.force_fp16


def toolkit1_options(cfg: RkdetConfig, platform: str) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """Options for the legacy RKNN-Toolkit 1.7.x API (asymmetric uint8, channel order via reorder)."""
    q, pp = cfg.quantize, cfg.preprocess
    if q.float_layers:
        raise InputError(f"quantize.float_layers (hybrid quantization) is not available for {platform} "
                         "(RKNN-Toolkit 1.x): remove it")
    if q.dtype != "w8a8":
        raise InputError(f"quantize.dtype {q.dtype} is not available for {platform} (RKNN-Toolkit 1.x): use w8a8")
    config = {
        "mean_values": [list(pp.mean)],
        "std_values": [list(pp.std)],
        "reorder_channel": "0 1 2",
        "target_platform": [platform],
        "quantized_dtype": "asymmetric_affine-u8",
        "quantized_algorithm": q.algorithm if q.algorithm != "kl_divergence" else "kl_divergence",
        "optimization_level": cfg.toolkit.optimization_level,
        "batch_size": 1,
        "epochs": -1,
    }
    return config, {"pre_compile": False}, q.enabled and not q.force_fp16


def job_options(tk: Toolkit, cfg: RkdetConfig, platform: str, custom_string: str | None = None) -> dict[str, Any]:
    """Every option the toolkit job is given for `platform` (`config`, `build`, `do_quantization`,
    `float_layers`): one definition for the job and for the model fingerprint (rkdet.convert.identity),
    which takes them with the user's custom string (`custom_string` None) and rkdet's own added after."""
    if tk.name == "rknn-toolkit2":
        config, build, do_quantization = toolkit2_options(cfg, platform, custom_string)
    else:
        config, build, do_quantization = toolkit1_options(cfg, platform)
    return {"config": config, "build": build, "do_quantization": do_quantization, "float_layers": float_layers_job(cfg)}


def float_layers_job(cfg: RkdetConfig) -> list[str]:
    """The job's `float_layers`: RKNN layers built in float16 by hybrid quantization (step1 -> cfg -> step2)
    instead of `build()`; [] builds as always. One definition for convert's and layers' jobs."""
    return list(cfg.quantize.float_layers) if cfg.quantize.enabled and not cfg.quantize.force_fp16 else []


def installed_toolkit2() -> Toolkit | None:
    """The default rknn-toolkit2 (as `find_toolkit` picks it for a toolkit2 platform), or None when absent:
    for callers that only want to ask it something (import-rknn's simulator probe)."""
    python = os.environ.get(TOOLKIT2_PYTHON_ENV) or sys.executable
    version = _installed_version(python, "rknn-toolkit2", _VERSION_PROBE)
    return None if version is None else Toolkit("rknn-toolkit2", python, WORKER_DIR / "toolkit2_worker.py", version,
                                                has_simulator=True)
