"""Materialize a SoC profile as a plain-file sysfs/procfs tree under a root directory.

The plain tree is the emulated board's fallback filesystem (the FUSE one adds kernel semantics).
Board scripts run against it with ``RKDET_ROOT=<root>``, so this machine's real /sys and /proc are
never written. `tree_digest` lets tests prove a pin/restore cycle left the tree byte-identical.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from rkdet.emulator.socs import DevfreqNode, SocProfile

#: TEST CONTROL file of the runtime double in the image (the double reads $RKDET_ROOT/<this>)
RUNTIME_CONTROL = "etc/rkdet-emulator/runtime.json"


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text if isinstance(text, bytes) else text.encode()
    path.write_bytes(data)


def _symlink(link: Path, target: str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(target, link)


def _ranges(cpus: tuple[int, ...]) -> str:
    return f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else str(cpus[0])


def devfreq_initial_freq(freqs: tuple[int, ...], governor: str, boot_hz: int | None = None) -> int:
    """The frequency a devfreq node shows at boot under its default governor.

    `boot_hz` (the profile's sourced boot frequency, e.g. RK3588's NPU at 1 GHz) wins; otherwise
    performance/powersave give the top/bottom OPP and anything else the middle one (an emulator
    choice: no load has been seen yet).
    """
    ordered = tuple(sorted(freqs))
    if governor == "performance":
        return ordered[-1]
    if governor == "powersave":
        return ordered[0]
    if boot_hz is not None:
        return boot_hz
    return ordered[len(ordered) // 2]


def cooling_type(node: str) -> str:
    """The ``type`` of a devfreq node's cooling device: ``devfreq-<parent device name>``.

    drivers/thermal/devfreq_cooling.c names it so since "Use device name instead of an
    auto-numbering" (mainline 5.13, seen on RK3588 BSP boards as ``devfreq-fb000000.gpu``); older
    kernels (4.19, BSP 5.10.66) say ``thermal-devfreq-<n>``, which cannot be tied to a node.
    """
    return f"devfreq-{node}"


@dataclass(frozen=True)
class CoolingSpec:
    """One cooling device: the node it throttles, its ``type`` and its states' frequencies.

    `table_hz[k]` is the limit of state k (descending, in Hz; cpufreq OPPs are kHz * 1000).
    """

    node: str
    type: str
    table_hz: tuple[int, ...]

    @property
    def max_state(self) -> int:
        return len(self.table_hz) - 1


def cooling_specs(profile: SocProfile) -> tuple[CoolingSpec, ...]:
    """The profile's cooling devices in ``cooling_deviceN`` order.

    cpufreq policies are ``cpufreq-cpu<first cpu>`` (drivers/thermal/cpufreq_cooling.c); devfreq
    nodes ``devfreq-<node>`` or, on kernels that number them, ``thermal-devfreq-<n>`` counted over
    devfreq cooling devices only.
    """
    policies = {p.name: p for p in profile.cpu_policies}
    nodes = {n.name: n for n in profile.devfreq}
    specs: list[CoolingSpec] = []
    devfreq_index = 0
    for name in profile.cooling_devices:
        if name in policies:
            pol = policies[name]
            table = tuple(sorted((f * 1000 for f in pol.frequencies_khz), reverse=True))
            specs.append(CoolingSpec(name, f"cpufreq-cpu{pol.cpus[0]}", table))
        elif name in nodes:
            kind = f"thermal-devfreq-{devfreq_index}" if profile.cooling_numbered else cooling_type(name)
            devfreq_index += 1
            specs.append(CoolingSpec(name, kind, tuple(sorted(nodes[name].frequencies_hz, reverse=True))))
    return tuple(specs)


def cooling_nodes(profile: SocProfile) -> tuple[DevfreqNode, ...]:
    """Devfreq nodes that have a devfreq cooling device, in cooling-device order."""
    by_name = {node.name: node for node in profile.devfreq}
    return tuple(by_name[s.node] for s in cooling_specs(profile) if s.node in by_name)


def build_fake_tree(profile: SocProfile, root: Path) -> Path:
    """Write the profile's sysfs/procfs files under `root` and return `root`."""
    root = Path(root)
    compat = b"".join(c.encode() + b"\0" for c in profile.compatible)
    _write(root / "proc/device-tree/compatible", compat)
    _write(root / "proc/device-tree/model", profile.model.encode() + b"\0")
    _write(root / "sys/firmware/devicetree/base/compatible", compat)
    if profile.serial:  # one board's identity (the efuse CPU id u-boot puts in the device tree)
        _write(root / "proc/device-tree/serial-number", profile.serial.encode() + b"\0")
        _write(root / "sys/firmware/devicetree/base/serial-number", profile.serial.encode() + b"\0")
    _write(root / "proc/sys/kernel/osrelease", profile.kernel + "\n")
    _write(root / "proc/version", f"Linux version {profile.kernel} (rkdet-emulator) #1 SMP PREEMPT\n")
    if profile.has_compaction_proactiveness:
        _write(root / "proc/sys/vm/compaction_proactiveness", f"{profile.compaction_proactiveness}\n")
    if profile.thp_enabled is not None:
        _write(root / "sys/kernel/mm/transparent_hugepage/enabled", profile.thp_enabled + "\n")

    cpu_root = root / "sys/devices/system/cpu"
    _write(cpu_root / "online", f"0-{profile.cpu_count - 1}\n")
    _write(cpu_root / "possible", f"0-{profile.cpu_count - 1}\n")
    for policy in profile.cpu_policies:
        pdir = cpu_root / "cpufreq" / policy.name
        freqs = policy.frequencies_khz
        cur = max(freqs) if policy.governor == "performance" else sorted(freqs)[len(freqs) // 2]
        files = {
            "affected_cpus": " ".join(map(str, policy.cpus)),
            "related_cpus": " ".join(map(str, policy.cpus)),
            "cpuinfo_min_freq": str(min(freqs)),
            "cpuinfo_max_freq": str(max(freqs)),
            "cpuinfo_cur_freq": str(cur),
            "scaling_available_frequencies": " ".join(map(str, freqs)) + " ",
            "scaling_available_governors": " ".join(policy.governors) + " ",
            "scaling_governor": policy.governor,
            "scaling_cur_freq": str(cur),
            "scaling_min_freq": str(min(freqs)),
            "scaling_max_freq": str(max(freqs)),
            "scaling_setspeed": "<unsupported>",
            "scaling_driver": "cpufreq-dt",
        }
        for name, value in files.items():
            _write(pdir / name, value + "\n")
        for cpu in policy.cpus:
            _symlink(cpu_root / f"cpu{cpu}" / "cpufreq", f"../cpufreq/{policy.name}")
            for index, state in enumerate(profile.cpuidle_states):
                sdir = cpu_root / f"cpu{cpu}" / "cpuidle" / f"state{index}"
                _write(sdir / "name", state + "\n")
                _write(sdir / "disable", "0\n")

    for node in profile.devfreq:
        ddir = root / "sys/devices/platform" / node.name / "devfreq" / node.name
        freqs = node.frequencies_hz
        cur = devfreq_initial_freq(freqs, node.governor, node.boot_hz)
        files = {  # devfreq.c prints lists space-separated, the trailing space truncated
            "available_frequencies": " ".join(map(str, freqs)),
            "available_governors": " ".join(profile.devfreq_governors),
            "governor": node.governor,
            "cur_freq": str(cur),
            "target_freq": str(cur),
            "min_freq": str(min(freqs)),
            "max_freq": str(max(freqs)),
            "polling_interval": "50",
        }
        for name, value in files.items():
            _write(ddir / name, value + "\n")
        if node.governor == "userspace":
            _write(ddir / "userspace" / "set_freq", "undefined\n")  # governor_userspace: not yet written
        _symlink(root / "sys/class/devfreq" / node.name, f"../../devices/platform/{node.name}/devfreq/{node.name}")

    for index, zone in enumerate(profile.thermal_zones):
        zdir = root / "sys/class/thermal" / f"thermal_zone{index}"
        _write(zdir / "type", zone.type + "\n")
        _write(zdir / "temp", f"{zone.millicelsius}\n")
        _write(zdir / "mode", "enabled\n")
        for trip, (millicelsius, trip_type) in enumerate(zone.trips):
            _write(zdir / f"trip_point_{trip}_temp", f"{millicelsius}\n")
            _write(zdir / f"trip_point_{trip}_type", f"{trip_type}\n")
    for index, spec in enumerate(cooling_specs(profile)):  # cur_state: k = k OPPs below the top
        cdir = root / "sys/class/thermal" / f"cooling_device{index}"
        _write(cdir / "type", spec.type + "\n")
        _write(cdir / "max_state", f"{spec.max_state}\n")
        _write(cdir / "cur_state", "0\n")

    if profile.rknpu_driver:
        load = ", ".join(f"Core{i}:  0%" for i in range(profile.npu_cores))
        number = profile.rknpu_driver.rsplit("v", 1)[-1] if "v" in profile.rknpu_driver else profile.rknpu_driver
        if "debugfs" in profile.rknpu_version_nodes:
            _write(root / "sys/kernel/debug/rknpu/version", profile.rknpu_driver + "\n")
        _write(root / "sys/kernel/debug/rknpu/load", f"NPU load:  {load},\n")
        if "sysfs" in profile.rknpu_version_nodes:
            _write(root / "sys/module/rknpu/version", number + "\n")
        if "dmesg" in profile.rknpu_version_nodes:
            npu = profile.devfreq_of("npu")
            _write(root / "var/log/dmesg", f"[    2.311846] [drm] Initialized rknpu {number} 20240828 for "
                                           f"{npu.name if npu else 'npu'} on minor 1\n")
    _write(root / profile.runtime_library, b"\x7fELF\x02\x01\x01\0" + profile.runtime_version.encode() + b"\0")
    if profile.runtime_control:  # TEST CONTROL for the runtime double (never on a real board's image)
        _write(root / RUNTIME_CONTROL, profile.runtime_control + "\n")
    return root


def tree_digest(root: Path) -> dict[str, str]:
    """Map every file and symlink under `root` (relative path) to a digest of its content or target.

    Two digests are equal iff the trees are byte-identical (content, names, symlink targets).
    """
    root = Path(root)
    digest: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                digest[rel] = "link:" + os.readlink(path)
            else:
                digest[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        for d in list(dirnames):
            if (Path(dirpath) / d).is_symlink():
                dirnames.remove(d)
        if not filenames and not dirnames:
            digest[str(Path(dirpath).relative_to(root)) + "/"] = "dir"
    return digest
