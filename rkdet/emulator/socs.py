"""SoC profiles: what the kernel of a Rockchip board exposes in sysfs/procfs.

One source of truth for every emulated board: the plain fake tree (`fake_tree.py`), the FUSE
filesystem and the tests all read these profiles. Every value carries its source in the profile's
``sources`` (file and node of Rockchip's BSP kernel, a board dump, or "emulator choice: ..." for
the few values no source fixes); `missing_sources` lists values without one and a test keeps it
empty. The citations themselves live in `rkdet.emulator.soc_sources`; the NPU's facts (cores, devfreq
node name) are read from `rkdet.socs`, where config, preflight and the fleet read them too.

Variants are built by the factory functions (`rk3588` with its speed bin, kernel and image
options; `rk3568`; `rv1126`; `rk3576` with its NPU boot frequency; `rk3562`), so tests can run
every board script on every variant.
Frequencies are in the units the kernel prints: kHz for cpufreq, Hz for devfreq.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from rkdet import socs as facts
from rkdet.emulator import soc_sources as src


@dataclass(frozen=True)
class CpuPolicy:
    """One cpufreq policy (a cluster of cores sharing a clock)."""

    name: str  # "policy0"
    cpus: tuple[int, ...]
    frequencies_khz: tuple[int, ...]
    governor: str = "schedutil"
    governors: tuple[str, ...] = ("performance", "schedutil")  # scaling_available_governors, as listed


@dataclass(frozen=True)
class DevfreqNode:
    """One devfreq device (NPU, GPU or DDR controller) under /sys/class/devfreq.

    `frequencies_hz` is the OPP table in the order ``available_frequencies`` prints it (Mali's
    kbase devfreq prints it descending). `boot_hz`: the frequency at boot (None: the middle OPP, an
    emulator choice). Governors are the profile's one global list (`SocProfile.devfreq_governors`).
    """

    name: str  # "fdab0000.npu"
    kind: str  # "npu" | "gpu" | "ddr"
    frequencies_hz: tuple[int, ...]
    governor: str
    boot_hz: int | None = None


@dataclass(frozen=True)
class ThermalZone:
    """A thermal zone, found by its ``type`` (never by index); `trips` are (millicelsius, type)."""

    type: str  # "soc-thermal"
    millicelsius: int
    trips: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class ThermalCap:
    """A vendor thermal limit: above `above_millicelsius` of `zone`, `node` runs at most `max_hz`.

    `node` is a devfreq node name or a cpufreq policy name ("policy4"; `max_hz` is then in Hz too,
    i.e. kHz * 1000). The limit is released once the zone falls below the trip minus
    `hysteresis_millicelsius` (Rockchip's system monitor: ``l=15000 h=85000 hyst=5000``).
    """

    node: str
    zone: str
    above_millicelsius: int
    max_hz: int
    hysteresis_millicelsius: int = 0


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
    devfreq_governors: tuple[str, ...] = ("userspace", "powersave", "performance", "simple_ondemand")
    thermal_caps: tuple[ThermalCap, ...] = ()
    cooling_devices: tuple[str, ...] = ()  # nodes (devfreq names, cpufreq policy names) with one
    cooling_numbered: bool = False  # devfreq cooling typed thermal-devfreq-N (4.19, 5.10.66)
    has_compaction_proactiveness: bool = True
    compaction_proactiveness: int = 20
    thp_enabled: str | None = "always [madvise] never"  # None: kernel built without THP
    rknpu_driver: str | None = "RKNPU driver: v0.9.8"
    # where the driver shows its version: "debugfs" (/sys/kernel/debug/rknpu/version, "RKNPU driver: vX"),
    # "sysfs" (/sys/module/rknpu/version, "X"), "dmesg" (/var/log/dmesg: "[drm] Initialized rknpu X ...")
    rknpu_version_nodes: tuple[str, ...] = ("debugfs", "sysfs", "dmesg")
    runtime_library: str = "usr/lib/librknnrt.so"
    runtime_version: str = "librknnrt version: 2.5.0 (be611e2c@2026-09-29T14:50:11)"
    npu_cores: int = 1
    cpuidle_states: tuple[str, ...] = ("WFI", "cpu-sleep")
    serial: str = ""  # this board's device-tree serial-number ("" none): set per board by EmulatedBoard
    variant: str = ""  # e.g. "bin2304,no-compaction": names a non-default variant in test ids
    # TEST CONTROL: JSON the image carries at etc/rkdet-emulator/runtime.json for the runtime double
    # (drift, core drift, another librknnrt; see runtime_double/rknnlite/api); "" on every real profile
    runtime_control: str = ""
    sources: dict[str, str] = field(default_factory=dict)  # value key (see value_keys) -> source
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def cpu_count(self) -> int:
        return sum(len(p.cpus) for p in self.cpu_policies)

    def devfreq_of(self, kind: str) -> DevfreqNode | None:
        """The devfreq node of a kind ("npu", "gpu", "ddr"), or None when the SoC has none."""
        return next((d for d in self.devfreq if d.kind == kind), None)

    @property
    def label(self) -> str:
        """soc plus variant, for test ids and logs."""
        return f"{self.soc}[{self.variant}]" if self.variant else self.soc


# ---- provenance ---------------------------------------------------------------------------------

_UNSOURCED_FIELDS = {"sources", "extra", "variant", "serial", "runtime_control", "cpu_policies", "devfreq",
                     "thermal_zones"}


def value_keys(profile: SocProfile) -> list[str]:
    """The key of every value a profile shows to a board client (what needs a source)."""
    keys = [f.name for f in fields(SocProfile) if f.name not in _UNSOURCED_FIELDS]
    for pol in profile.cpu_policies:
        keys += [f"cpufreq.{pol.name}.{k}" for k in ("cpus", "frequencies_khz", "governor", "governors")]
    for node in profile.devfreq:
        keys += [f"devfreq.{node.name}.{k}" for k in ("frequencies_hz", "governor", "boot_hz")]
    for zone in profile.thermal_zones:
        keys += [f"thermal.{zone.type}.millicelsius", f"thermal.{zone.type}.trips"]
    keys += [f"cap.{cap.node}" for cap in profile.thermal_caps]
    return keys


def source_of(profile: SocProfile, key: str) -> str | None:
    """The source of a value: its own entry, else the nearest dotted prefix's (a node's source)."""
    while key:
        if profile.sources.get(key):
            return profile.sources[key]
        key = key.rpartition(".")[0]
    return None


def missing_sources(profile: SocProfile) -> list[str]:
    """Value keys of `profile` with no source (empty for every shipped profile and variant)."""
    return [k for k in value_keys(profile) if not source_of(profile, k)]


# ---- RK3588 ---------------------------------------------------------------------------------------

RK3588_SPEED_BINS = (2256000, 2304000, 2352000, 2400000)  # kHz, big-core top OPP per bin
_RK3588_LITTLE = (408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000)
_RK3588_BIG = (408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000, 2016000, 2208000)
_RK3588_NPU = tuple(f * 1000000 for f in (300, 400, 500, 600, 700, 800, 900, 1000))
_RK3588_GPU_DESC = tuple(f * 1000000 for f in (1000, 900, 800, 700, 600, 500, 400, 300))
_CPU_GOVERNORS_510 = ("interactive", "conservative", "ondemand", "userspace", "powersave", "performance", "schedutil")
_DEVFREQ_GOVERNORS_RK35 = ("rknpu_ondemand", "dmc_ondemand", "userspace", "powersave", "performance", "simple_ondemand")


def rk3588(speed_bin: int = 2256000, kernel: str = "5.10.160-rockchip-rk3588", compaction: bool = True,
           thp: bool = True) -> SocProfile:
    """An RK3588 board (Radxa ROCK 5B) of one big-core speed bin, kernel and image configuration.

    `kernel`: a 5.10 BSP release; before 5.10.110 devfreq cooling devices are ``thermal-devfreq-N``.
    `compaction`/`thp`: whether the image's kernel has CONFIG_COMPACTION / CONFIG_TRANSPARENT_HUGEPAGE.
    """
    if speed_bin not in RK3588_SPEED_BINS:
        raise ValueError(f"RK3588 speed bin {speed_bin}: use one of {', '.join(map(str, RK3588_SPEED_BINS))}")
    big = _RK3588_BIG + (speed_bin,)
    numbered = _kernel_tuple(kernel) < (5, 10, 110)
    variant = ",".join(v for v in (
        f"bin{speed_bin // 1000}" if speed_bin != 2256000 else "",
        f"k{kernel.split('-')[0]}" if kernel != "5.10.160-rockchip-rk3588" else "",
        "" if compaction else "no-compaction", "" if thp else "no-thp") if v)
    sources = dict(src.RK3588)
    sources["cpufreq.policy4.frequencies_khz"] = sources["cpufreq.policy6.frequencies_khz"] = src.rk3588_bin(speed_bin)
    sources.update(src.image_options(compaction, thp))
    if numbered:
        sources["cooling_numbered"] = src.COOLING_NUMBERED
    return SocProfile(
        soc="rk3588",
        compatible=("radxa,rock-5b", "rockchip,rk3588"),
        model="Radxa ROCK 5B",
        kernel=kernel,
        cpu_policies=(
            CpuPolicy("policy0", (0, 1, 2, 3), _RK3588_LITTLE, "interactive", _CPU_GOVERNORS_510),
            CpuPolicy("policy4", (4, 5), big, "interactive", _CPU_GOVERNORS_510),
            CpuPolicy("policy6", (6, 7), big, "interactive", _CPU_GOVERNORS_510),
        ),
        devfreq=(
            DevfreqNode(_npu("rk3588"), "npu", _RK3588_NPU, "rknpu_ondemand", boot_hz=1000000000),
            DevfreqNode("fb000000.gpu", "gpu", _RK3588_GPU_DESC, "simple_ondemand"),
            DevfreqNode("dmc", "ddr", (528000000, 1068000000, 1560000000, 2112000000), "dmc_ondemand"),
        ),
        devfreq_governors=_DEVFREQ_GOVERNORS_RK35,
        thermal_zones=(
            ThermalZone("soc-thermal", 41000, ((75000, "passive"), (85000, "passive"), (115000, "critical"))),
            ThermalZone("bigcore0-thermal", 41500), ThermalZone("bigcore1-thermal", 41200),
            ThermalZone("littlecore-thermal", 40800), ThermalZone("center-thermal", 40600),
            ThermalZone("gpu-thermal", 40200), ThermalZone("npu-thermal", 40900),
        ),
        thermal_caps=(
            ThermalCap("fb000000.gpu", "soc-thermal", 85000, 800000000, 5000),
            ThermalCap(_npu("rk3588"), "soc-thermal", 85000, 800000000, 5000),
            ThermalCap("policy0", "soc-thermal", 85000, 1608000 * 1000, 5000),
            ThermalCap("policy4", "soc-thermal", 85000, 2208000 * 1000, 5000),
            ThermalCap("policy6", "soc-thermal", 85000, 2208000 * 1000, 5000),
        ),
        cooling_devices=("policy0", "policy4", "policy6", "fb000000.gpu", "dmc"),
        cooling_numbered=numbered,
        has_compaction_proactiveness=compaction,
        thp_enabled="always [madvise] never" if thp else None,
        npu_cores=facts.npu_cores("rk3588"),
        cpuidle_states=("WFI", "cpu-sleep"),
        variant=variant,
        sources=sources,
    )


def rk3588_variants() -> tuple[SocProfile, ...]:
    """Every RK3588 variant the tests run: each speed bin, an old BSP kernel, images without
    compaction and without THP."""
    bins = tuple(rk3588(speed_bin=b) for b in RK3588_SPEED_BINS)
    return bins + (rk3588(kernel="5.10.66"), rk3588(compaction=False), rk3588(compaction=False, thp=False))


def _npu(soc: str) -> str:
    """The NPU's devfreq node name (rkdet.socs: one definition)."""
    node = facts.SOCS[soc].npu_devfreq
    assert node is not None, soc
    return node


