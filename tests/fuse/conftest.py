"""Fixtures for the FUSE-backed emulated board.

Every client call goes through a subprocess with a timeout (a hung FUSE daemon would otherwise
hang the whole run), and every board's daemon log is checked at teardown: a Python error in a
handler reaches the client as a plain EINVAL, so the log is the only place it shows.
FUSE tests skip where FUSE cannot work, except under CI=true (this project's CI runs as root with
FUSE), where an unavailable FUSE fails the run.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator

import pytest
from fuse_helpers import require_fuse

from rkdet.emulator.mount import EmulatedSysfs, emulated_sysfs
from rkdet.emulator.socs import SocProfile


@pytest.fixture
def make_board(tmp_path: Path) -> Iterator[Callable[..., EmulatedSysfs]]:
    """Factory: make_board("rk3588") or make_board(rk3588(speed_bin=2304000)) mounts a FUSE board;
    all are unmounted and log-checked at teardown."""
    stack = contextlib.ExitStack()
    boards: list[EmulatedSysfs] = []

    def make(soc: str | SocProfile = "rk3588", name: str | None = None) -> EmulatedSysfs:
        """A board of a SoC name or of a profile (a variant: its label names the work dir)."""
        require_fuse()
        label = soc if isinstance(soc, str) else soc.label.replace("[", "-").replace("]", "").replace(",", "-")
        handle = stack.enter_context(emulated_sysfs(soc, tmp_path / (name or label), backend="fuse"))
        boards.append(handle)
        return handle

    try:
        yield make
    finally:
        stack.close()
    for handle in boards:
        assert handle.process is not None and handle.process.returncode is not None, "daemon not reaped"
        assert not handle.daemon_errors(), f"daemon logged errors in {handle.log_path}: {handle.daemon_errors()}"


@pytest.fixture
def board(make_board: Callable[..., EmulatedSysfs]) -> EmulatedSysfs:
    """An RK3588 board on FUSE."""
    return make_board("rk3588")
