"""Where each SoC profile value comes from (data for `rkdet.emulator.socs`; no logic).

Keys are the value keys of `socs.value_keys` (a node's key, e.g. ``devfreq.dmc``, covers all its
values). Citations name the file and node; "BSP 5.10" is rockchip-linux/kernel branch develop-5.10,
"BSP 4.19" is develop-4.19. ``emulator choice:`` marks a value no source fixes (docs/EMULATOR.md
lists them under "not faithful"). Values checked by reading the source in this session say so;
the others come from issue 13's survey of the BSP trees and board dumps.
"""

from __future__ import annotations

CHOICE = "emulator choice: "

_DT_5 = "BSP 5.10 arch/arm64/boot/dts/rockchip/"
_DEVFREQ_LIST = ("drivers/devfreq/devfreq.c available_governors_show: every non-immutable governor of the one "
                 "global devfreq_governor_list on every node; devfreq_add_governor list_add()s at the head, so the "
                 "newest registered is first. Core governors register in drivers/devfreq/Makefile order "
                 "(simple_ondemand, performance, powersave, userspace); dmc_ondemand (rockchip_dmc.c) and "
                 "rknpu_ondemand (rknpu driver) at probe; the dmc-before-rknpu probe order is an emulator choice")
_CPU_GOV_510 = ("BSP 5.10 arch/arm64/configs/rockchip_linux_defconfig: CONFIG_CPU_FREQ_DEFAULT_GOV_INTERACTIVE=y "
                "and the conservative/ondemand/userspace/powersave/performance/schedutil governors built in; "
                "the list order is an emulator choice")
_COMMON = {
    "rknpu_driver": "rknpu driver 0.9.8 (RKNPU2 SDK 2.x), /sys/kernel/debug/rknpu/version on RK35xx boards",
    "rknpu_version_nodes": ("debugfs: rknpu_debugger.c 'version' node ('RKNPU driver: v0.9.8', board dumps in "
                            "radxa-build/rock-5b#29, yifengyou/Liontron-D3588#5); sysfs: rknpu_drv.c MODULE_VERSION -> "
                            "/sys/module/rknpu/version (kernel/params.c, built-in modules too); dmesg: drm_dev_register's "
                            "'[drm] Initialized rknpu 0.9.8 <date> for fdab0000.npu' (drivers/gpu/drm/drm_drv.c); "
                            "the dmesg file at /var/log/dmesg is an emulator choice (boards run `dmesg`)"),
    "runtime_library": "RKNPU2 runtime install path /usr/lib/librknnrt.so (rknn-toolkit2 2.5.0 rknpu2/runtime)",
    "runtime_version": CHOICE + "a librknnrt 2.5.0 version string of the real format; the build id is made up",
    "compaction_proactiveness": "mm/compaction.c sysctl_compaction_proactiveness default 20 (when compiled in)",
    "cooling_numbered": ("drivers/thermal/devfreq_cooling.c: 'devfreq-<device>' since mainline 5.13 (backported "
                         "to BSP 5.10 after 5.10.66); BSP 4.19 and 5.10.66 name them thermal-devfreq-N"),
    "npu_cores": "RK3588 TRM: 3 NPU cores; RK3568/RV1126: 1",
    "soc": "toolkit target_platform name (rknn-toolkit2 2.5.0)",
}

COOLING_NUMBERED = _COMMON["cooling_numbered"]


def rk3588_bin(speed_bin: int) -> str:
    """The source of the big-core OPP list of one RK3588 speed bin."""
    return (_DT_5 + "rk3588s.dtsi cluster1_opp_table/cluster2_opp_table: 408000..2208000 kHz for every bin, "
            f"then opp-{speed_bin * 1000} by opp-supported-hw (bins: 2256 0x13, 2304 0x24, 2352 0x48, 2400 0x80; "
            "checked in this session in a BSP-derived rk3588 OPP table); board dump (issue 13) lists ...2208000 2256000")


def image_options(compaction: bool, thp: bool) -> dict[str, str]:
    """Sources of the image-dependent VM values."""
    return {
        "has_compaction_proactiveness": (
            "image built with CONFIG_COMPACTION (mm/Kconfig default y; compaction_proactiveness since 5.9)" if compaction
            else "BSP 5.10 arch/arm64/configs/rockchip_linux_defconfig: '# CONFIG_COMPACTION is not set'"),
        "thp_enabled": (
            "image built with CONFIG_TRANSPARENT_HUGEPAGE (madvise default); mm/huge_memory.c enabled_show" if thp
            else "rockchip_linux_defconfig: no CONFIG_TRANSPARENT_HUGEPAGE (mm/Kconfig default n): no THP sysfs dir"),
    }


