"""Known incompatibilities (rkdet/boardinfo/compat.py): each refusal names its fix and source, on emulated
boards that present another librknnrt or rknpu driver (socs.with_stack, a TEST CONTROL); unknown
combinations warn, never block."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from deploy_helpers import deploy, error_line, run_folders

from rkdet.boardinfo import compat
from rkdet.boardinfo.compat import StackFacts
from rkdet.emulator.fake_tree import tree_digest
from rkdet.emulator.socs import RK3588, RV1126, with_stack
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import EXIT_BOARD

GOOD = StackFacts(soc="rk3588", runtime_library="/usr/lib/librknnrt.so", runtime=(2, 5, 0), driver=(0, 9, 8),
                  model_format=6, model_toolkit=(2, 5, 0))


def keys(facts: StackFacts, decided: bool = True) -> list[str]:
    return [f.row.key for f in compat.check(facts) if f.decided == decided]


def test_every_row_has_a_source_and_a_fix() -> None:
    assert len({r.key for r in compat.KNOWN}) == len(compat.KNOWN)
    for row in compat.KNOWN:
        assert row.source and ("#" in row.source or "guide" in row.source or "README" in row.source), row.key
        assert row.fix and row.severity in ("block", "warn")


def test_a_good_stack_has_no_finding() -> None:
    assert compat.check(GOOD) == []


@pytest.mark.parametrize(("change", "key", "severity"), [
    ({"runtime": (1, 4, 0)}, "rknn-format-6-on-librknnrt-1", "block"),
    ({"runtime": (1, 5, 0), "model_format": 5, "model_toolkit": (1, 6, 0)}, "toolkit-1.5.2-model-on-older-librknnrt",
     "block"),
    ({"driver": (0, 8, 2)}, "rknpu-driver-older-than-librknnrt-2", "block"),
    ({"driver": (0, 9, 0)}, "rknpu-driver-below-0.9.2", "warn"),
    ({"soc": "rv1126"}, "rv1126-needs-legacy-runtime", "block"),
])
def test_each_row_applies_to_its_combination(change: dict, key: str, severity: str) -> None:
    found = [f for f in compat.check(dataclasses.replace(GOOD, **change)) if f.decided]
    assert key in [f.row.key for f in found]
    first = found[0]
    assert first.row.severity == "block" or severity == "warn"
    hit = next(f for f in found if f.row.key == key)
    assert hit.row.severity == severity and "fix: " in hit.message and "source: " in hit.message


def test_unknown_versions_warn_and_never_block() -> None:
    unknown_driver = dataclasses.replace(GOOD, driver=None)
    assert keys(unknown_driver) == []
    undecided = [f for f in compat.check(unknown_driver) if not f.decided]
    assert {f.row.key for f in undecided} == {"rknpu-driver-older-than-librknnrt-2", "rknpu-driver-below-0.9.2"}
    assert all("rknpu driver version unknown" in f.message for f in undecided)
    # a known condition that fails settles the row, whatever else is unknown
    assert keys(dataclasses.replace(GOOD, runtime=(1, 7, 3), runtime_library="/usr/lib/librknn_runtime.so",
                                    driver=None, model_format=None), decided=False) == []


def test_versions_are_read_from_the_strings_boards_print() -> None:
    assert compat.version_of("librknnrt version: 2.5.0 (be611e2c@2026-09-29T14:50:11)") == (2, 5, 0)
    assert compat.version_of("RKNPU driver: v0.9.8") == (0, 9, 8)
    assert compat.version_of("rknpu 0.9.8") == (0, 9, 8)
    assert compat.version_of("librknn_runtime version 1.7.3 (2c0f4c5 build: 2022-08-05)") == (1, 7, 3)
    assert compat.version_of(None) is None and compat.version_of("no digits") is None


def _refused(proc, out: Path) -> str:
    assert proc.returncode == EXIT_BOARD, proc.stderr[-3000:]
    line = error_line(proc)
    assert not run_folders(out) or all((f / "deploy.json").exists() for f in run_folders(out))
    return line


@pytest.mark.parametrize(("runtime", "driver", "wanted"), [
    ("1.4.0", None, ["Invalid RKNN model version 6", "librknnrt.so", "ultralytics/ultralytics#18928"]),
    (None, "0.8.2", ["rknpu driver 0.8.2 is older than librknnrt 2.5.0", "update the rknpu kernel driver",
                     "rockchip-linux/rknn-toolkit2#271"]),
])
def test_deploy_refuses_a_known_bad_stack_with_the_fix(runtime, driver, wanted, fast_build: Path,
                                                       tmp_path: Path) -> None:
    with EmulatedBoard(with_stack(RK3588, runtime=runtime, driver=driver), tmp_path / "board") as board:
        before = tree_digest(board.root)
        out = tmp_path / "r"
        line = _refused(deploy(board, fast_build, out), out)
        for text in wanted:
            assert text in line, line
        assert "fix: " in line and "known incompatibility" in line
        assert tree_digest(board.root) == before  # refused before anything on the board changed


def test_rv1126_board_is_told_it_needs_the_legacy_runtime(fast_build: Path, tmp_path: Path) -> None:
    with EmulatedBoard(RV1126, tmp_path / "board") as board:
        line = _refused(deploy(board, fast_build, tmp_path / "r"), tmp_path / "r")
        assert "rv1126 has an RKNPU 1 NPU" in line and "librknn_runtime" in line and "RKNN-Toolkit 1.7" in line
        assert "rv1126-needs-legacy-runtime" in line


def test_an_old_but_unlisted_driver_only_warns(fast_build: Path, tmp_path: Path) -> None:
    prof = dataclasses.replace(with_stack(RK3588, driver="0.9.0"))
    with EmulatedBoard(prof, tmp_path / "board") as board:
        proc = deploy(board, fast_build, tmp_path / "r", repeats=1)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "rknpu-driver-below-0.9.2" in proc.stderr
