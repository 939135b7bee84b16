"""probe.sh records the software stack: kernel, rknpu driver (found by existence in debugfs, sysfs or the
kernel log, with its source), librknnrt version string, Python, numpy and rknn-toolkit-lite's version."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from rkdet.boardinfo.scripts import run_script_locally_full
from rkdet.records.probe import parse_probe
from rkdet.emulator.fake_tree import build_fake_tree
from rkdet.emulator.sshd import RUNTIME_DOUBLE
from rkdet.emulator.socs import RK3568, RK3588

# The board's python3 with the emulated rknnlite importable (as an emulated board's session has it).
PY_ENV = {"RKDET_PYTHON": sys.executable, "PYTHONPATH": str(RUNTIME_DOUBLE)}


@pytest.mark.parametrize(("nodes", "source", "version"), [
    (("debugfs", "sysfs", "dmesg"), "debugfs", "RKNPU driver: v0.9.8"),
    (("sysfs", "dmesg"), "sysfs", "0.9.8"),
    (("dmesg",), "dmesg", "rknpu 0.9.8"),
])
def test_driver_version_found_by_existence(nodes, source, version, shell: str, tmp_path: Path) -> None:
    root = build_fake_tree(dataclasses.replace(RK3588, rknpu_version_nodes=nodes), tmp_path / "board")
    run = run_script_locally_full("probe", root, tmp_path / "state", shell=shell, env=PY_ENV)
    rep = parse_probe(run.records)
    assert rep.ok, run.stderr
    assert (rep.rknpu_version, rep.rknpu_source) == (version, source)


def test_no_driver_version_anywhere_is_missing_with_what_was_tried(shell: str, tmp_path: Path) -> None:
    root = build_fake_tree(dataclasses.replace(RK3568, rknpu_version_nodes=()), tmp_path / "board")
    os.remove(root / "sys/kernel/debug/rknpu/load")
    rep = parse_probe(run_script_locally_full("probe", root, tmp_path / "state", shell=shell, env=PY_ENV).records)
    assert rep.ok and rep.rknpu_version is None and rep.rknpu_source is None
    why = rep.missing["rknpu"]
    assert "debugfs" in why and "/sys/module/rknpu/version" in why and "kernel log" in why


def test_versions_of_the_whole_stack(shell: str, tmp_path: Path) -> None:
    import numpy

    prof = dataclasses.replace(RK3588, kernel="6.1.43-rk2312",
                               runtime_version="librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)")
    root = build_fake_tree(prof, tmp_path / "board")
    rep = parse_probe(run_script_locally_full("probe", root, tmp_path / "state", shell=shell, env=PY_ENV).records)
    assert rep.kernel == "6.1.43-rk2312"
    assert rep.runtime_version == "librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)"
    assert rep.python_version == "%d.%d.%d" % sys.version_info[:3]
    assert rep.numpy_version == numpy.__version__
    assert rep.rknnlite and rep.rknnlite_version == "2.5.0+rkdet.emulated"  # the double says what it is


def test_without_rknnlite_its_version_is_null(shell: str, tmp_path: Path) -> None:
    root = build_fake_tree(RK3588, tmp_path / "board")
    rep = parse_probe(run_script_locally_full("probe", root, tmp_path / "state", shell=shell,
                                            env={"RKDET_PYTHON": sys.executable}).records)
    assert rep.rknnlite is False and rep.rknnlite_version is None and rep.numpy_version


def test_the_stack_in_one_line(tmp_path: Path) -> None:
    from rkdet.boardinfo.stack import BoardStack
    from rkdet.records.run_info import RunInfo

    root = build_fake_tree(dataclasses.replace(RK3588, rknpu_version_nodes=("sysfs",)), tmp_path / "board")
    rep = parse_probe(run_script_locally_full("probe", root, tmp_path / "state", env=PY_ENV).records)
    run = {"stack": {"python": "3.11.7", "numpy": "1.26.4", "rknn_toolkit_lite": "2.5.0", "model_toolkit": "2.5.0",
                     "sdk_version": "RKNN VERSION: API: librknnrt version: 2.5.0 DRV: RKNPU driver: v0.9.8"}}
    stack = BoardStack.from_evidence(rep, RunInfo.from_json(run, "run.json"), "9.9.9")
    line = stack.line()
    assert line == (f"stack: kernel {RK3588.kernel} · rknpu driver 0.9.8 (sysfs) · librknnrt 2.5.0 "
                    "(be611e2c@2026-09-29T14:50:11) · rknn-toolkit-lite 2.5.0 · Python 3.11.7 · numpy 1.26.4 · "
                    "model built by toolkit 2.5.0")
    bare = BoardStack.from_evidence(dataclasses.replace(rep, kernel="6.1\x1b[2J", rknpu_version=None,
                                                        rknpu_source=None), None, None)
    assert "kernel 6.1\\x1b[2J" in bare.line() and "rknpu driver unknown" in bare.line()