RK3588 = dict(_COMMON, **{
    "compatible": _DT_5 + "rk3588-rock-5b.dts / rk3588.dtsi compatible",
    "model": _DT_5 + "rk3588-rock-5b.dts model",
    "kernel": "Radxa/Armbian BSP image uname -r (5.10.160-rockchip-rk3588)",
    "cpufreq.policy0": _DT_5 + "rk3588s.dtsi cluster0_opp_table (408000..1800000 kHz), cpu_l0..3",
    "cpufreq.policy4.cpus": _DT_5 + "rk3588s.dtsi cpu_b0/cpu_b1 share cluster1_opp_table",
    "cpufreq.policy6.cpus": _DT_5 + "rk3588s.dtsi cpu_b2/cpu_b3 share cluster2_opp_table",
    "cpufreq.policy4.governor": _CPU_GOV_510, "cpufreq.policy4.governors": _CPU_GOV_510,
    "cpufreq.policy6.governor": _CPU_GOV_510, "cpufreq.policy6.governors": _CPU_GOV_510,
    "cpufreq.policy0.governor": _CPU_GOV_510, "cpufreq.policy0.governors": _CPU_GOV_510,
    "devfreq.fdab0000.npu.frequencies_hz": (_DT_5 + "rk3588s.dtsi npu_opp_table 300..1000 MHz; board "
                                            "/sys/kernel/debug/opp/opp_summary platform-fdab0000.npu"),
    "devfreq.fdab0000.npu.governor": "rknpu driver rknpu_devfreq.c: rknpu_ondemand is the NPU's default governor",
    "devfreq.fdab0000.npu.boot_hz": ("rknpu_ondemand holds the frequency it was given (it does not follow load); "
                                     "RK3588 boots the NPU at 1 GHz: board load file reads 100@1000000000Hz "
                                     "(rockchip-linux/rknn-toolkit2 issue 95)"),
    "devfreq.fb000000.gpu.frequencies_hz": (_DT_5 + "rk3588s.dtsi gpu_opp_table 300..1000 MHz; Mali kbase "
                                            "mali_kbase_devfreq.c lists available_frequencies descending"),
    "devfreq.fb000000.gpu.governor": "mali_kbase_devfreq.c: simple_ondemand",
    "devfreq.fb000000.gpu.boot_hz": CHOICE + "the middle OPP under a load-driven governor with no load",
    "devfreq.dmc.frequencies_hz": _DT_5 + "rk3588s.dtsi dmc_opp_table (LPDDR4x ROCK 5B: 528/1068/1560/2112 MHz)",
    "devfreq.dmc.governor": "BSP 5.10 drivers/devfreq/rockchip_dmc.c: dmc_ondemand",
    "devfreq.dmc.boot_hz": CHOICE + "the middle OPP under a load-driven governor with no load",
    "devfreq_governors": _DEVFREQ_LIST,
    "thermal.soc-thermal.trips": (_DT_5 + "rk3588s.dtsi thermal_zones/soc-thermal trips: 75 C passive "
                                  "(threshold), 85 C passive (target), 115 C critical; the other zones have none"),
    "thermal.bigcore0-thermal.trips": _DT_5 + "rk3588s.dtsi bigcore0-thermal: no trips",
    "thermal.bigcore1-thermal.trips": _DT_5 + "rk3588s.dtsi bigcore1-thermal: no trips",
    "thermal.littlecore-thermal.trips": _DT_5 + "rk3588s.dtsi littlecore-thermal: no trips",
    "thermal.center-thermal.trips": _DT_5 + "rk3588s.dtsi center-thermal: no trips",
    "thermal.gpu-thermal.trips": _DT_5 + "rk3588s.dtsi gpu-thermal: no trips",
    "thermal.npu-thermal.trips": _DT_5 + "rk3588s.dtsi npu-thermal: no trips",
    **{f"thermal.{z}.millicelsius": CHOICE + "idle temperature about 41 C at 25 C ambient"
       for z in ("soc-thermal", "bigcore0-thermal", "bigcore1-thermal", "littlecore-thermal", "center-thermal",
                 "gpu-thermal", "npu-thermal")},
    "cap.fb000000.gpu": ("Rockchip system monitor (drivers/soc/rockchip/rockchip_system_monitor.c) on soc-thermal: "
                         "board dmesg 'mali fb000000.gpu: l=15000 h=85000 hyst=5000 l_limit=0 h_limit=800000000' "
                         "(MichaIng/DietPi issue 7457)"),
    "cap.fdab0000.npu": _DT_5 + "rk3588s.dtsi npu_opp_table rockchip,high-temp = <85000>, max-freq 800 MHz, "
                        "hysteresis 5000 (system monitor)",
    "cap.policy0": _DT_5 + "rk3588s.dtsi cluster0_opp_table rockchip,high-temp 85 C, max-freq 1608000 kHz",
    "cap.policy4": _DT_5 + "rk3588s.dtsi cluster1_opp_table rockchip,high-temp 85 C, max-freq 2208000 kHz",
    "cap.policy6": _DT_5 + "rk3588s.dtsi cluster2_opp_table rockchip,high-temp 85 C, max-freq 2208000 kHz",
    "cooling_devices": ("board /sys/class/thermal/cooling_device*/type: cpufreq-cpu0, cpufreq-cpu4, cpufreq-cpu6, "
                        "devfreq-fb000000.gpu, devfreq-dmc; no NPU cooling device (issue 13 survey)"),
    "cpuidle_states": _DT_5 + "rk3588s.dtsi idle-states: CPU_SLEEP (cpu-sleep) only; state0 is WFI; no cluster-sleep",
})