# ---- RK3568 / RV1126 ----------------------------------------------------------------------------

def rk3568(compaction: bool = True, thp: bool = True) -> SocProfile:
    """An RK3568 board (Firefly ROC-PC) on the 5.10 BSP kernel."""
    sources = dict(src.RK3568)
    sources.update(src.image_options(compaction, thp))
    return SocProfile(
        soc="rk3568",
        compatible=("firefly,rk3568-roc-pc", "rockchip,rk3568"),
        model="Firefly RK3568-ROC-PC",
        kernel="5.10.160",
        cpu_policies=(
            CpuPolicy("policy0", (0, 1, 2, 3), (408000, 600000, 816000, 1104000, 1416000, 1608000, 1800000, 1992000),
                      "interactive", _CPU_GOVERNORS_510),
        ),
        devfreq=(
            DevfreqNode(_npu("rk3568"), "npu", tuple(f * 1000000 for f in (200, 297, 400, 600, 700, 800, 900)),
                        "rknpu_ondemand"),
            DevfreqNode("fde60000.gpu", "gpu", tuple(f * 1000000 for f in (800, 700, 600, 400, 300, 200)),
                        "simple_ondemand"),
            DevfreqNode("dmc", "ddr", (324000000, 528000000, 780000000, 1056000000), "dmc_ondemand"),
        ),
        devfreq_governors=_DEVFREQ_GOVERNORS_RK35,
        thermal_zones=(ThermalZone("soc-thermal", 43000), ThermalZone("gpu-thermal", 42000)),
        thermal_caps=(),
        has_compaction_proactiveness=compaction,
        thp_enabled="always [madvise] never" if thp else None,
        npu_cores=facts.npu_cores("rk3568"),
        variant=",".join(v for v in ("" if compaction else "no-compaction", "" if thp else "no-thp") if v),
        sources=sources,
    )


