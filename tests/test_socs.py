"""SoC facts are defined once (rkdet/socs.py) and every reader agrees with them: the deploy cells'
`--npu-cores`, the fleet matrix's skipped masks, preflight's "same NPU" and the emulator's profiles.
rk3588s is rk3588's die with the same three-core NPU (Rockchip RK3588S datasheet: triple-core NPU);
the two copies of the core table that existed before disagreed on it."""

from __future__ import annotations

import pytest

from rkdet import socs
from rkdet.boardinfo import compat, preflight
from rkdet.choices import CORE_MASKS
from rkdet.config import TOOLKIT1_PLATFORMS
from rkdet.deploy.cells import cell_args
from rkdet.emulator import socs as profiles
from rkdet.fleets.run.matrix import plan
from rkdet.fleets.run.records import MatrixCell


@pytest.mark.parametrize("soc, cores", [("rk3588", 3), ("rk3588s", 3), ("RK3588S", 3), ("rk3576", 2),
                                        ("rk3568", 1), ("rv1126", 1), ("unknown-soc", 1), (None, 1)])
def test_npu_cores(soc, cores) -> None:  # type: ignore[no-untyped-def]
    assert socs.npu_cores(soc) == cores


@pytest.mark.parametrize("soc", ["rk3588", "rk3588s", "rk3576", "rk3568"])
def test_deploy_cells_and_fleet_matrix_read_the_same_cores(soc: str) -> None:
    cores = socs.npu_cores(soc)
    assert cell_args("0,1,2", soc, 1) == ["--npu-cores", str(cores)]
    runnable = {p.cell.core_mask for p in plan([MatrixCell(m, "rknnlite") for m in CORE_MASKS], soc) if not p.skip}
    assert runnable == set(socs.core_masks(soc, CORE_MASKS))
    assert runnable == {m for m in CORE_MASKS if m == "auto" or max(int(c) for c in m.split("_")) < cores}


def test_rk3588s_runs_every_core_mask() -> None:
    assert socs.core_masks("rk3588s", CORE_MASKS) == CORE_MASKS
    assert cell_args("0,0_1_2", "rk3588s", 1) == ["--npu-cores", "3"]
    assert not any(p.skip for p in plan([MatrixCell("0_1_2", "rknnlite")], "rk3588s"))


def test_mask_needs_its_highest_core() -> None:
    assert [socs.mask_needs(m) for m in CORE_MASKS] == [1, 1, 2, 3, 2, 3]


def test_same_npu_and_rknpu1() -> None:
    assert preflight.same_npu("rk3566", "rk3568") and preflight.same_npu("rk3568", "rk3568")
    assert preflight.same_npu("rk3588s", "rk3588")  # toolkit2 has no rk3588s target: its models are rk3588's
    assert not preflight.same_npu("rk3588", "rk3568") and not preflight.same_npu("rv1126", "rk3588")
    assert compat.RKNPU1_SOCS == frozenset({"rv1126", "rv1109"}) == frozenset(TOOLKIT1_PLATFORMS)
    assert socs.is_rknpu1("RV1126") and not socs.is_rknpu1("rk3588") and not socs.is_rknpu1(None)


@pytest.mark.parametrize("make", [profiles.rk3588, profiles.rk3568, profiles.rv1126])
def test_emulator_profiles_read_the_facts(make) -> None:  # type: ignore[no-untyped-def]
    prof = make()
    fact = socs.SOCS[prof.soc]
    assert prof.npu_cores == fact.npu_cores
    npu = prof.devfreq_of("npu")
    assert npu is not None and npu.name == fact.npu_devfreq