_RK3568_DT = _DT_5 + "rk3568.dtsi "
RK3568 = dict(_COMMON, **{
    "compatible": _DT_5 + "rk3568-firefly-roc-pc.dts compatible",
    "model": _DT_5 + "rk3568-firefly-roc-pc.dts model",
    "kernel": "Rockchip Linux SDK 5.10 image uname -r",
    "cpufreq.policy0": _RK3568_DT + "cpu0_opp_table (408000..1992000 kHz)",
    "cpufreq.policy0.governor": _CPU_GOV_510, "cpufreq.policy0.governors": _CPU_GOV_510,
    "devfreq.fde40000.npu.frequencies_hz": (_RK3568_DT + "npu_opp_table 200, 297, 400, 600, 700, 800, 900 MHz; "
                                            "opp-1000000000 is status = \"disabled\""),
    "devfreq.fde40000.npu.governor": "rknpu driver rknpu_devfreq.c: rknpu_ondemand",
    "devfreq.fde40000.npu.boot_hz": CHOICE + "the middle OPP (held by rknpu_ondemand); no dump fixes it",
    "devfreq.fde60000.gpu.frequencies_hz": _RK3568_DT + "gpu_opp_table 200..800 MHz; Mali lists it descending",
    "devfreq.fde60000.gpu.governor": "mali_kbase_devfreq.c: simple_ondemand",
    "devfreq.fde60000.gpu.boot_hz": CHOICE + "the middle OPP under a load-driven governor with no load",
    "devfreq.dmc.frequencies_hz": _RK3568_DT + "dmc_opp_table 324/528/780/1056 MHz",
    "devfreq.dmc.governor": "BSP 5.10 drivers/devfreq/rockchip_dmc.c: dmc_ondemand",
    "devfreq.dmc.boot_hz": CHOICE + "the middle OPP under a load-driven governor with no load",
    "devfreq_governors": _DEVFREQ_LIST,
    "thermal.soc-thermal.millicelsius": CHOICE + "idle temperature 43 C",
    "thermal.gpu-thermal.millicelsius": CHOICE + "idle temperature 42 C",
    "thermal.soc-thermal.trips": CHOICE + "trip files not modelled on RK3568 (no caps are emulated)",
    "thermal.gpu-thermal.trips": CHOICE + "trip files not modelled on RK3568",
    "thermal_caps": CHOICE + "none: the former RK3568 NPU cap had no source and was removed",
    "cooling_devices": CHOICE + "none emulated on RK3568 (no source for its list)",
    "cpuidle_states": _RK3568_DT + "idle-states CPU_SLEEP (cpu-sleep); state0 WFI",
})