def rv1126() -> SocProfile:
    """An RV1126 EVB on the 4.19 BSP kernel (galcore NPU driver, legacy librknn_runtime)."""
    return SocProfile(
        soc="rv1126",
        compatible=("rockchip,rv1126-evb-ddr3-v13", "rockchip,rv1126"),
        model="Rockchip RV1126 EVB DDR3 V13 Board",
        kernel="4.19.111",
        cpu_policies=(
            CpuPolicy("policy0", (0, 1, 2, 3), (408000, 600000, 816000, 1008000, 1200000, 1296000, 1416000, 1512000),
                      "ondemand", ("ondemand", "userspace", "performance")),
        ),
        devfreq=(
            DevfreqNode(_npu("rv1126"), "npu", tuple(f * 1000000 for f in (200, 300, 396, 500, 600, 700, 800, 934)),
                        "userspace"),
        ),
        devfreq_governors=("userspace",),
        thermal_zones=(ThermalZone("cpu-thermal", 45000), ThermalZone("npu-thermal", 46000)),
        thermal_caps=(),
        cooling_numbered=True,
        has_compaction_proactiveness=False,
        thp_enabled=None,
        rknpu_driver=None,  # RV1126 uses the galcore driver; no /sys/kernel/debug/rknpu
        rknpu_version_nodes=(),
        runtime_library="usr/lib/librknn_runtime.so",
        runtime_version="librknn_runtime version 1.7.3 (2c0f4c5 build: 2022-08-05 10:22:34 base: 1131)",
        npu_cores=facts.npu_cores("rv1126"),
        cpuidle_states=("WFI", "cpu-sleep"),
        sources=dict(src.RV1126),
    )


