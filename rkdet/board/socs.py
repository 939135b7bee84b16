"""SoC profiles: what the kernel of a Rockchip board exposes in sysfs/procfs.

One source of truth for every emulated board: the plain fake tree (`fake_tree.py`), the FUSE
filesystem and the tests all read these profiles. Values follow vendor BSP kernels as seen on
real boards (device-tree nodes named by bus address, e.g. RK3588's NPU at ``fdab0000.npu``;
RK3568's NPU OPPs of 297/594 MHz; RV1126's 4.19 kernel without ``compaction_proactiveness``).
Frequencies are in the units the kernel prints: kHz for cpufreq, Hz for devfreq.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CPU_GOVERNORS = ("conservative", "ondemand", "userspace", "powersave", "performance", "schedutil")


@dataclass(frozen=True)
class CpuPolicy:
    """One cpufreq policy (a cluster of cores sharing a clock)."""

    name: str  # "policy0"
    cpus: tuple[int, ...]
    frequencies_khz: tuple[int, ...]
    governor: str = "schedutil"
    governors: tuple[str, ...] = CPU_GOVERNORS


@dataclass(frozen=True)
class DevfreqNode:
    """One devfreq device (NPU, GPU or DDR controller) under /sys/class/devfreq."""

    name: str  # "fdab0000.npu"
    kind: str  # "npu" | "gpu" | "ddr"
    frequencies_hz: tuple[int, ...]
    governor: str
    governors: tuple[str, ...]


@dataclass(frozen=True)
class ThermalZone:
    """A thermal zone, found by its ``type`` (never by index)."""

    type: str  # "npu-thermal"
    millicelsius: int


@dataclass(frozen=True)
class ThermalCap:
    """A vendor thermal table entry: above `above_millicelsius`, `node` runs at most `max_hz`."""

    node: str
    zone: str
    above_millicelsius: int
    max_hz: int


@dataclass(frozen=True)
class SocProfile:
    """Everything an emulated board of one SoC shows to the board scripts and the runner."""

    soc: str  # "rk3588": the name used for toolkit target_platform
    compatible: tuple[str, ...]  # device-tree compatible strings, board first
    model: str  # /proc/device-tree/model
    kernel: str  # uname -r
    cpu_policies: tuple[CpuPolicy, ...]
    devfreq: tuple[DevfreqNode, ...]
    thermal_zones: tuple[ThermalZone, ...]
    thermal_caps: tuple[ThermalCap, ...] = ()
    has_compaction_proactiveness: bool = True
    compaction_proactiveness: int = 20
    thp_enabled: str = "always [madvise] never"
    rknpu_driver: str | None = "RKNPU driver: v0.9.8"
    runtime_library: str = "usr/lib/librknnrt.so"
    runtime_version: str = "librknnrt version: 2.5.0 (be611e2c@2026-09-29T14:50:11)"
    npu_cores: int = 1
    cpuidle_states: tuple[str, ...] = ("WFI", "cpu-sleep")
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def cpu_count(self) -> int:
        return sum(len(p.cpus) for p in self.cpu_policies)

    def devfreq_of(self, kind: str) -> DevfreqNode | None:
        """The devfreq node of a kind ("npu", "gpu", "ddr"), or None when the SoC has none."""
        return next((d for d in self.devfreq if d.kind == kind), None)


_NPU_GOVERNORS = ("rknpu_ondemand", "userspace", "powersave", "performance", "simple_ondemand")
_GPU_GOVERNORS = ("userspace", "powersave", "performance", "simple_ondemand")
_DMC_GOVERNORS = ("dmc_ondemand", "userspace", "powersave", "performance", "simple_ondemand")

RK3588 = SocProfile(
    soc="rk3588",
    compatible=("radxa,rock-5b", "rockchip,rk3588"),
    model="Radxa ROCK 5B",
    kernel="5.10.160-rockchip-rk3588",
    cpu_policies=(
        CpuPolicy("policy0", (0, 1, 2, 3), (408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000)),
        CpuPolicy("policy4", (4, 5), (408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000, 2016000, 2208000, 2400000)),
        CpuPolicy("policy6", (6, 7), (408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000, 2016000, 2208000, 2400000)),
    ),
    devfreq=(
        DevfreqNode("fdab0000.npu", "npu", (300000000, 400000000, 500000000, 600000000, 700000000, 800000000, 900000000, 1000000000), "rknpu_ondemand", _NPU_GOVERNORS),
        DevfreqNode("fb000000.gpu", "gpu", (300000000, 400000000, 500000000, 600000000, 700000000, 800000000, 900000000, 1000000000), "simple_ondemand", _GPU_GOVERNORS),
        DevfreqNode("dmc", "ddr", (528000000, 1068000000, 1560000000, 2112000000), "dmc_ondemand", _DMC_GOVERNORS),
    ),
    thermal_zones=(
        ThermalZone("soc-thermal", 41000), ThermalZone("bigcore0-thermal", 41500), ThermalZone("bigcore1-thermal", 41200),
        ThermalZone("littlecore-thermal", 40800), ThermalZone("center-thermal", 40600), ThermalZone("gpu-thermal", 40200),
        ThermalZone("npu-thermal", 40900),
    ),
    thermal_caps=(ThermalCap("fb000000.gpu", "gpu-thermal", 85000, 800000000),
                  ThermalCap("fdab0000.npu", "npu-thermal", 85000, 800000000)),
    npu_cores=3,
    cpuidle_states=("WFI", "cpu-sleep", "cluster-sleep"),
)

RK3568 = SocProfile(
    soc="rk3568",
    compatible=("firefly,rk3568-roc-pc", "rockchip,rk3568"),
    model="Firefly RK3568-ROC-PC",
    kernel="5.10.160",
    cpu_policies=(
        CpuPolicy("policy0", (0, 1, 2, 3), (408000, 600000, 816000, 1104000, 1416000, 1608000, 1800000, 1992000)),
    ),
    devfreq=(
        DevfreqNode("fde40000.npu", "npu", (200000000, 297000000, 400000000, 594000000, 700000000, 800000000, 900000000, 1000000000), "rknpu_ondemand", _NPU_GOVERNORS),
        DevfreqNode("fde60000.gpu", "gpu", (200000000, 300000000, 400000000, 600000000, 700000000, 800000000), "simple_ondemand", _GPU_GOVERNORS),
        DevfreqNode("dmc", "ddr", (324000000, 528000000, 780000000, 1056000000), "dmc_ondemand", _DMC_GOVERNORS),
    ),
    thermal_zones=(ThermalZone("soc-thermal", 43000), ThermalZone("gpu-thermal", 42000)),
    thermal_caps=(ThermalCap("fde40000.npu", "soc-thermal", 85000, 700000000),),
)

RV1126 = SocProfile(
    soc="rv1126",
    compatible=("rockchip,rv1126-evb-ddr3-v13", "rockchip,rv1126"),
    model="Rockchip RV1126 EVB DDR3 V13 Board",
    kernel="4.19.111",
    cpu_policies=(
        CpuPolicy("policy0", (0, 1, 2, 3), (408000, 600000, 816000, 1008000, 1200000, 1296000, 1416000, 1512000), governor="interactive",
                  governors=("interactive", "userspace", "powersave", "performance")),
    ),
    devfreq=(
        DevfreqNode("ffbc0000.npu", "npu", (200000000, 300000000, 400000000, 500000000, 600000000, 700000000, 800000000, 934000000), "simple_ondemand",
                    ("userspace", "powersave", "performance", "simple_ondemand")),
    ),
    thermal_zones=(ThermalZone("cpu-thermal", 45000), ThermalZone("npu-thermal", 46000)),
    thermal_caps=(ThermalCap("ffbc0000.npu", "npu-thermal", 80000, 600000000),),
    has_compaction_proactiveness=False,
    rknpu_driver=None,  # RV1126 uses the galcore driver; no /sys/kernel/debug/rknpu
    runtime_library="usr/lib/librknn_runtime.so",
    runtime_version="librknn_runtime version 1.7.3 (2c0f4c5 build: 2022-08-05 10:22:34 base: 1131)",
    cpuidle_states=("WFI",),
)

PROFILES: dict[str, SocProfile] = {p.soc: p for p in (RK3588, RK3568, RV1126)}


def profile(soc: str) -> SocProfile:
    """The profile of a SoC by name; raises KeyError listing the known names."""
    try:
        return PROFILES[soc.lower()]
    except KeyError:
        raise KeyError(f"unknown SoC {soc!r}; known: {', '.join(sorted(PROFILES))}") from None
