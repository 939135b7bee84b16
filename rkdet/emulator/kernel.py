"""Kernel semantics of the emulated sysfs/procfs, independent of how it is served (FUSE).

Why: a plain-file tree accepts any write and never moves ``cur_freq``, so pin read-back, restore and
"the divergence lines up with a frequency change" prove nothing against it. Each attribute here is
a show/store pair modelled on the kernel's own (Linux 5.10, the Rockchip BSP kernel):

* cpufreq (drivers/cpufreq/cpufreq.c, cpufreq_userspace.c): ``scaling_governor`` takes a listed
  governor or fails EINVAL; ``scaling_min/max_freq`` are frequency-QoS requests (sscanf ``%u``),
  the shown policy limits are clamped to cpuinfo and max wins over min; ``scaling_setspeed`` is
  EINVAL unless the governor is userspace and shows ``<unsupported>`` then; ``scaling_cur_freq``
  follows the governor (performance: highest OPP <= max, powersave: lowest OPP >= min, userspace:
  the set speed clamped to the limits, others: load-driven).
* devfreq (drivers/devfreq/devfreq.c, governor_userspace.c): ``min_freq``/``max_freq`` are PM-QoS
  requests in kHz (max rounds up, 0 means no limit), the shown range is clamped to the OPP table
  and to the thermal cap and max wins over min; the target is clamped into the range and rounded
  to an OPP (up inside the range, down when clamped at max), never rejected; ``userspace/set_freq``
  exists only while the governor is userspace, shows ``undefined`` until written, then the value
  as written; a write that does not parse (an empty one) succeeds and changes nothing (store_freq
  ignores sscanf's result). ``available_governors`` is the one global governor list on every node
  (newest registered first), so any listed governor is accepted by any node; ``rknpu_ondemand``
  holds the frequency it was given (RK3588 boots the NPU at 1 GHz) instead of following load.
* sysctl ``vm.compaction_proactiveness`` (mm/compaction.c, proc_dointvec_minmax 0..100): out of
  range or non-numeric is EINVAL; only the first number is read ("50 60" stores 50); a write at a
  non-zero file offset is ignored (sysctl strict mode). Absent when the profile's image has no
  CONFIG_COMPACTION, as is THP's ``enabled`` without CONFIG_TRANSPARENT_HUGEPAGE.
* Thermal caps (Rockchip's system monitor): a freq-QoS max on cpufreq policies and devfreq nodes
  while their zone is above the trip, released below trip - hysteresis.
* Kernels before 5.4 (RV1126's 4.19) had no frequency QoS: there a min/max store that would cross
  the other fails EINVAL (cpufreq_set_policy, devfreq min_freq_store/max_freq_store).
* cooling devices (drivers/thermal/devfreq_cooling.c, cpufreq_cooling.c, thermal_sysfs.c): one
  ``cooling_deviceN`` per node of the profile's list, type ``cpufreq-cpu<N>``, ``devfreq-<node>``
  or (4.19, BSP 5.10.66) ``thermal-devfreq-<n>``; ``cur_state`` is the
  number of OPPs the thermal cap removes from the top (0: not throttled), ``max_state`` the OPP
  count - 1. Root may write ``cur_state`` (sscanf ``%ld``, 0..max_state, else EINVAL): the state's
  OPP becomes the cap until the thermal model's own state changes (the governor's next decision).
* Reads return ``value\\n``; every write() is one store. Files and layout come from the plain tree
  (`rkdet.emulator.fake_tree.build_fake_tree`), so both backends show the same paths and boot values.

Errors are raised as OSError(errno) for the FUSE layer to hand to the caller unchanged.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from rkdet.emulator.thermal import ControlReader, Controls, active_caps, zone_temperatures
from rkdet.emulator.fake_tree import CoolingSpec, build_fake_tree, cooling_specs, devfreq_initial_freq
from rkdet.emulator.socs import CpuPolicy, DevfreqNode, SocProfile

S32_MAX = 2**31 - 1  # PM QoS "no limit"
USERSPACE = "userspace"
RKNPU_ONDEMAND = "rknpu_ondemand"  # Rockchip's NPU governor: holds its frequency, ignores load


def kernel_error(code: int) -> OSError:
    """The error a store/show returns to the caller (errno preserved through FUSE)."""
    return OSError(code, os.strerror(code))


def parse_uint(text: str) -> int:
    """sscanf("%u"): leading blanks, then digits; no sign (the kernel's vsscanf rejects '-' here)."""
    match = re.match(r"\s*(\d+)", text)
    if not match:
        raise kernel_error(errno.EINVAL)
    return int(match.group(1))


def parse_word(text: str) -> str:
    """sscanf("%15s"): the first blank-separated word."""
    words = text.split()
    if not words:
        raise kernel_error(errno.EINVAL)
    return words[0]


def opp_ceil(freqs: tuple[int, ...], target: float) -> int:
    """Lowest OPP >= target, else the highest (dev_pm_opp_find_freq_ceil with floor fallback)."""
    above = [f for f in freqs if f >= target]
    return min(above) if above else max(freqs)


def opp_floor(freqs: tuple[int, ...], target: float) -> int:
    """Highest OPP <= target, else the lowest (dev_pm_opp_find_freq_floor with ceil fallback)."""
    below = [f for f in freqs if f <= target]
    return max(below) if below else min(freqs)


def kernel_version(release: str) -> tuple[int, int]:
    """(major, minor) of a `uname -r` string such as '4.19.111' or '5.10.160-rockchip-rk3588'."""
    match = re.match(r"(\d+)\.(\d+)", release)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


class CpufreqPolicy:
    """One cpufreq policy's state: governor, QoS requests, userspace set speed.

    `legacy` (kernels before 5.4, e.g. RV1126's 4.19): min/max are the policy's own values and a
    store that would make min > max fails EINVAL (cpufreq_set_policy) instead of max winning.
    """

    def __init__(self, policy: CpuPolicy, legacy: bool = False) -> None:
        self.spec = policy
        self.legacy = legacy
        self.freqs = tuple(sorted(policy.frequencies_khz))
        self.governor = policy.governor
        self.min_req = min(self.freqs)
        self.max_req = max(self.freqs)
        self.setspeed = 0

    def store_min(self, text: str) -> None:
        value = parse_uint(text)
        if self.legacy:
            lo, hi = self.limits()
            if value > hi:
                raise kernel_error(errno.EINVAL)
            value = min(max(value, self.freqs[0]), hi)
        self.min_req = value

    def store_max(self, text: str) -> None:
        value = parse_uint(text)
        if self.legacy:
            lo, _ = self.limits()
            if value < lo:
                raise kernel_error(errno.EINVAL)
            value = min(max(value, self.freqs[0]), self.freqs[-1])
        self.max_req = value

    def limits(self, cap_khz: Optional[int] = None) -> tuple[int, int]:
        """policy->min/max: clamped to cpuinfo and to a thermal cap (a freq-QoS max request of
        the system monitor), then min clamped to max (max wins)."""
        lo_hw, hi_hw = self.freqs[0], self.freqs[-1]
        hi = min(max(self.max_req, lo_hw), hi_hw)
        if cap_khz is not None:
            hi = min(hi, max(opp_floor(self.freqs, cap_khz), lo_hw))
        lo = min(max(self.min_req, lo_hw), hi)
        return lo, hi

    def _resolve(self, target: float, relation_low: bool, cap_khz: Optional[int] = None) -> int:
        lo, hi = self.limits(cap_khz)
        target = min(max(target, lo), hi)
        inside = tuple(f for f in self.freqs if lo <= f <= hi) or self.freqs
        return opp_ceil(inside, target) if relation_low else opp_floor(inside, target)

    def cur(self, load: Optional[float], cap_khz: Optional[int] = None) -> int:
        """policy->cur as the governor would set it (under a thermal cap when one is active)."""
        lo, hi = self.limits(cap_khz)
        if self.governor == "performance":
            return self._resolve(hi, False, cap_khz)
        if self.governor == "powersave":
            return self._resolve(lo, True, cap_khz)
        if self.governor == USERSPACE:
            return self._resolve(self.setspeed, True, cap_khz)
        if load is None:
            return self._resolve(self.freqs[len(self.freqs) // 2], True, cap_khz)
        return self._resolve(lo + load * (hi - lo), True, cap_khz)

    def store_governor(self, text: str, load: Optional[float]) -> None:
        name = parse_word(text)
        if name not in self.spec.governors:
            raise kernel_error(errno.EINVAL)
        if name == USERSPACE and self.governor != USERSPACE:
            self.setspeed = self.cur(load)  # cpufreq_userspace_policy_start: setspeed = policy->cur
        self.governor = name

    def store_setspeed(self, text: str) -> None:
        if self.governor != USERSPACE:  # store_scaling_setspeed: governor has no store_setspeed
            raise kernel_error(errno.EINVAL)
        self.setspeed = parse_uint(text)


class DevfreqDevice:
    """One devfreq device's state: governor, PM-QoS requests, userspace data.

    `legacy` (kernels before 5.4): min_freq/max_freq hold Hz as written, a store that would cross
    the other fails EINVAL, 0 resets to the table's end, and the shown values are not clamped to
    each other (the target still is: max wins there).
    """

    def __init__(self, node: DevfreqNode, legacy: bool = False, governors: tuple[str, ...] = ()) -> None:
        self.spec = node
        self.legacy = legacy
        self.governors = governors or (node.governor,)  # the one global list (devfreq_governor_list)
        self.freqs = tuple(sorted(node.frequencies_hz))
        self.governor = node.governor
        self.min_req_khz = 0
        self.max_req_khz = S32_MAX
        self.user_freq: Optional[int] = None  # userspace_data.valid/user_frequency
        self.previous = devfreq_initial_freq(node.frequencies_hz, node.governor, node.boot_hz)
        self.held = self.previous  # what rknpu_ondemand holds (it does not follow load)
        self.polling_ms = 50
        self.min_hz, self.max_hz = self.freqs[0], self.freqs[-1]  # legacy user limits

    def freq_range(self, cap_hz: Optional[int]) -> tuple[int, int]:
        """get_freq_range(): OPP table, user QoS, thermal cap; min clamped to max (max wins)."""
        lo, hi = self.freqs[0], self.freqs[-1]
        if cap_hz is not None:  # the cap: a QoS max (5.10) / disabled OPPs, scaling_max_freq (4.19)
            hi = max(opp_floor(self.freqs, cap_hz), self.freqs[0])
        if self.legacy:
            return max(lo, self.min_hz), min(hi, self.max_hz)
        lo = max(lo, self.min_req_khz * 1000)
        if self.max_req_khz != S32_MAX:
            hi = min(hi, self.max_req_khz * 1000)
        return min(lo, hi), hi

    def target(self, cap_hz: Optional[int], load: Optional[float]) -> int:
        """devfreq_update_target(): governor's wish, clamped into the range, rounded to an OPP."""
        lo, hi = self.freq_range(cap_hz)
        if self.governor == "performance":
            wish: float = float(2**64)
        elif self.governor == "powersave":
            wish = 0
        elif self.governor == USERSPACE:
            wish = self.user_freq if self.user_freq is not None else self.previous
        elif self.governor == RKNPU_ONDEMAND:
            wish = self.held
        elif load is None:
            wish = devfreq_initial_freq(self.spec.frequencies_hz, self.spec.governor, self.spec.boot_hz)
        else:
            wish = lo + load * (hi - lo)
        freq, upper_bound = max(wish, lo), False
        if freq > hi:  # DEVFREQ_FLAG_LEAST_UPPER_BOUND: the OPP at or below max (max wins)
            freq, upper_bound = hi, True
        inside = tuple(f for f in self.freqs if min(lo, hi) <= f <= hi) or self.freqs
        return opp_floor(inside, freq) if upper_bound else opp_ceil(inside, freq)

    def store_governor(self, text: str, load: Optional[float] = None) -> None:
        name = parse_word(text)
        if name not in self.governors:
            raise kernel_error(errno.EINVAL)  # try_then_request_governor found no such governor
        if name == self.governor:
            return
        if name == USERSPACE:
            self.user_freq = None  # userspace_init: fresh data, set_freq shows "undefined"
        if name == RKNPU_ONDEMAND:  # it keeps the frequency it is handed: the one the user's limits
            self.held = self.target(None, load)  # and the old governor ask for (a thermal cap stays a cap)
        self.governor = name

    def store_set_freq(self, text: str) -> None:
        """governor_userspace.c store_freq: sscanf("%lu") with its result unchecked, so a write
        that does not parse (an empty one) succeeds and leaves the wanted frequency as it was."""
        match = re.match(r"\s*(\d+)", text)
        if match:
            self.user_freq = int(match.group(1))

    def store_min(self, text: str) -> None:
        value = parse_uint(text)
        if self.legacy:
            if value and value > self.max_hz:
                raise kernel_error(errno.EINVAL)
            self.min_hz = value or self.freqs[0]
            return
        self.min_req_khz = value // 1000  # "Round down to kHz for PM QoS"

    def store_max(self, text: str) -> None:
        value = parse_uint(text)
        if self.legacy:
            if value and value < self.min_hz:
                raise kernel_error(errno.EINVAL)
            self.max_hz = value or self.freqs[-1]
            return
        self.max_req_khz = -(-value // 1000) if value else S32_MAX  # round up; 0 = no limit


class CoolingDevice:
    """A devfreq cooling device: its state mirrors the cap on its node; root may override it.

    set_cur_state puts the QoS max at freq_table[state] (OPPs in descending order). The thermal
    framework only re-applies the governor's target when that target changes (thermal_cdev_update
    runs for a changed instance), so a written state holds until the model's own state moves.
    """

    def __init__(self, spec: CoolingSpec) -> None:
        self.node = spec.node
        self.table = spec.table_hz  # state k -> table[k] (Hz, descending)
        self.max_state = spec.max_state
        self.override: Optional[int] = None
        self.override_base = 0  # the model's state when the override was written

    def model_state(self, cap_hz: Optional[int]) -> int:
        """The state the thermal governor would set for a cap (OPPs above the capped top)."""
        if cap_hz is None:
            return 0
        top = max(opp_floor(self.table, cap_hz), self.table[-1])
        return sum(1 for f in self.table if f > top)

    def effective(self, cap_hz: Optional[int]) -> int:
        """The shown and applied state: the override while the model's state is unchanged."""
        state = self.model_state(cap_hz)
        if self.override is not None and state != self.override_base:
            self.override = None  # the governor decided again
        return state if self.override is None else self.override

    def store(self, text: str, cap_hz: Optional[int]) -> None:
        match = re.match(r"\s*([+-]?\d+)", text)  # cur_state_store: sscanf("%ld")
        if not match:
            raise kernel_error(errno.EINVAL)
        value = int(match.group(1))
        if value < 0 or value > self.max_state:  # devfreq_cooling_set_cur_state: state > max_state
            raise kernel_error(errno.EINVAL)
        self.override, self.override_base = value, self.model_state(cap_hz)

    def cap_of(self, state: int) -> Optional[int]:
        """The QoS max a state puts on the node (None: state 0, no limit)."""
        return self.table[state] if state > 0 else None


@dataclass
class Attr:
    """A sysfs/procfs attribute: show() gives the bytes read; store(text) is one write()."""

    show: Callable[[], bytes]
    store: Optional[Callable[[str], None]] = None
    mode: int = 0o444
    present: Optional[Callable[[], bool]] = None  # None: always present
    sysctl: bool = False  # procfs sysctl: writes at a non-zero offset are ignored


@dataclass
class Snapshot:
    """One evaluation of the board: controls, temperatures, active caps."""

    controls: Controls
    temps: dict[str, int]
    caps: dict[str, int]
    cooling: dict[str, int]  # node -> cooling device cur_state


class KernelBoard:
    """The emulated kernel: the plain tree's layout with live attributes overlaid."""

    def __init__(self, profile: SocProfile, control_dir: Path) -> None:
        self.profile = profile
        self.controls = ControlReader(control_dir)
        legacy = kernel_version(profile.kernel) < (5, 4)  # before PM-QoS frequency limits
        self.cpufreq = {p.name: CpufreqPolicy(p, legacy) for p in profile.cpu_policies}
        self.devfreq = {n.name: DevfreqDevice(n, legacy, profile.devfreq_governors) for n in profile.devfreq}
        self.cooling = {s.node: CoolingDevice(s) for s in cooling_specs(profile)}
        self.held_caps: set[str] = set()  # caps active at the last evaluation (hysteresis)
        self.zone_mode = {z.type: "enabled" for z in profile.thermal_zones}
        self.compaction = profile.compaction_proactiveness
        self.thp = profile.thp_enabled
        self.dirs: dict[str, Optional[Callable[[], bool]]] = {"": None}
        self.files: dict[str, Attr] = {}
        self.links: dict[str, str] = {}
        self._load_plain_tree()
        self._overlay()

    # -- evaluation -------------------------------------------------------------------------
    def load(self, kind: str, controls: Optional[Controls] = None) -> Optional[float]:
        return (controls or self.controls.read()).load.get(kind)

    def _demand(self, controls: Controls) -> dict[str, float]:
        """(f / f_max) * load per heat source, from the governors' demanded clocks (before any cap)."""
        demand: dict[str, float] = {}
        for dev in self.devfreq.values():
            load = controls.load.get(dev.spec.kind)
            if load:
                demand[dev.spec.kind] = dev.target(None, load) / dev.freqs[-1] * load
        cpu_load = controls.load.get("cpu")
        if cpu_load and self.cpufreq:
            ratio = sum(p.cur(cpu_load) / p.freqs[-1] for p in self.cpufreq.values()) / len(self.cpufreq)
            demand["cpu"] = ratio * cpu_load
        return demand

    def _model(self, controls: Controls) -> tuple[dict[str, int], dict[str, int]]:
        """Zone temperatures and the thermal model's caps (before any cooling-state override)."""
        temps = zone_temperatures(self.profile, self._demand(controls), controls)
        disabled = {z for z, mode in self.zone_mode.items() if mode != "enabled"}
        return temps, active_caps(self.profile, temps, controls, disabled, self.held_caps)

    def evaluate(self) -> Snapshot:
        """Read the controls, compute every zone's temperature and which caps are active."""
        controls = self.controls.read()
        temps, caps = self._model(controls)
        states: dict[str, int] = {}
        for name, cdev in self.cooling.items():  # a capped node's cap is its cooling device's state
            states[name] = cdev.effective(caps.get(name))
            cap = cdev.cap_of(states[name])
            if cap is None:
                caps.pop(name, None)
            else:
                caps[name] = cap
        return Snapshot(controls, temps, caps, states)

    def devfreq_cur(self, name: str) -> int:
        snap = self.evaluate()
        dev = self.devfreq[name]
        dev.previous = dev.target(snap.caps.get(name), snap.controls.load.get(dev.spec.kind))
        return dev.previous

    # -- tree -------------------------------------------------------------------------------
    def _load_plain_tree(self) -> None:
        """Reuse the plain tree for layout and static content, so the two backends agree."""
        # tmpfs when there is one: ~150 file creations cost ~0.7 s on a slow ext4 /tmp, 20 ms on tmpfs
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        with tempfile.TemporaryDirectory(prefix="rkdet-layout-", dir=shm) as tmp:
            root = build_fake_tree(self.profile, Path(tmp))
            for dirpath, dirnames, filenames in os.walk(root):
                rel_dir = os.path.relpath(dirpath, root)
                rel_dir = "" if rel_dir == "." else rel_dir
                for name in list(dirnames) + filenames:
                    full = os.path.join(dirpath, name)
                    rel = os.path.join(rel_dir, name)
                    if os.path.islink(full):
                        self.links[rel] = os.readlink(full)
                    elif os.path.isdir(full):
                        self.dirs[rel] = None
                    else:
                        data = Path(full).read_bytes()
                        kernel = rel.startswith(("sys/", "proc/"))
                        self.files[rel] = Attr(show=lambda d=data: d, mode=0o444 if kernel else 0o644)
                dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]

    def _set(self, rel: str, attr: Attr) -> None:
        parent = os.path.dirname(rel)
        while parent and parent not in self.dirs:  # a directory the plain tree has no file in
            self.dirs[parent] = attr.present
            parent = os.path.dirname(parent)
        self.files[rel] = attr

    def _overlay(self) -> None:
        for name, policy in self.cpufreq.items():
            self._overlay_cpufreq(f"sys/devices/system/cpu/cpufreq/{name}", policy)
        for name, dev in self.devfreq.items():
            self._overlay_devfreq(f"sys/devices/platform/{name}/devfreq/{name}", dev)
        for index, zone in enumerate(self.profile.thermal_zones):
            zdir = f"sys/class/thermal/thermal_zone{index}"
            self._set(f"{zdir}/temp", Attr(show=lambda z=zone.type: _line(self.evaluate().temps[z])))
            self._set(f"{zdir}/mode", Attr(show=lambda z=zone.type: _line(self.zone_mode[z]),
                                           store=lambda t, z=zone.type: self._store_zone_mode(z, t), mode=0o644))
        for index, spec in enumerate(cooling_specs(self.profile)):
            self._overlay_cooling(f"sys/class/thermal/cooling_device{index}", self.cooling[spec.node])
        for rel in [r for r in self.files if re.fullmatch(r"sys/devices/system/cpu/cpu\d+/cpuidle/state\d+/disable", r)]:
            state = {"value": 0}
            self._set(rel, Attr(show=lambda s=state: _line(s["value"]),
                                store=lambda t, s=state: s.update(value=int(_kstrtouint(t) != 0)), mode=0o644))
        if self.profile.has_compaction_proactiveness:
            self._set("proc/sys/vm/compaction_proactiveness",
                      Attr(show=lambda: _line(self.compaction), store=self._store_compaction, mode=0o644, sysctl=True))
        if self.profile.thp_enabled is not None:
            self._set("sys/kernel/mm/transparent_hugepage/enabled",
                      Attr(show=lambda: _line(self.thp), store=self._store_thp, mode=0o644))
        if self.profile.rknpu_driver:
            self._set("sys/kernel/debug/rknpu/load", Attr(show=self._show_npu_load))

    def cpu_cap_khz(self, policy: str) -> Optional[int]:
        """The thermal cap on a cpufreq policy now (kHz), or None."""
        cap = self.evaluate().caps.get(policy)
        return None if cap is None else cap // 1000

    def _overlay_cpufreq(self, pdir: str, pol: CpufreqPolicy) -> None:
        name = pol.spec.name
        cur = lambda: _line(pol.cur(self.load("cpu"), self.cpu_cap_khz(name)))  # noqa: E731
        self._set(f"{pdir}/scaling_cur_freq", Attr(show=cur))
        self._set(f"{pdir}/cpuinfo_cur_freq", Attr(show=cur, mode=0o400))
        self._set(f"{pdir}/scaling_governor", Attr(show=lambda: _line(pol.governor), mode=0o644,
                                                   store=lambda t: pol.store_governor(t, self.load("cpu"))))
        limit = lambda i: _line(pol.limits(self.cpu_cap_khz(name))[i])  # noqa: E731
        self._set(f"{pdir}/scaling_min_freq", Attr(show=lambda: limit(0), mode=0o644, store=pol.store_min))
        self._set(f"{pdir}/scaling_max_freq", Attr(show=lambda: limit(1), mode=0o644, store=pol.store_max))
        self._set(f"{pdir}/scaling_setspeed", Attr(
            show=lambda: cur() if pol.governor == USERSPACE else b"<unsupported>\n",
            store=pol.store_setspeed, mode=0o644))

    def _overlay_devfreq(self, ddir: str, dev: DevfreqDevice) -> None:
        name = dev.spec.name
        cur = lambda: _line(self.devfreq_cur(name))  # noqa: E731
        rng = lambda i: _line(dev.freq_range(self.evaluate().caps.get(name))[i])  # noqa: E731
        self._set(f"{ddir}/cur_freq", Attr(show=cur))
        self._set(f"{ddir}/target_freq", Attr(show=cur))
        self._set(f"{ddir}/governor", Attr(show=lambda: _line(dev.governor), store=self._devfreq_governor_store(dev),
                                           mode=0o644))
        def settled(store: Callable[[str], None]) -> Callable[[str], None]:
            def run(text: str) -> None:  # the store ends in update_devfreq(): previous_freq moves now
                store(text)
                self.devfreq_cur(name)
            return run
        self._set(f"{ddir}/min_freq", Attr(show=lambda: rng(0), store=settled(dev.store_min), mode=0o644))
        self._set(f"{ddir}/max_freq", Attr(show=lambda: rng(1), store=settled(dev.store_max), mode=0o644))
        self._set(f"{ddir}/polling_interval", Attr(show=lambda: _line(dev.polling_ms), mode=0o644,
                                                   store=lambda t: setattr(dev, "polling_ms", parse_uint(t))))
        is_user = lambda: dev.governor == USERSPACE  # noqa: E731
        self.dirs[f"{ddir}/userspace"] = is_user
        self._set(f"{ddir}/userspace/set_freq", Attr(
            show=lambda: b"undefined\n" if dev.user_freq is None else _line(dev.user_freq),
            store=settled(dev.store_set_freq), mode=0o644, present=is_user))

    def _overlay_cooling(self, cdir: str, cdev: CoolingDevice) -> None:
        def store(text: str) -> None:
            cdev.store(text, self._model(self.controls.read())[1].get(cdev.node))
        self._set(f"{cdir}/cur_state", Attr(show=lambda: _line(self.evaluate().cooling[cdev.node]), store=store,
                                            mode=0o644))

    def _devfreq_governor_store(self, dev: DevfreqDevice) -> Callable[[str], None]:
        def store(text: str) -> None:
            self.devfreq_cur(dev.spec.name)  # settle previous_freq before the switch
            dev.store_governor(text, self.load(dev.spec.kind))
        return store

    def _store_zone_mode(self, zone: str, text: str) -> None:
        word = text.strip()
        if word not in ("enabled", "disabled"):
            raise kernel_error(errno.EINVAL)
        self.zone_mode[zone] = word

    def _store_compaction(self, text: str) -> None:
        # proc_dointvec_minmax on a one-int table: the first number, which must end at a blank;
        # what follows it is not parsed ("50 60" stores 50)
        match = re.match(r"\s*(-?\d+)(?:\s|$)", text)
        if not match or not 0 <= int(match.group(1)) <= 100:
            raise kernel_error(errno.EINVAL)
        self.compaction = int(match.group(1))

    def _store_thp(self, text: str) -> None:
        choices = self.thp.replace("[", "").replace("]", "").split()
        word = text.strip()
        if word not in choices:
            raise kernel_error(errno.EINVAL)
        self.thp = " ".join(f"[{c}]" if c == word else c for c in choices)

    def _show_npu_load(self) -> bytes:
        load = self.load("npu") or 0.0
        cores = ", ".join(f"Core{i}:{round(load * 100):>3}%" for i in range(self.profile.npu_cores))
        return f"NPU load:  {cores},\n".encode()

    # -- lookup for the filesystem layer ----------------------------------------------------
    def _dir_present(self, rel: str) -> bool:
        while rel:
            present = self.dirs.get(rel, None)
            if rel not in self.dirs or (present is not None and not present()):
                return False
            rel = os.path.dirname(rel)
        return True

    def kind(self, rel: str) -> Optional[str]:
        """'dir', 'file', 'link' or None (absent, e.g. set_freq under a non-userspace governor)."""
        if rel in self.links:
            return "link" if self._dir_present(os.path.dirname(rel)) else None
        if rel in self.files:
            attr = self.files[rel]
            ok = attr.present is None or attr.present()
            return "file" if ok and self._dir_present(os.path.dirname(rel)) else None
        if rel in self.dirs:
            return "dir" if self._dir_present(rel) else None
        return None

    def listdir(self, rel: str) -> list[str]:
        names = [p for table in (self.dirs, self.files, self.links) for p in table
                 if p and os.path.dirname(p) == rel]
        return sorted(os.path.basename(p) for p in set(names) if self.kind(p))


def _line(value: object) -> bytes:
    return f"{value}\n".encode()


def _kstrtouint(text: str) -> int:
    """kstrtouint(buf, 0): the whole string is one number (one trailing newline allowed)."""
    body = text[:-1] if text.endswith("\n") else text
    try:
        value = int(body, 0)
    except ValueError:
        raise kernel_error(errno.EINVAL) from None
    if value < 0:
        raise kernel_error(errno.EINVAL)
    if value > 2**32 - 1:
        raise kernel_error(errno.ERANGE)
    return value
