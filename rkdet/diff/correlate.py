"""Does run-to-run divergence line up with board state (snapshots.jsonl, run.json)?

The runner takes a periodic snapshot after run r completes, so it describes runs r+1.. until the
next snapshot ("before" describes run 0 on). For every signal (NPU/CPU frequency and governor, temperature band) we check whether the
divergent runs saw values the other runs never saw, and whether the first divergence falls in the
interval where the signal changed. Snapshot granularity bounds what can be claimed: findings
say "lines up", never "caused".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rkdet.records.run_info import RunInfo
from rkdet.snapshots import Snapshot, SnapshotError, parse_snapshot
from rkdet.textsafe import plain_value

# Temperature thresholds (millicelsius) that vendor thermal tables commonly throttle at.
TEMP_THRESHOLDS_MC = (60000, 70000, 75000, 80000, 85000, 90000, 95000)


def _band(mc: int) -> str:
    crossed = [t for t in TEMP_THRESHOLDS_MC if mc >= t]
    return f">= {crossed[-1] // 1000} °C" if crossed else f"< {TEMP_THRESHOLDS_MC[0] // 1000} °C"


def _mhz(hz: Any, scale: float) -> str:
    try:
        return f"{float(hz) / scale:g} MHz"
    except (TypeError, ValueError):
        return str(hz)


def snapshot_signals(snapshot: Snapshot) -> dict[str, str]:
    """Flatten one snapshot into named, comparable string values."""
    out: dict[str, str] = {}
    for node, info in snapshot.devfreq.items():
        out[f"{node} frequency"] = _mhz(info.cur, 1e6)
        out[f"{node} governor"] = str(info.governor)
    for policy, info in snapshot.cpu.items():
        out[f"cpu {policy} frequency"] = _mhz(info.cur, 1e3)
        out[f"cpu {policy} governor"] = str(info.governor)
    for zone, mc in snapshot.thermal.items():
        if mc is not None:
            out[f"{zone} temperature"] = _band(int(mc))
    return out


def _timeline(snapshots: list[dict[str, Any]]) -> list[tuple[int, dict[str, str]]]:
    points: list[tuple[int, dict[str, str]]] = []
    for raw in snapshots:
        try:  # the one parser of snapshot records (rkdet/snapshots.py); a malformed one is not evidence
            snap = parse_snapshot(raw)
        except SnapshotError:
            continue
        if snap.at == "before":
            points.append((-1, snapshot_signals(snap)))
        elif snap.at == "periodic" and snap.run is not None:  # taken after run r: describes r+1..
            points.append((snap.run + 1, snapshot_signals(snap)))
    points.sort(key=lambda p: p[0])
    return points


def correlate(divergent_runs: set[int], n_runs: int, snapshots: list[dict[str, Any]]) -> list[str]:
    """One sentence per signal that lines up with the divergent runs (or one saying none does)."""
    if not divergent_runs:
        return []
    points = _timeline(snapshots)
    if not points:
        return ["no board snapshots (snapshots.jsonl) to correlate the divergence with"]
    positions = np.array([p for p, _ in points])
    runs = np.arange(n_runs)
    which = np.clip(np.searchsorted(positions, runs, side="right") - 1, 0, len(points) - 1)
    div = np.zeros(n_runs, dtype=bool)
    div[[r for r in divergent_runs if 0 <= r < n_runs]] = True
    first = min(divergent_runs)
    names = sorted({k for _, sig in points for k in sig})
    findings: list[str] = []
    for name in names:
        values = np.array([points[i][1].get(name, "?") for i in which], dtype=object)
        seen_div, seen_ok = set(values[div]), set(values[~div])
        if seen_ok and seen_div and not seen_div & seen_ok:
            findings.append(f"divergent runs all had {name} {', '.join(sorted(seen_div))} while the others had "
                            f"{', '.join(sorted(seen_ok))}")
            continue
        for k in range(1, len(points)):
            before, after = points[k - 1][1].get(name), points[k][1].get(name)
            start = max(points[k][0], 0)
            end = points[k + 1][0] if k + 1 < len(points) else n_runs
            if before != after and start <= first < max(end, start + 1):
                findings.append(f"first divergence (run {first}) falls in the interval where {name} changed "
                                f"{before} -> {after} (snapshot at run {points[k][0]})")
                break
    if not findings:
        findings.append(f"no board-state change lines up with the divergence ({len(names)} signals over "
                        f"{len(points)} snapshots checked)")
    return findings


def run_setting_differences(a: RunInfo, b: RunInfo) -> list[str]:
    """Run settings that differ between two run.json records (core mask, affinity, backend...), compared
    only when both recorded them."""
    out = []
    for key in ("core_mask", "affinity", "backend", "emulated"):
        if key in a.recorded and key in b.recorded and a.setting(key) != b.setting(key):
            out.append(f"{key} differs: A {plain_value(a.setting(key))} vs B {plain_value(b.setting(key))}")
    return out
