"""Preflight's ABI check of rkdet-run-c: `rkdet runner build` records the struct sizes of the SDK's header as
the cross compiler lays them out (never by running anything), and preflight compares them with the sizes the
board's runtime version expects (rkdet's table, rkdet/backends/capi_abi.py) before anything is pushed."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from rkdet.backends.capi_abi import KNOWN, STRUCTS, known_abi
from rkdet.backends.capi_build import BuiltRunner, build_runner, built_runner, check_board_runtime
from rkdet.emulator.capi_runtime import build_double
from rkdet.errors import BoardError

BOARD_232 = "librknnrt version: 2.3.2 (rkdet-test-control)"


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    """Runners built against rkdet's test header and against its grown variant (another struct size), both
    from SDKs whose library says 2.3.2: the version check alone would pass the grown one."""
    tmp = tmp_path_factory.mktemp("abi")
    plain = build_runner(build_double("aarch64", tmp / "sdk", version="2.3.2"), "aarch64", tmp / "cache")
    grown = build_runner(build_double("aarch64", tmp / "grown", grown_abi=True, version="2.3.2"), "aarch64",
                         tmp / "grown-cache")
    return {"tmp": tmp, "plain": plain, "grown": grown}


def test_build_records_the_headers_struct_sizes(runners):
    plain, grown = runners["plain"], runners["grown"]
    assert set(plain.struct_sizes) == set(STRUCTS)
    record = json.loads((plain.path.parent / "runner.json").read_text())
    assert record["struct_sizes"] == plain.struct_sizes
    # the grown header declares 4 more uint32 in rknn_tensor_attr, and nothing else changes
    assert grown.struct_sizes["rknn_tensor_attr"] == plain.struct_sizes["rknn_tensor_attr"] + 16
    assert {k: v for k, v in grown.struct_sizes.items() if k != "rknn_tensor_attr"} == \
           {k: v for k, v in plain.struct_sizes.items() if k != "rknn_tensor_attr"}
    # read back as deploy finds it (the cache), and from a cache hit
    assert built_runner("aarch64", runners["tmp"] / "grown-cache").struct_sizes == grown.struct_sizes
    assert build_runner(runners["tmp"] / "sdk", "aarch64", runners["tmp"] / "cache").struct_sizes == plain.struct_sizes


def test_rkdets_test_header_lays_out_as_the_published_headers(runners, tmp_path):
    """rkdet's own ABI declarations (tests only) give the sizes the table holds for the real headers, on both
    architectures: the emulated board's runner is checked like a real one."""
    assert runners["plain"].struct_sizes == known_abi("rknpu2", "aarch64", "2.3.2")[0]
    armhf = build_runner(build_double("armhf", tmp_path / "sdk"), "armhf", tmp_path / "cache")
    assert armhf.struct_sizes == known_abi("rknpu2", "armhf", "2.3.2")[0]
    assert all(abi.sizes["aarch64"]["rknn_input"] == 32 and abi.sizes["armhf"]["rknn_input"] == 24 for abi in KNOWN)


def test_another_struct_size_is_refused_naming_struct_sizes_and_source(runners):
    with pytest.raises(BoardError) as err:
        check_board_runtime(runners["grown"], BOARD_232, "board1")
    line = str(err.value)
    assert "\n" not in line and line.startswith("board1: ")
    assert "rknn_tensor_attr is 392 bytes" in line and "runtime 2.3.2 expects 376" in line and "ret=-5" in line
    assert "airockchip/rknn-toolkit2 42aa1d4" in line and "rkdet runner build --sdk DIR --arch aarch64" in line
    assert check_board_runtime(runners["plain"], BOARD_232, "board1") is None


def test_equal_sizes_across_versions_run_with_a_warning(runners):
    older = replace(runners["plain"], runtime_version="2.3.0")
    warning = check_board_runtime(older, BOARD_232, "board1")
    assert warning and "2.3.0" in warning and "2.3.2" in warning and "equal" in warning


def test_an_unknown_version_falls_back_to_comparing_versions(runners):
    board = "librknnrt version: 2.5.0 (be611e2c)"  # no published header of 2.5.0 was measured
    assert known_abi("rknpu2", "aarch64", "2.5.0") is None
    assert check_board_runtime(replace(runners["grown"], runtime_version="2.5.0"), board, "b") is None
    with pytest.raises(BoardError, match="runtime 2.6.0.*runs 2.5.0.*does not know"):
        check_board_runtime(replace(runners["plain"], runtime_version="2.6.0"), board, "b")
    no_sizes = BuiltRunner(runners["grown"].path, "aarch64", "ab" * 32, "cd" * 32, "k", runtime_version="2.3.2")
    assert check_board_runtime(no_sizes, BOARD_232, "b") is None  # an older build: only the version is known
    assert "not checked" in check_board_runtime(runners["plain"], None, "b")


def test_rknpu1_runner_is_checked_against_rv1126s_runtime(tmp_path):
    """RKNPU1 (RV1126, armhf): rkdet's RKNPU1 declarations lay out as rockchip-linux/rknpu's headers (a
    360-byte rknn_tensor_attr, no custom string); a runner of another struct size is refused for the
    emulated RV1126's librknn_runtime 1.7.3 before the push."""
    plain = build_runner(build_double("armhf", tmp_path / "sdk", rknpu1=True, version="1.7.3"), "armhf",
                         tmp_path / "cache")
    assert plain.api == "rknpu1" and plain.struct_sizes == known_abi("rknpu1", "armhf", "1.7.3")[0]
    assert plain.struct_sizes["rknn_tensor_attr"] == 360 and "rknn_custom_string" not in plain.struct_sizes
    board = "librknn_runtime version 1.7.3 (2c0f4c5 build: 2022-08-05 10:22:34 base: 1131)"
    assert check_board_runtime(plain, board, "rv1126") is None
    grown = build_runner(build_double("armhf", tmp_path / "grown", rknpu1=True, grown_abi=True, version="1.7.3"),
                         "armhf", tmp_path / "grown-cache")
    with pytest.raises(BoardError, match="rknn_tensor_attr is 376 bytes.*1.7.3 expects 360.*rockchip-linux/rknpu"):
        check_board_runtime(grown, board, "rv1126")
