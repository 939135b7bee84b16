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
                                        ("rk3568", 1), ("rk3562", 1), ("rv1126", 1), ("unknown-soc", 1),
                                        (None, 1)])
def test_npu_cores(soc, cores) -> None:  # type: ignore[no-untyped-def]
    assert socs.npu_cores(soc) == cores


@pytest.mark.parametrize("soc", ["rk3588", "rk3588s", "rk3576", "rk3568", "rk3562"])
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


@pytest.mark.parametrize("make", [profiles.rk3588, profiles.rk3568, profiles.rv1126, profiles.rk3576,
                                  profiles.rk3562])
def test_emulator_profiles_read_the_facts(make) -> None:  # type: ignore[no-untyped-def]
    prof = make()
    fact = socs.SOCS[prof.soc]
    assert prof.npu_cores == fact.npu_cores
    npu = prof.devfreq_of("npu")
    assert npu is not None and npu.name == fact.npu_devfreq


@pytest.mark.parametrize("soc, runnable", [("rk3588", CORE_MASKS), ("rk3576", ("auto", "0", "1", "0_1")),
                                           ("rk3562", ("auto", "0"))])
def test_core_masks_per_soc_in_the_fleet_matrix(soc: str, runnable: tuple[str, ...]) -> None:
    planned = plan([MatrixCell(m, "rknnlite") for m in CORE_MASKS], soc)
    assert tuple(p.cell.core_mask for p in planned if not p.skip) == runnable == socs.core_masks(soc, CORE_MASKS)


def test_rk3576_core_2_alias_is_a_fact_and_the_matrix_says_it() -> None:
    """RK3576 has two cores; lite2 runs NPU_CORE_2 on core 0 (issue 34, unsourced): the matrix still skips
    mask 2 (it would repeat core 0) and its reason says what the runtime would do."""
    assert socs.runs_as("rk3576", "2") == "0" and socs.runs_as("rk3576", "1") == "1"
    assert socs.runs_as("rk3588", "2") == "2" and socs.runs_as(None, "2") == "2"
    skipped = {p.cell.core_mask: p.skip for p in plan([MatrixCell(m, "rknnlite") for m in CORE_MASKS], "rk3576")}
    assert skipped["2"] == "rk3576 has 2 NPU cores; core mask 2 needs 3 (the runtime runs it as core mask 0)"
    assert skipped["0_1_2"] == "rk3576 has 2 NPU cores; core mask 0_1_2 needs 3"


@pytest.mark.parametrize("soc", ["rk3576", "rk3562"])
def test_preflight_rows_for_the_new_socs(soc: str) -> None:
    """A build runs on the SoC it targets only: rk3576/rk3562 models are their own targets (toolkit2)."""
    assert preflight.same_npu(soc, soc) and socs.model_target(soc) == soc
    assert not preflight.same_npu(soc, "rk3588") and not preflight.same_npu("rk3588", soc)
    assert not preflight.same_npu("rk3576", "rk3562") and not socs.is_rknpu1(soc)
    assert cell_args("0,1", soc, 1) == ["--npu-cores", str(socs.npu_cores(soc))]