# ---- RK3576 / RK3562 (issue 34; BSP 6.1 device trees, each value's file in soc_sources) -----------

_CPU_GOVERNORS_61 = ("conservative", "ondemand", "userspace", "powersave", "performance", "schedutil")
_RK3576_LITTLE = (408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000, 2016000, 2208000)
_RK3576_BIG = _RK3576_LITTLE + (2304000,)
_STEPS_300 = tuple(f * 1000000 for f in (300, 400, 500, 600, 700, 800, 900))  # 300..900 MHz
_RK3576_NPU = _STEPS_300 + (1000000000,)
_RK3576_GPU_DESC = tuple(reversed(_STEPS_300 + (950000000,)))
_RK3562_NPU = _STEPS_300 + (1000000000,)
_RK3562_GPU_DESC = tuple(reversed(_STEPS_300))
_CRITICAL = ((115000, "critical"),)
_PASSIVE_75_85 = ((75000, "passive"), (85000, "passive"), (115000, "critical"))


def rk3576(npu_boot_hz: int = 1000000000) -> SocProfile:
    """An RK3576 board (ArmSoM Sige5) on a BSP 6.1 kernel: two NPU cores, NPU OPPs 300 MHz..1 GHz.

    `npu_boot_hz`: the NPU's frequency at boot (issue 34: one vendor kernel boots it at 300 MHz)."""
    if npu_boot_hz not in _RK3576_NPU:
        raise ValueError(f"RK3576 NPU boot frequency {npu_boot_hz}: use one of {', '.join(map(str, _RK3576_NPU))}")
    sources = dict(src.RK3576)
    sources.update(src.image_options(True, True))
    return SocProfile(
        soc="rk3576",
        compatible=("armsom,sige5", "rockchip,rk3576"),
        model="ArmSoM Sige5",
        kernel="6.1.99",
        cpu_policies=(
            CpuPolicy("policy0", (0, 1, 2, 3), _RK3576_LITTLE, "schedutil", _CPU_GOVERNORS_61),
            CpuPolicy("policy4", (4, 5, 6, 7), _RK3576_BIG, "schedutil", _CPU_GOVERNORS_61),
        ),
        devfreq=(DevfreqNode(_npu("rk3576"), "npu", _RK3576_NPU, "rknpu_ondemand", boot_hz=npu_boot_hz),
                 DevfreqNode("27800000.gpu", "gpu", _RK3576_GPU_DESC, "simple_ondemand")),
        devfreq_governors=("rknpu_ondemand", "userspace", "powersave", "performance", "simple_ondemand"),
        thermal_zones=(
            ThermalZone("soc-thermal", 40500, _CRITICAL), ThermalZone("bigcore-thermal", 41000, _CRITICAL),
            ThermalZone("little-core-thermal", 40300, _PASSIVE_75_85), ThermalZone("ddr-thermal", 39600, _CRITICAL),
            ThermalZone("npu-thermal", 40100, _CRITICAL), ThermalZone("gpu-thermal", 39800, _CRITICAL),
        ),
        npu_cores=facts.npu_cores("rk3576"),
        variant="" if npu_boot_hz == _RK3576_NPU[-1] else f"npu-boot-{npu_boot_hz // 1000000}",
        sources=sources,
    )


