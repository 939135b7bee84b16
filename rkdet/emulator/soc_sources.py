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
# Checked against the files, read in this session: Rockchip's BSP 6.1 device trees as carried by Armbian's
# rockchip kernel tree (the vendor develop-6.1 tree with Armbian's board files), at the commits named, and
# mainline for the ArmSoM Sige5 board file. A value no file fixes says so (UNVERIFIED, or an emulator choice).
UNVERIFIED = "not verified (no file found for it in this session): "
_RK3576_DTSI = ("armbian/linux-rockchip@b66be74e62a6a8d7e9e8ff3e2713c438f010a928 "
                "arch/arm64/boot/dts/rockchip/rk3576.dtsi (BSP 6.1) ")
_RK3562_DTSI = ("armbian/linux-rockchip@8529d2cbe05efec239d92946a10cf02ec6d9b0d0 "
                "arch/arm64/boot/dts/rockchip/rk3562.dtsi (BSP 6.1) ")
_RK3562_EVB = ("armbian/linux-rockchip@61814cc01d627947f9c22a09428522b3e50348e1 "
               "arch/arm64/boot/dts/rockchip/rk3562-evb1-lp4x-v10.dtsi ")
_SIGE5_DTS = "torvalds/linux@ef4b19d3406c0a3e380892a56c5d607164645d81 arch/arm64/boot/dts/rockchip/rk3576-armsom-sige5.dts "
_CPU_GOV_61 = CHOICE + ("BSP 6.1 rockchip_linux_defconfig governor set not checked; schedutil default and the "
                        "list order are emulator choices")
_MALI = "mali_kbase_devfreq.c: simple_ondemand, available_frequencies listed descending (as on RK3588)"
_BSP61 = {
    "kernel": CHOICE + "a BSP 6.1 release string (6.1.99); no board dump fixes it",
    "cooling_devices": CHOICE + "none emulated (the device trees' cooling maps are not modelled as devices)",
    "thermal_caps": CHOICE + "none: the system monitor's per-OPP temperature limits are not modelled for this SoC",
    "cooling_numbered": COOLING_NUMBERED,
    "devfreq_governors": _DEVFREQ_LIST,
}

RK3576 = dict(_COMMON, **_BSP61, **{
    "npu_cores": (_RK3576_DTSI + "rknpu: npu@27700000: two register ranges, interrupts npu0_irq/npu1_irq, power "
                  "domains npu0/npu1 (RK3576_PD_NPU0/NPU1): two NPU cores"),
    "compatible": _SIGE5_DTS + 'compatible = "armsom,sige5", "rockchip,rk3576"',
    "model": _SIGE5_DTS + 'model = "ArmSoM Sige5"',
    "cpufreq.policy0.cpus": _RK3576_DTSI + "cpu_l0..cpu_l3 (arm,cortex-a53, reg 0x0..0x3) share cluster0_opp_table",
    "cpufreq.policy4.cpus": _RK3576_DTSI + "cpu_b0..cpu_b3 (arm,cortex-a72, reg 0x100..0x103) share cluster1_opp_table",
    "cpufreq.policy0.frequencies_khz": (_RK3576_DTSI + "cluster0-opp-table: opp-408000000 .. opp-2208000000 "
                                        "(408, 600, 816, 1008, 1200, 1416, 1608, 1800, 2016, 2208 MHz; no "
                                        "opp-supported-hw: every OPP listed)"),
    "cpufreq.policy4.frequencies_khz": (_RK3576_DTSI + "cluster1-opp-table: opp-408000000 .. opp-2304000000 "
                                        "(the little table's OPPs plus 2304 MHz)"),
    "cpufreq.policy0.governor": _CPU_GOV_61, "cpufreq.policy0.governors": _CPU_GOV_61,
    "cpufreq.policy4.governor": _CPU_GOV_61, "cpufreq.policy4.governors": _CPU_GOV_61,
    "devfreq.27700000.npu": _RK3576_DTSI + "rknpu: npu@27700000 (the devfreq node name in rkdet/socs.py)",
    "devfreq.27700000.npu.frequencies_hz": (_RK3576_DTSI + "npu-opp-table: opp-300000000 .. opp-1000000000 "
                                            "(300..1000 MHz in 100 MHz steps); issue 34's 950 MHz board report is "
                                            "not an OPP of this table"),
    "devfreq.27700000.npu.governor": "rknpu driver rknpu_devfreq.c: rknpu_ondemand is the NPU's default governor",
    "devfreq.27700000.npu.boot_hz": (CHOICE + "the top OPP, held by rknpu_ondemand (the dtsi assigns clk_npu 198 MHz "
                                     "at probe and names no rockchip,init-freq); the vendor kernel that boots it at "
                                     "300 MHz (issue 34's board report) is a profile variant"),
    "devfreq.27800000.gpu": _RK3576_DTSI + "gpu: gpu@27800000 (arm,mali-bifrost)",
    "devfreq.27800000.gpu.frequencies_hz": _RK3576_DTSI + "gpu-opp-table: 300, 400, 500, 600, 700, 800, 900, 950 MHz",
    "devfreq.27800000.gpu.governor": _MALI,
    "devfreq.27800000.gpu.boot_hz": CHOICE + "the middle OPP under a load-driven governor with no load",
    "cpuidle_states": _RK3576_DTSI + "idle-states: CPU_SLEEP (cpu-sleep) only; state0 is WFI",
    **{f"thermal.{z}.trips": (_RK3576_DTSI + f"thermal-zones {z} (tsadc {i}): one trip, 115 C critical (hysteresis 2 C)")
       for i, z in ((0, "soc-thermal"), (1, "bigcore-thermal"), (3, "ddr-thermal"), (4, "npu-thermal"),
                    (5, "gpu-thermal"))},
    "thermal.little-core-thermal.trips": (_RK3576_DTSI + "thermal-zones little-core-thermal (tsadc 2): 75 C passive, "
                                          "85 C passive (cooling maps cpu_l0, cpu_b0, gpu), 115 C critical; the "
                                          "system monitor's zone"),
    **{f"thermal.{z}.millicelsius": CHOICE + "idle temperature about 40 C"
       for z in ("soc-thermal", "bigcore-thermal", "little-core-thermal", "ddr-thermal", "npu-thermal", "gpu-thermal")},
})