_RV_DT = "BSP 4.19 arch/arm/boot/dts/rv1126.dtsi "
RV1126 = dict(_COMMON, **{
    "compatible": "BSP 4.19 arch/arm/boot/dts/rv1126-evb-ddr3-v13.dts compatible",
    "model": "BSP 4.19 arch/arm/boot/dts/rv1126-evb-ddr3-v13.dts model",
    "kernel": "RV1126 Linux SDK image uname -r (4.19.111)",
    "cpufreq.policy0.cpus": _RV_DT + "cpu0..cpu3 share cpu0_opp_table",
    "cpufreq.policy0.frequencies_khz": _RV_DT + "cpu0_opp_table 408000..1512000 kHz",
    "cpufreq.policy0.governor": "BSP 4.19 arch/arm/configs/rv1126_defconfig: CONFIG_CPU_FREQ_DEFAULT_GOV_ONDEMAND=y",
    "cpufreq.policy0.governors": ("BSP 4.19 rv1126_defconfig: ondemand, userspace, performance governors only "
                                  "(no interactive, no powersave)"),
    "devfreq.ffbc0000.npu.frequencies_hz": _RV_DT + "npu_opp_table 200, 300, 396, 500, 600, 700, 800, 934 MHz",
    "devfreq.ffbc0000.npu.governor": "rv1126_defconfig: only CONFIG_DEVFREQ_GOV_USERSPACE; the NPU node runs userspace",
    "devfreq.ffbc0000.npu.boot_hz": CHOICE + "the middle OPP; no dump fixes it",
    "devfreq_governors": "rv1126_defconfig: the NPU devfreq lists only userspace",
    "thermal.cpu-thermal": CHOICE + "idle 45 C; trip files not modelled",
    "thermal.npu-thermal": CHOICE + "idle 46 C; trip files not modelled",
    "thermal_caps": CHOICE + "none: the former RV1126 NPU cap had no source and was removed",
    "cooling_devices": CHOICE + "none emulated on RV1126 (no source for its list)",
    "cooling_numbered": COOLING_NUMBERED,
    "has_compaction_proactiveness": "kernel 4.19: compaction_proactiveness was added in 5.9",
    "compaction_proactiveness": "mm/compaction.c: no compaction_proactiveness sysctl before 5.9 (not shown)",
    "thp_enabled": "rv1126_defconfig: no CONFIG_TRANSPARENT_HUGEPAGE",
    "rknpu_driver": "RV1126 Linux SDK: the NPU runs the galcore driver (RKNPU 1.x), no /sys/kernel/debug/rknpu",
    "rknpu_version_nodes": "RV1126 Linux SDK: galcore (RKNPU 1.x) driver, no rknpu driver, so no rknpu version node",
    "runtime_library": "RV1126 Linux SDK (RKNPU 1.x) runtime path /usr/lib/librknn_runtime.so",
    "runtime_version": CHOICE + "a librknn_runtime 1.7.3 version string of the real format",
    "cpuidle_states": _RV_DT + "idle-states CPU_SLEEP (cpu-sleep); state0 WFI",
})
RK3588["thermal_caps"] = ("drivers/soc/rockchip/rockchip_system_monitor.c on soc-thermal, one cap per node "
                          "(each cited under cap.<node>)")
RK3588["cooling_numbered"] = COOLING_NUMBERED
RK3568["cooling_numbered"] = COOLING_NUMBERED

# ---- RK3576 / RK3562 (issue 34) ----------------------------------------------------------------
# Written without the kernel trees at hand: every value below that names a file was recalled from Rockchip's
# BSP kernel 6.1 (rockchip-linux/kernel branch develop-6.1) or mainline, and says it is unverified.
UNVERIFIED = "not verified in this session (recalled, check against the file): "
_DT_61 = "BSP 6.1 arch/arm64/boot/dts/rockchip/"
_CPU_GOV_61 = CHOICE + ("BSP 6.1 rockchip_linux_defconfig governor set not checked; schedutil default and the "
                        "list order are emulator choices")
_BSP61 = {
    "kernel": CHOICE + "a BSP 6.1 release string (6.1.99); no board dump fixes it",
    "cooling_devices": CHOICE + "none emulated (no source for the list)",
    "thermal_caps": CHOICE + "none: no system-monitor cap is sourced for this SoC",
    "cooling_numbered": COOLING_NUMBERED,
    "cpuidle_states": CHOICE + "WFI and cpu-sleep as on the other RK35xx profiles (idle-states not checked)",
    "devfreq_governors": _DEVFREQ_LIST,
    "npu_cores": "rkdet/socs.py (Rockchip datasheets: RK3576 two NPU cores, 6 TOPS; RK3562 one core, 1 TOPS)",
}

