"""Board snapshots: governors, clocks, temperatures and NPU load, read from sysfs under $RKDET_ROOT.

Why here: rkdet-run records one before, after and every K runs (snapshots.jsonl), so a clock that
moved during the run is seen; nodes are found by existence and name, never by index, and an
unreadable value is null: a snapshot never stops a run. (The host's parser: rkdet/snapshots.py.)
"""

import glob
import os
import time
from typing import Any, Dict, Optional, Tuple

def _sys_path(root, rel):
    # type: (str, str) -> str
    return os.path.join(root or "/", rel)


def _read_text(path):
    # type: (str) -> Optional[str]
    try:
        with open(path, "r") as handle:
            return handle.read().strip()
    except (OSError, IOError, UnicodeDecodeError):
        return None


def _read_int(path):
    # type: (str) -> Optional[int]
    text = _read_text(path)
    try:
        return int(text.split()[0]) if text else None
    except ValueError:
        return None


def _natural_key(path):
    # type: (str) -> Tuple[str, int]
    base = os.path.basename(path)
    stem = base.rstrip("0123456789")
    digits = base[len(stem):]
    return (stem, int(digits) if digits else -1)


def _cpu_policies(root):
    # type: (str) -> Dict[str, Dict[str, Any]]
    cpu_dir = _sys_path(root, "sys/devices/system/cpu")
    dirs = sorted(glob.glob(os.path.join(cpu_dir, "cpufreq", "policy*")), key=_natural_key)
    named = [(os.path.basename(d), d) for d in dirs]
    if not named:  # old kernels: only cpuN/cpufreq, shared policies appear once per real dir
        seen = set()
        for d in sorted(glob.glob(os.path.join(cpu_dir, "cpu[0-9]*", "cpufreq")), key=lambda p: _natural_key(os.path.dirname(p))):
            real = os.path.realpath(d)
            if real not in seen:
                seen.add(real)
                named.append((os.path.basename(os.path.dirname(d)), d))
    policies = {}
    for name, d in named:
        cur = _read_int(os.path.join(d, "scaling_cur_freq"))
        if cur is None:
            cur = _read_int(os.path.join(d, "cpuinfo_cur_freq"))
        policies[name] = {"governor": _read_text(os.path.join(d, "scaling_governor")), "cur_khz": cur}
    return policies


def _devfreq(root):
    # type: (str) -> Dict[str, Dict[str, Any]]
    nodes = {}
    for d in sorted(glob.glob(os.path.join(_sys_path(root, "sys/class/devfreq"), "*"))):
        nodes[os.path.basename(d)] = {"governor": _read_text(os.path.join(d, "governor")),
                                      "cur_hz": _read_int(os.path.join(d, "cur_freq"))}
    return nodes


def _thermal(root):
    # type: (str) -> Dict[str, Optional[int]]
    zones = {}  # type: Dict[str, Optional[int]]
    for d in sorted(glob.glob(os.path.join(_sys_path(root, "sys/class/thermal"), "thermal_zone*")), key=_natural_key):
        kind = _read_text(os.path.join(d, "type")) or os.path.basename(d)
        key = kind if kind not in zones else "%s/%s" % (kind, os.path.basename(d))
        zones[key] = _read_int(os.path.join(d, "temp"))
    return zones


def _npu_load(root):
    # type: (str) -> Optional[str]
    for rel in ("sys/kernel/debug/rknpu/load", "proc/debug/rknpu/load"):
        text = _read_text(_sys_path(root, rel))
        if text is not None:
            return text
    return None


def board_snapshot(at, run=None, root=None):
    # type: (str, Optional[int], Optional[str]) -> Dict[str, Any]
    """Governors, current frequencies, temperatures by zone type and NPU load, right now.

    Unreadable values are null: a snapshot must never stop a run.
    """
    if root is None:
        root = os.environ.get("RKDET_ROOT", "")
    return {"at": at, "run": run, "t_unix": time.time(), "cpu": _cpu_policies(root),
            "devfreq": _devfreq(root), "thermal": _thermal(root), "npu_load": _npu_load(root)}
