"""Constants shared by the board-script tests (a uniquely named module: `conftest` is ambiguous)."""

from __future__ import annotations

from rkdet.emulator.socs import PROFILES, SocProfile, all_variants

SHELLS = ("dash", "busybox sh", "bash --posix")
SOCS = tuple(sorted(PROFILES))  # rk3562, rk3568, rk3576, rk3588, rv1126
#: every profile variant by label: RK3588 speed bins, an old BSP kernel, images without
#: compaction or THP, plus the RK3568 and RV1126 boards ("rk3588", "rk3588[bin2304]", ...)
VARIANTS: dict[str, SocProfile] = {p.label: p for p in all_variants()}