RK3562 = dict(_COMMON, **_BSP61, **{
    "npu_cores": (_RK3562_DTSI + "rknpu: npu@ff300000: one register range, one interrupt, one power domain "
                  "(RK3562_PD_NPU): one NPU core"),
    "compatible": _RK3562_EVB + 'compatible = "rockchip,rk3562-evb1-lp4x-v10", "rockchip,rk3562"',
    "model": _RK3562_EVB + 'model = "Rockchip RK3562 EVB1 LP4X V10 Board" (the .dts includes this .dtsi)',
    "cpufreq.policy0.cpus": _RK3562_DTSI + "cpu0..cpu3 (arm,cortex-a53) share cpu0_opp_table",
    "cpufreq.policy0.frequencies_khz": (_RK3562_DTSI + "cpu0-opp-table, RK3562 OPPs (opp-supported-hw 0xf9): "
                                        "408, 600, 816, 1008, 1200, 1416, 1608, 1800, 2016 MHz (the RK3562J's "
                                        "opp-j-* are another chip)"),
    "cpufreq.policy0.governor": _CPU_GOV_61, "cpufreq.policy0.governors": _CPU_GOV_61,
    "devfreq.ff300000.npu": _RK3562_DTSI + "rknpu: npu@ff300000 (the devfreq node name in rkdet/socs.py)",
    "devfreq.ff300000.npu.frequencies_hz": (_RK3562_DTSI + "npu-opp-table, RK3562 OPPs (opp-supported-hw 0xf9): "
                                            "300..1000 MHz in 100 MHz steps"),
    "devfreq.ff300000.npu.governor": "rknpu driver rknpu_devfreq.c: rknpu_ondemand is the NPU's default governor",
    "devfreq.ff300000.npu.boot_hz": (_RK3562_DTSI + "npu-opp-table rockchip,init-freq = <1000000> (kHz): 1 GHz at "
                                     "boot, held by rknpu_ondemand"),
    "devfreq.ff320000.gpu": _RK3562_DTSI + "gpu: gpu@ff320000 (arm,mali-bifrost)",
    "devfreq.ff320000.gpu.frequencies_hz": (_RK3562_DTSI + "gpu-opp-table, RK3562 OPPs (opp-supported-hw 0xf9): "
                                            "300..900 MHz in 100 MHz steps"),
    "devfreq.ff320000.gpu.governor": _MALI,
    "devfreq.ff320000.gpu.boot_hz": CHOICE + "the middle OPP under a load-driven governor with no load",
    "cpuidle_states": _RK3562_DTSI + "idle-states: CPU_SLEEP (cpu-sleep) only; state0 is WFI",
    "thermal.soc-thermal.trips": (_RK3562_DTSI + "thermal-zones soc-thermal (tsadc 0, the only zone): 75 C passive, "
                                  "85 C passive (cooling maps cpu0, gpu), 115 C critical"),
    "thermal.soc-thermal.millicelsius": CHOICE + "idle temperature 42 C",
})