_RK3576_DT = _DT_61 + "rk3576.dtsi "
RK3576 = dict(_COMMON, **_BSP61, **{
    "compatible": UNVERIFIED + "mainline arch/arm64/boot/dts/rockchip/rk3576-armsom-sige5.dts compatible",
    "model": UNVERIFIED + "mainline arch/arm64/boot/dts/rockchip/rk3576-armsom-sige5.dts model",
    "cpufreq.policy0.cpus": UNVERIFIED + _RK3576_DT + "cpu_l0..cpu_l3 (Cortex-A53) share cluster0_opp_table",
    "cpufreq.policy4.cpus": UNVERIFIED + _RK3576_DT + "cpu_b0..cpu_b3 (Cortex-A72) share cluster1_opp_table",
    "cpufreq.policy0.frequencies_khz": (UNVERIFIED + _RK3576_DT + "cluster0_opp_table 408000..1800000 kHz "
                                        "(top: RK3576 datasheet, A53 up to 1.8 GHz)"),
    "cpufreq.policy4.frequencies_khz": (UNVERIFIED + _RK3576_DT + "cluster1_opp_table 408000..2208000 kHz "
                                        "(top: RK3576 datasheet, A72 up to 2.2 GHz)"),
    "cpufreq.policy0.governor": _CPU_GOV_61, "cpufreq.policy0.governors": _CPU_GOV_61,
    "cpufreq.policy4.governor": _CPU_GOV_61, "cpufreq.policy4.governors": _CPU_GOV_61,
    "devfreq.27700000.npu": UNVERIFIED + _RK3576_DT + "rknpu: npu@27700000 (node name in rkdet/socs.py)",
    "devfreq.27700000.npu.frequencies_hz": (UNVERIFIED + _RK3576_DT + "npu_opp_table 300..950 MHz (top 950 MHz: "
                                            "issue 34's board report)"),
    "devfreq.27700000.npu.governor": "rknpu driver rknpu_devfreq.c: rknpu_ondemand is the NPU's default governor",
    "devfreq.27700000.npu.boot_hz": ("issue 34 board report: the NPU runs at 950 MHz (one vendor kernel boots it "
                                     "at 300 MHz instead; test it with a profile variant)"),
    "thermal.package-thermal.trips": (UNVERIFIED + "mainline arch/arm64/boot/dts/rockchip/rk3576.dtsi "
                                      "thermal-zones package-thermal: 115 C critical"),
    **{f"thermal.{z}.trips": UNVERIFIED + "mainline rk3576.dtsi thermal-zones " + z + ": no trips modelled"
       for z in ("bigcore-thermal", "littlecore-thermal", "gpu-thermal", "npu-thermal", "ddr-thermal")},
    **{f"thermal.{z}.millicelsius": CHOICE + "idle temperature about 40 C"
       for z in ("package-thermal", "bigcore-thermal", "littlecore-thermal", "gpu-thermal", "npu-thermal",
                 "ddr-thermal")},
})

_RK3562_DT = _DT_61 + "rk3562.dtsi "
RK3562 = dict(_COMMON, **_BSP61, **{
    "compatible": UNVERIFIED + _DT_61 + "rk3562-evb1-lp4x-v10.dts compatible",
    "model": UNVERIFIED + _DT_61 + "rk3562-evb1-lp4x-v10.dts model",
    "cpufreq.policy0.cpus": UNVERIFIED + _RK3562_DT + "cpu0..cpu3 (Cortex-A53) share cpu0_opp_table",
    "cpufreq.policy0.frequencies_khz": (UNVERIFIED + _RK3562_DT + "cpu0_opp_table 408000..2016000 kHz "
                                        "(top: RK3562 datasheet, A53 up to 2.0 GHz)"),
    "cpufreq.policy0.governor": _CPU_GOV_61, "cpufreq.policy0.governors": _CPU_GOV_61,
    "devfreq.ff300000.npu": UNVERIFIED + _RK3562_DT + "rknpu: npu@ff300000 (node name in rkdet/socs.py)",
    "devfreq.ff300000.npu.frequencies_hz": UNVERIFIED + _RK3562_DT + "npu_opp_table 300..1000 MHz",
    "devfreq.ff300000.npu.governor": "rknpu driver rknpu_devfreq.c: rknpu_ondemand is the NPU's default governor",
    "devfreq.ff300000.npu.boot_hz": CHOICE + "the middle OPP (held by rknpu_ondemand); no dump fixes it",
    "thermal.soc-thermal.trips": UNVERIFIED + _RK3562_DT + "thermal_zones soc-thermal: trip files not modelled",
    "thermal.soc-thermal.millicelsius": CHOICE + "idle temperature 42 C",
})
