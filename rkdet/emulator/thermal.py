"""Thermal model and test controls of the emulated board.

Why: on a real board the NPU heats up under load and the vendor thermal table lowers its clock
below the pinned value; a determinism tool must notice that ("pinned 1 GHz, ran at 800 MHz"). The
emulator reproduces it: zone temperatures rise with clock and load, and above a trip point the
SoC profile's caps (`SocProfile.thermal_caps`: on RK3588 Rockchip's system monitor, which caps
GPU/NPU at 800 MHz, little cores at 1608000 and big cores at 2208000 kHz above 85 C of soc-thermal
and releases them 5 C lower) lower the real ``cur_freq`` and ``max_freq`` / ``scaling_max_freq``.

TEST CONTROLS live outside ``sys/`` and ``proc/``, in a control directory (one small file per knob,
plain decimal text; a missing file means the default; write to a temporary name and rename, as
`Control` does). The board scripts never see it; tests and the emulated runtime write it:

    ambient_millicelsius          ambient temperature (default 25000)
    forced_millicelsius           force every thermal zone to this value (delete to release)
    forced_millicelsius.<zone>    force one zone by its type, e.g. forced_millicelsius.npu-thermal
    trip_millicelsius             override the trip point of every cap
    npu_cap_hz                    override the NPU's cap (the frequency it is held to above the trip)
    load.npu load.gpu load.ddr load.cpu
                                  busy percentage 0..100 seen by load-driven governors and the
                                  model (unset: the governor's boot frequency, no heating); the
                                  emulated rknnlite runtime writes load.npu while it runs

Model (steady state, no time constant, so tests are deterministic): a zone's temperature is its
profile idle value + (ambient - 25 C) + sum over heat sources of weight * gain * (f / f_max) * load.
The clocks used are the governors' *demanded* ones (before the cap), so a cap holds for as long as
the demand that tripped it; the oscillation of a real throttle around the trip is not modelled.
A zone whose ``mode`` is ``disabled`` applies no caps.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from rkdet.emulator.socs import SocProfile, ThermalCap
from rkdet.errors import InputError

log = logging.getLogger("rkdet.emulator.thermal")

DEFAULT_AMBIENT_MC = 25000
#: heating (millicelsius) of a source at full clock and 100 % load
GAIN_MC = {"npu": 35000, "gpu": 30000, "cpu": 30000, "ddr": 5000}
LOAD_KINDS = ("npu", "gpu", "ddr", "cpu")
_INT_KNOBS = ("ambient_millicelsius", "forced_millicelsius", "trip_millicelsius", "npu_cap_hz")


@dataclass(frozen=True)
class Controls:
    """One reading of the control directory."""

    ambient_mc: int = DEFAULT_AMBIENT_MC
    forced_mc: dict[str, int] = field(default_factory=dict)  # zone type or "*" -> mC
    trip_mc: int | None = None
    npu_cap_hz: int | None = None
    load: dict[str, float] = field(default_factory=dict)  # kind -> fraction 0..1

    def forced(self, zone: str) -> int | None:
        return self.forced_mc.get(zone, self.forced_mc.get("*"))


def _parse(name: str, text: str) -> int | float:
    value = float(text.strip()) if name.startswith("load.") else int(text.strip())
    if name.startswith("load.") and not 0 <= value <= 100:
        raise ValueError("load is a percentage 0..100")
    if name == "npu_cap_hz" and value <= 0:
        raise ValueError("must be > 0")
    return value


def _is_knob(name: str) -> bool:
    return name in _INT_KNOBS or name.startswith(("forced_millicelsius.", "load."))


def knob_names(profile: SocProfile) -> set[str]:
    """Every control file name that means something for this profile."""
    names = set(_INT_KNOBS) | {f"load.{k}" for k in LOAD_KINDS}
    return names | {f"forced_millicelsius.{z.type}" for z in profile.thermal_zones}


class ControlReader:
    """Reads the control directory on every evaluation; logs each bad file once (no traceback)."""

    def __init__(self, control_dir: Path) -> None:
        self.dir = Path(control_dir)
        self._reported: set[tuple[str, str]] = set()

    def read(self) -> Controls:
        values: dict[str, int | float] = {}
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return Controls()
        for entry in entries:
            if not _is_knob(entry.name) or not entry.is_file():
                continue  # temp files, and other parts' controls sharing the dir (fault.json)
            try:
                text = Path(entry.path).read_text()
            except OSError:
                continue  # replaced between scandir and open: the next read sees the new file
            try:
                values[entry.name] = _parse(entry.name, text)
            except ValueError as err:
                if (entry.name, text) not in self._reported:
                    self._reported.add((entry.name, text))
                    log.error("control %s: ignoring %r (%s)", entry.path, text.strip(), err)
        forced = {k.split(".", 1)[1]: int(v) for k, v in values.items() if k.startswith("forced_millicelsius.")}
        if "forced_millicelsius" in values:
            forced["*"] = int(values["forced_millicelsius"])
        return Controls(
            ambient_mc=int(values.get("ambient_millicelsius", DEFAULT_AMBIENT_MC)),
            forced_mc=forced,
            trip_mc=int(values["trip_millicelsius"]) if "trip_millicelsius" in values else None,
            npu_cap_hz=int(values["npu_cap_hz"]) if "npu_cap_hz" in values else None,
            load={k.split(".", 1)[1]: float(v) / 100.0 for k, v in values.items() if k.startswith("load.")},
        )


class Control:
    """Writer side of the control directory, for tests and the emulated runtime."""

    def __init__(self, control_dir: Path, profile: SocProfile | None = None) -> None:
        self.dir = Path(control_dir)
        self.profile = profile

    def set(self, name: str, value: int | float) -> None:
        """Set one knob atomically; a bad name or value is an InputError naming the file."""
        path = self.dir / name
        allowed = knob_names(self.profile) if self.profile else None
        if allowed is not None and name not in allowed:
            raise InputError(f"{path}: unknown emulator control; known: {', '.join(sorted(allowed))}")
        try:
            _parse(name, str(value))
        except ValueError as err:
            raise InputError(f"{path}: bad value {value!r}: {err}") from None
        self.dir.mkdir(parents=True, exist_ok=True)
        from rkdet.records.io import write_atomic  # the one atomic writer

        write_atomic(str(path), f"{value}\n")

    def clear(self, name: str) -> None:
        """Remove a knob (back to its default)."""
        (self.dir / name).unlink(missing_ok=True)

    def set_load(self, kind: str, percent: float) -> None:
        """Report device activity (0..100 %), e.g. ``set_load("npu", 100)`` while inferring."""
        self.set(f"load.{kind}", percent)

    def force_temperature(self, millicelsius: int | None, zone: str | None = None) -> None:
        """Force one zone (or all, zone=None) to a temperature; None releases it."""
        name = "forced_millicelsius" + (f".{zone}" if zone else "")
        self.clear(name) if millicelsius is None else self.set(name, millicelsius)


def _weights(zone_type: str) -> dict[str, float]:
    """Which heat sources a zone sees, by its name (as vendor device trees name them)."""
    if "npu" in zone_type:
        return {"npu": 1.0, "cpu": 0.2}
    if "gpu" in zone_type:
        return {"gpu": 1.0, "cpu": 0.2}
    if "core" in zone_type or zone_type.startswith("cpu"):
        return {"cpu": 1.0, "npu": 0.2}
    return {"npu": 0.6, "cpu": 0.6, "gpu": 0.4, "ddr": 1.0}  # soc / center: a bit of everything


def zone_temperatures(profile: SocProfile, demand: dict[str, float], controls: Controls) -> dict[str, int]:
    """Millicelsius per zone type. `demand[kind]` = (f / f_max) * load of that heat source."""
    temps: dict[str, int] = {}
    for zone in profile.thermal_zones:
        forced = controls.forced(zone.type)
        if forced is not None:
            temps[zone.type] = forced
            continue
        heat = sum(w * GAIN_MC[k] * demand.get(k, 0.0) for k, w in _weights(zone.type).items())
        temps[zone.type] = int(round(zone.millicelsius + controls.ambient_mc - DEFAULT_AMBIENT_MC + heat))
    return temps


def effective_caps(profile: SocProfile, controls: Controls) -> tuple[ThermalCap, ...]:
    """The profile's caps with the control overrides (trip, NPU cap) applied."""
    npu = profile.devfreq_of("npu")
    caps = []
    for cap in profile.thermal_caps:
        above = controls.trip_mc if controls.trip_mc is not None else cap.above_millicelsius
        max_hz = controls.npu_cap_hz if (controls.npu_cap_hz and npu and cap.node == npu.name) else cap.max_hz
        caps.append(ThermalCap(cap.node, cap.zone, above, max_hz, cap.hysteresis_millicelsius))
    return tuple(caps)


def active_caps(profile: SocProfile, temps: dict[str, int], controls: Controls,
                disabled_zones: set[str], held: set[str] | None = None) -> dict[str, int]:
    """Node name -> the lowest max_hz among caps whose zone is above its trip.

    `held`: nodes whose cap was active at the previous evaluation. Such a cap stays active until
    its zone falls below trip - hysteresis (Rockchip's system monitor: applied above ``h``,
    released below ``h - hyst``). Updated in place when given.
    """
    previous = set(held or ())
    limits: dict[str, int] = {}
    for cap in effective_caps(profile, controls):
        temp = temps.get(cap.zone, 0)
        release = cap.above_millicelsius - cap.hysteresis_millicelsius
        on = temp > cap.above_millicelsius or (cap.node in previous and temp >= release)
        if cap.zone in disabled_zones or not on:
            continue
        limits[cap.node] = min(cap.max_hz, limits.get(cap.node, cap.max_hz))
    if held is not None:
        held.clear()
        held.update(limits)
    return limits
