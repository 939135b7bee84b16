"""Board snapshot records (a result set's `snapshots.jsonl`, written by `rkdet/onboard/snapshot.py`): one parser.

Why one: deploy (clock warnings) and diff (correlation with divergence) both read these records,
and both got them from a board, so they are untrusted: a record of the wrong shape is refused
here, with the reason, instead of raising KeyError/TypeError somewhere later.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_SNAPSHOT_LINES = 100_000  # a run takes one every K runs plus two: far fewer
AT_VALUES = ("before", "periodic", "after")


class SnapshotError(ValueError):
    """A snapshot record (or a line of snapshots.jsonl) is malformed; the message says which and why."""


@dataclass(frozen=True)
class ClockNode:
    """One cpufreq policy (kHz) or devfreq node (Hz) in a snapshot."""

    cur: int | None
    governor: str | None


@dataclass(frozen=True)
class Snapshot:
    """The board's state at one moment of a run (see the runner's `board_snapshot`)."""

    at: str  # "before" | "periodic" | "after"
    run: int | None  # the run just completed (periodic, after); None before
    cpu: Mapping[str, ClockNode]  # policy name -> kHz
    devfreq: Mapping[str, ClockNode]  # node name -> Hz
    thermal: Mapping[str, float | None]  # zone type -> millicelsius


def _int_or_none(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"{what} is {type(value).__name__}, not an integer")
    return value


def _nodes(value: Any, what: str, unit: str) -> dict[str, ClockNode]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SnapshotError(f"'{what}' is {type(value).__name__}, not an object")
    nodes = {}
    for name, info in value.items():
        if not isinstance(info, dict):
            raise SnapshotError(f"'{what}' entry {name!r} is {type(info).__name__}, not an object")
        governor = info.get("governor")
        if governor is not None and not isinstance(governor, str):
            raise SnapshotError(f"'{what}' entry {name!r}: governor is {type(governor).__name__}, not a string")
        nodes[str(name)] = ClockNode(_int_or_none(info.get(unit), f"'{what}' entry {name!r}: {unit}"), governor)
    return nodes


def parse_snapshot(obj: Any) -> Snapshot:
    """A typed snapshot from one decoded record; SnapshotError saying what is wrong otherwise."""
    if not isinstance(obj, dict):
        raise SnapshotError(f"a {type(obj).__name__}, not an object")
    at = obj.get("at")
    if at not in AT_VALUES:
        raise SnapshotError(f"'at' is {str(at)[:40]!r}, not one of {', '.join(AT_VALUES)}")
    run = _int_or_none(obj.get("run"), "'run'")
    thermal_raw = obj.get("thermal")
    if thermal_raw is not None and not isinstance(thermal_raw, dict):
        raise SnapshotError(f"'thermal' is {type(thermal_raw).__name__}, not an object")
    thermal: dict[str, float | None] = {}
    for zone, mc in (thermal_raw or {}).items():
        if mc is not None and (isinstance(mc, bool) or not isinstance(mc, (int, float)) or not math.isfinite(mc)):
            raise SnapshotError(f"'thermal' zone {zone!r} is {str(mc)[:40]!r}, not a number")
        thermal[str(zone)] = mc
    return Snapshot(at=at, run=run, cpu=_nodes(obj.get("cpu"), "cpu", "cur_khz"),
                    devfreq=_nodes(obj.get("devfreq"), "devfreq", "cur_hz"), thermal=thermal)


def read_snapshots(path: Path) -> list[Snapshot]:
    """Every record of a snapshots.jsonl ([] when the file is absent); SnapshotError naming the
    line otherwise. A final line without its newline (the run was cut off) is skipped."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = text.split(b"\n")
    if len(lines) > MAX_SNAPSHOT_LINES + 1:
        raise SnapshotError(f"{len(lines) - 1} lines, over the {MAX_SNAPSHOT_LINES} a run can write")
    shots = []
    for number, line in enumerate(lines[:-1], start=1):
        if not line.strip():
            continue
        try:
            shots.append(parse_snapshot(json.loads(line)))
        except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError, SnapshotError
            raise SnapshotError(f"line {number}: {err}") from None
    return shots


__all__ = ["AT_VALUES", "ClockNode", "MAX_SNAPSHOT_LINES", "Snapshot", "SnapshotError", "parse_snapshot",
           "read_snapshots"]
