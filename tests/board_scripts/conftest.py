"""Fixtures for the board-script tests: fake boards of each SoC and the three POSIX shells.

The scripts must behave the same under dash (Debian's sh), busybox sh (most board images) and
bash --posix, so most tests run once per shell. Trees are the plain fake tree (any write sticks);
test_bs_fuse.py repeats the essentials on the FUSE board with kernel semantics.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from bs_helpers import SHELLS, VARIANTS

from rkdet.emulator.fake_tree import build_fake_tree
from rkdet.emulator.socs import PROFILES


def _require(shell: str) -> None:
    exe = shell.split()[0]
    if shutil.which(exe) is None:  # .ci/setup installs dash and busybox; a missing one is a setup bug
        pytest.fail(f"{exe} not installed; run .ci/setup")


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest) -> str:
    _require(request.param)
    return request.param


@pytest.fixture
def make_tree(tmp_path: Path) -> Callable[..., Path]:
    """make_tree("rk3588") or make_tree("rk3588[bin2304]") (a VARIANTS label) builds a fresh plain
    fake tree (under a path with a space in it)."""
    def make(soc: str, name: str | None = None) -> Path:
        profile = PROFILES.get(soc) or VARIANTS[soc]
        label = name or soc.replace("[", "-").replace("]", "").replace(",", "-")
        return build_fake_tree(profile, tmp_path / f"board {label}")
    return make


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """A state directory whose path has spaces (created by pin.sh itself)."""
    return tmp_path / "run dir" / "rk det"