def rk3562() -> SocProfile:
    """An RK3562 EVB on a BSP 6.1 kernel: one NPU core, booted at 1 GHz (the dtsi's init-freq)."""
    sources = dict(src.RK3562)
    sources.update(src.image_options(True, True))
    return SocProfile(
        soc="rk3562",
        compatible=("rockchip,rk3562-evb1-lp4x-v10", "rockchip,rk3562"),
        model="Rockchip RK3562 EVB1 LP4X V10 Board",
        kernel="6.1.99",
        cpu_policies=(
            CpuPolicy("policy0", (0, 1, 2, 3), _RK3588_LITTLE + (2016000,), "schedutil", _CPU_GOVERNORS_61),
        ),
        devfreq=(DevfreqNode(_npu("rk3562"), "npu", _RK3562_NPU, "rknpu_ondemand", boot_hz=1000000000),
                 DevfreqNode("ff320000.gpu", "gpu", _RK3562_GPU_DESC, "simple_ondemand")),
        devfreq_governors=("rknpu_ondemand", "userspace", "powersave", "performance", "simple_ondemand"),
        thermal_zones=(ThermalZone("soc-thermal", 42000, _PASSIVE_75_85),),
        npu_cores=facts.npu_cores("rk3562"),
        sources=sources,
    )


