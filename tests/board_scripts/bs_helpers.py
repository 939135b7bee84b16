"""Constants shared by the board-script tests (a uniquely named module: `conftest` is ambiguous)."""

from __future__ import annotations

from rkdet.board.socs import PROFILES

SHELLS = ("dash", "busybox sh", "bash --posix")
SOCS = tuple(sorted(PROFILES))  # rk3568, rk3588, rv1126
