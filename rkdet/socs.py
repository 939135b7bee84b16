"""What rkdet knows about each Rockchip SoC's NPU, defined once: cores, family, devfreq node, model target.

Why one place: config (which platforms the legacy toolkit builds for), preflight (does a build's platform
run on this board's NPU; is the NPU RKNPU 1), the deploy cells and the fleet matrix (which core masks a
SoC can run) and the emulator's SoC profiles all need the same facts; two copies of the core-count
table once disagreed on rk3588s (its NPU is rk3588's: three cores). Stdlib only, importing nothing of
rkdet, so every layer may read it.

Sources: Rockchip's datasheets (RK3588/RK3588S: "NPU ... triple-core", 6 TOPS; RK3576: two cores,
6 TOPS; RK3566/RK3568, RK3562, RV1126B: one core), librknnrt's `RKNN_NPU_CORE_*` masks (cores 0..2 exist
on RK3588/RK3588S only), the mainline/BSP device trees for the NPU's devfreq node (`rknpu: npu@fdab0000`
in rk3588s.dtsi, which rk3588.dtsi includes; `npu@fde40000` in rk3568.dtsi; `npu@ffbc0000` in rv1126.dtsi),
and rknn-toolkit2's target platforms (no "rk3588s" nor "rk3566" target: their models are built for
rk3588 and rk3568).

RK3576 and RK3562 (issue 34), checked against the device trees in this session: RK3576's NPU is
`rknpu: npu@27700000` with two register ranges, interrupts `npu0_irq`/`npu1_irq` and power domains
npu0/npu1 (two cores; armbian/linux-rockchip@b66be74e62a6a8d7e9e8ff3e2713c438f010a928
arch/arm64/boot/dts/rockchip/rk3576.dtsi, the BSP 6.1 tree), so its devfreq node is `27700000.npu`;
RK3562's is `rknpu: npu@ff300000` with one register range, interrupt and power domain (one core;
armbian/linux-rockchip@8529d2cbe05efec239d92946a10cf02ec6d9b0d0 arch/arm64/boot/dts/rockchip/rk3562.dtsi),
node `ff300000.npu`. RK3576's `core_aliases` stays UNSOURCED: issue 34 reports from a board that
rknn-toolkit-lite2 runs `NPU_CORE_2` on core 0; no Rockchip document was found for it, and one user
report (swdee/go-rknnlite issue 30, C API through go-rknnlite) says core mask 2 fails on RK3576 instead.
"""

from __future__ import annotations

from dataclasses import dataclass

RKNPU1 = "RKNPU1"  # galcore; legacy runtime librknn_runtime, RKNN-Toolkit 1.x models
RKNPU2 = "RKNPU2"  # rknpu driver; librknnrt, rknn-toolkit2 models


@dataclass(frozen=True)
class SocFacts:
    """One SoC's NPU as rkdet uses it."""

    name: str  # lower case, as the device tree's "rockchip,<name>" compatible string says it
    npu_cores: int
    npu_family: str  # RKNPU1 | RKNPU2
    model_target: str  # the toolkit target_platform whose models run on this NPU
    npu_devfreq: str | None = None  # the NPU's devfreq node name (None: not known to rkdet)
    # masks the runtime accepts although they name a core the NPU lacks, and the mask they run as
    core_aliases: tuple[tuple[str, str], ...] = ()


_ALL = (
    SocFacts("rk3588", 3, RKNPU2, "rk3588", "fdab0000.npu"),
    SocFacts("rk3588s", 3, RKNPU2, "rk3588", "fdab0000.npu"),  # the same die and NPU as rk3588
    SocFacts("rk3576", 2, RKNPU2, "rk3576", "27700000.npu", core_aliases=(("2", "0"),)),  # unsourced alias
    SocFacts("rk3568", 1, RKNPU2, "rk3568", "fde40000.npu"),
    SocFacts("rk3566", 1, RKNPU2, "rk3568", "fde40000.npu"),  # rk3568's NPU; toolkit2 builds it as rk3568
    SocFacts("rk3562", 1, RKNPU2, "rk3562", "ff300000.npu"),
    SocFacts("rv1126b", 1, RKNPU2, "rv1126b"),
    SocFacts("rv1126", 1, RKNPU1, "rv1126", "ffbc0000.npu"),
    SocFacts("rv1109", 1, RKNPU1, "rv1109"),
)
SOCS: dict[str, SocFacts] = {f.name: f for f in _ALL}
RKNPU1_SOCS: tuple[str, ...] = tuple(f.name for f in _ALL if f.npu_family == RKNPU1)  # ("rv1126", "rv1109")


def facts(soc: str | None) -> SocFacts | None:
    """The facts of a SoC by name (any case), or None for a SoC rkdet does not know."""
    return SOCS.get((soc or "").lower())


def npu_cores(soc: str | None) -> int:
    """NPU cores of a SoC; an unknown SoC has one (every Rockchip NPU has core 0)."""
    found = facts(soc)
    return found.npu_cores if found else 1


def is_rknpu1(soc: str | None) -> bool:
    found = facts(soc)
    return found is not None and found.npu_family == RKNPU1


def model_target(soc: str) -> str:
    """The platform whose compiled models run on this SoC's NPU (itself when unknown)."""
    found = facts(soc)
    return found.model_target if found else soc


def same_npu(soc: str, platform: str) -> bool:
    """Does a model compiled for `platform` run on this SoC's NPU?"""
    return model_target(soc) == model_target(platform)


def mask_needs(mask: str) -> int:
    """How many NPU cores a core mask needs: its highest core + 1 ("0_1_2" -> 3, "1" -> 2, "auto" -> 1)."""
    return 1 if mask == "auto" else 1 + max(int(c) for c in mask.split("_"))


def core_masks(soc: str | None, masks: tuple[str, ...]) -> tuple[str, ...]:
    """The masks (of `masks`, the runtime's list) this SoC's NPU can run."""
    cores = npu_cores(soc)
    return tuple(m for m in masks if mask_needs(m) <= cores)


def runs_as(soc: str | None, mask: str) -> str:
    """The core mask a mask actually runs as on this SoC: itself, or its alias (RK3576: "2" runs as "0")."""
    found = facts(soc)
    return dict(found.core_aliases).get(mask, mask) if found else mask