def with_stack(prof: SocProfile, runtime: str | None = None, driver: str | None = None) -> SocProfile:
    """TEST CONTROL: the same board with another librknnrt version and/or rknpu driver version (a bare
    "1.4.0" becomes the library's "librknnrt version: 1.4.0 (...)" string and the driver's "RKNPU driver:
    v0.8.2"), e.g. to check preflight's known incompatibilities. The emulated runtime reports them too."""
    changes: dict = {}
    sources = dict(prof.sources)
    labels = [prof.variant] if prof.variant else []
    if runtime:
        full = runtime if "version" in runtime else f"librknnrt version: {runtime} (rkdet-test-control)"
        changes["runtime_version"] = full
        sources["runtime_version"] = "TEST CONTROL: another librknnrt version string (socs.with_stack)"
        labels.append(f"librknnrt-{runtime.split()[-1] if 'version' not in runtime else 'custom'}")
    if driver:
        changes["rknpu_driver"] = driver if "driver" in driver.lower() else f"RKNPU driver: v{driver.lstrip('v')}"
        sources["rknpu_driver"] = "TEST CONTROL: another rknpu driver version (socs.with_stack)"
        labels.append(f"rknpu-{driver}")
    if not changes:
        return prof
    return replace(prof, **changes, sources=sources, variant=",".join(labels))


def with_compute(prof: SocProfile, compute: str) -> SocProfile:
    """TEST CONTROL: what the board's runtime double computes, "int8" (the build's INT8 emulation, its
    default) or "fp32" (the prepared FP32 ONNX, bitwise comparable with golden/onnx-fp32). A setting of
    the image (`"compute"` in its runtime control), so it holds under sudo's env_reset."""
    import json

    if compute not in ("int8", "fp32"):
        raise ValueError(f"compute {compute!r}: expected int8 or fp32")
    control = json.loads(prof.runtime_control or "{}")
    control["compute"] = compute
    return replace(prof, runtime_control=json.dumps(control, sort_keys=True))


def with_multicore_split(prof: SocProfile, cores: int = 3, core_masks: tuple[int, ...] = (7,)) -> SocProfile:
    """TEST CONTROL, opt-in multi-core numerics: the board's runtime double computes every Conv of a model run
    with one of `core_masks` (default NPU_CORE_0_1_2) as `cores` NPU cores would split it, per-core partial
    sums added in another order (docs/EMULATOR.md), so a core-mask sweep finds a real difference (#228)."""
    import json

    control = json.loads(prof.runtime_control or "{}")
    control["multicore_split"] = {"cores": int(cores), "core_masks": [int(m) for m in core_masks]}
    return replace(prof, runtime_control=json.dumps(control, sort_keys=True),
                   variant=",".join([v for v in (prof.variant,) if v] + [f"multicore-split-{cores}"]))


def all_variants() -> tuple[SocProfile, ...]:
    """The default profiles plus every variant (what 'board scripts pass on every variant' runs)."""
    return (RK3588,) + rk3588_variants()[1:] + (RK3568, rk3568(compaction=False, thp=False), RV1126, RK3576,
                                                rk3576(npu_boot_hz=300000000), RK3562)


def _kernel_tuple(release: str) -> tuple[int, ...]:
    parts = []
    for piece in release.split("-")[0].split(".")[:3]:
        parts.append(int(piece) if piece.isdigit() else 0)
    return tuple(parts)


RK3588 = rk3588()
RK3568 = rk3568()
RV1126 = rv1126()
RK3576 = rk3576()
RK3562 = rk3562()

PROFILES: dict[str, SocProfile] = {p.soc: p for p in (RK3588, RK3568, RV1126, RK3576, RK3562)}


def profile(soc: str) -> SocProfile:
    """The profile of a SoC by name; raises KeyError listing the known names."""
    try:
        return PROFILES[soc.lower()]
    except KeyError:
        raise KeyError(f"unknown SoC {soc!r}; known: {', '.join(sorted(PROFILES))}") from None


__all__ = ["CpuPolicy", "DevfreqNode", "ThermalZone", "ThermalCap", "SocProfile", "PROFILES", "RK3588", "RK3568",
           "RV1126", "RK3576", "RK3562", "RK3588_SPEED_BINS", "rk3588", "rk3568", "rv1126", "rk3576", "rk3562",
           "rk3588_variants", "all_variants",
           "profile", "value_keys", "source_of", "missing_sources", "with_stack"]
