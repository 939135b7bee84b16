"""Fixtures for `rkdet deploy` end to end: real sshd boards on 127.0.0.1, the real CLI in a subprocess.

`fast_build` is a copy of the session's `default_build` (never converted again) whose golden/inputs
holds only two pages, so tests whose point is not the verdict run 2 inferences per pass, not 8;
`one_page_build` is the same with ONE page, for modules whose claims never depend on how many inputs a run has
(each page is computed, pulled, hashed and diffed per run: about 0.4-0.7 s per deploy that runs the ONNX
double, nothing measurable for a deploy refused before its run; bench/results/suite.md, 2026-12-06 night).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_helpers import FAST_INPUTS
from shared_build import trim_golden

from rkdet.emulator.sshd import EmulatedBoard


@pytest.fixture(scope="session")
def fast_build(default_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the default build with only the first two golden input pages (same model, same fingerprint)."""
    dest = tmp_path_factory.mktemp("fast-build") / default_build.name
    shutil.copytree(default_build, dest)
    return trim_golden(dest, FAST_INPUTS)


@pytest.fixture(scope="session")
def one_page_build(fast_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fast build with only its FIRST golden page. Not for a test that counts inputs or index lines,
    locates a fault past the first page, or needs a run long enough to act during it (those keep
    `fast_build`); a fault with `occurrence` 0 / `all_calls` still hits the first page."""
    dest = tmp_path_factory.mktemp("one-page") / fast_build.name
    shutil.copytree(fast_build, dest)
    return trim_golden(dest, 1)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedBoard]:
    """One standard RK3588 emulated board per test module, with a TEST CONTROL dir (`control_dir(board)`:
    its runtime reads fault.json and the `hold` switch there, see `held`)."""
    control = Path(tempfile.mkdtemp(prefix="rkdet-deploy-ctl-"))
    control.chmod(0o777)  # the board user reads the controls and writes `holding` here
    try:
        with EmulatedBoard("rk3588", tmp_path_factory.mktemp("board"), env={"RKDET_EMU_CONTROL_DIR": str(control)}) as b:
            yield b
    finally:
        shutil.rmtree(control, ignore_errors=True)


@pytest.fixture
def fresh_board(tmp_path: Path) -> Iterator[EmulatedBoard]:
    """A standard RK3588 board of this test's own (for tests that damage or reconfigure it), with a
    TEST CONTROL dir as `board`'s."""
    control = Path(tempfile.mkdtemp(prefix="rkdet-deploy-ctl-"))
    control.chmod(0o777)
    try:
        with EmulatedBoard("rk3588", tmp_path / "board", env={"RKDET_EMU_CONTROL_DIR": str(control)}) as b:
            yield b
    finally:
        shutil.rmtree(control, ignore_errors=True)
