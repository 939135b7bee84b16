"""One clock reader on the board (lib.sh `rk_clock_read`): probe.sh's report and run-steps.sh's clocks records
read a node's governor, min, max and current frequency the same way, from the nodes found by existence."""

from __future__ import annotations

import re
from pathlib import Path

from rkdet.boardinfo.scripts import board_scripts_dir, run_script_locally_full

#: the files a clock node's settings and current frequency live in (cpufreq policy, devfreq node)
CLOCK_FILES = re.compile(r"\b(?:scaling_)?(?:governor|min_freq|max_freq|cur_freq)\b")


def test_probe_and_run_steps_name_no_clock_file_of_their_own() -> None:
    """Both read clocks only through lib.sh (a second reader drifts: one of them once missed a node)."""
    for name in ("probe.sh", "run-steps.sh"):
        code = [ln.split("  # ")[0] for ln in (board_scripts_dir() / name).read_text().splitlines()
                if not ln.lstrip().startswith("#")]
        named = [ln.strip() for ln in code if CLOCK_FILES.search(ln.replace("rk_clock_", ""))]
        assert named == [], f"{name} reads clock files itself: {named}"
    lib = (board_scripts_dir() / "lib.sh").read_text()
    assert "rk_clock_read()" in lib and "rk_clock_json()" in lib


def test_probe_and_run_steps_read_the_same_clocks(shell: str, make_tree, state_dir: Path) -> None:
    """The same tree read by both (a node's cur_freq unreadable, a governor missing): the same values, and the
    same nulls, for every cpufreq policy and devfreq node."""
    root = make_tree("rk3588")
    (root / "sys/devices/system/cpu/cpufreq/policy4/scaling_cur_freq").unlink()
    npu = next(p for p in (root / "sys/class/devfreq").iterdir() if p.name.endswith(".npu"))
    (npu / "governor").unlink()
    probe = run_script_locally_full("probe", root, state_dir, shell=shell, env={"RKDET_WORK_DIR": str(root)})
    assert probe.returncode == 0, probe.stderr
    steps = run_script_locally_full("run-steps", root, state_dir, shell=shell, args=["1", "true"])
    assert steps.returncode == 0, steps.stderr
    seen = next(r for r in steps.records if r["record"] == "clocks" and r["at"] == "before")["clocks"]
    from_probe = {}
    for r in probe.records:
        if r["record"] in ("cpu_policy", "devfreq"):
            unit = "_khz" if r["record"] == "cpu_policy" else "_hz"
            where = "cpufreq" if r["record"] == "cpu_policy" else "devfreq"
            from_probe[f"{where}/{r['name']}"] = {"governor": r["governor"], "min": r["min" + unit],
                                                  "max": r["max" + unit], "cur": r["cur" + unit]}
    assert seen == from_probe and len(seen) >= 5
    assert seen["cpufreq/policy4"]["cur"] is None and seen["cpufreq/policy0"]["cur"] is not None
    assert seen[f"devfreq/{npu.name}"]["governor"] is None and seen[f"devfreq/{npu.name}"]["max"] is not None
