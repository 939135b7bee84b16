"""pin/restore under a thermal cap, on plain trees (every shell): the cooling device tells a cap
from a user limit.

On the plain tree a "cap" is written by hand (cooling device cur_state and max_freq, as a hot
kernel shows them) on the GPU, which has a devfreq cooling device on RK3588 boards (the NPU has
none: test_bs_fuse.py covers that case); test_bs_fuse.py and tests/deploy repeat the essentials
with the kernel model, where the cap really comes and goes.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from rkdet.emulator.fake_tree import tree_digest
from rkdet.boardinfo.scripts import board_scripts_dir, parse_pin, parse_restore, run_script_locally_full

NODE = "fb000000.gpu"
GPU = f"sys/class/devfreq/{NODE}"
NPU = "sys/class/devfreq/fdab0000.npu"
TOP, CAP = "1000000000", "800000000"


def _cooling(root: Path, node: str) -> Path:
    for cdir in sorted((root / "sys/class/thermal").glob("cooling_device*")):
        if (cdir / "type").read_text() == f"devfreq-{node}\n":
            return cdir
    raise AssertionError(f"no cooling device for {node}")


def _heat_by_hand(root: Path, state: int = 2, cap: str = CAP) -> None:
    """What a hot 5.10 kernel shows: the GPU's cooling device at `state`, max_freq at the cap."""
    (_cooling(root, NODE) / "cur_state").write_text(f"{state}\n")
    (root / GPU / "max_freq").write_text(cap + "\n")


def _saved(state_dir: Path) -> dict[str, str]:
    lines = (state_dir / "pin.state").read_text().splitlines()[2:]
    return dict(line.split("\t", 1) for line in lines)


def test_pin_under_a_cap_saves_no_user_limit_and_says_so(shell: str, make_tree, state_dir: Path) -> None:
    root = make_tree("rk3588")
    _heat_by_hand(root)
    run = run_script_locally_full("pin", root, state_dir, shell=shell)
    assert run.returncode == 0, run.stderr
    assert _saved(state_dir)[f"{GPU}/max_freq"] == TOP  # the top OPP, not the capped 800 MHz
    assert _saved(state_dir)[f"{NPU}/max_freq"] == TOP  # (uncapped: as read)
    rep = parse_pin(run.records)
    [state] = [r for r in run.records if r.get("record") == "state"]
    assert state["thermal_capped"] == [NODE], state
    gpu = rep.knob(f"devfreq/{NODE}")
    assert gpu.detail["thermal_cap_at_save"] == {"cooling_device": "cooling_device3", "cur_state": 2,
                                                 "max_freq_read": int(CAP), "max_freq_saved": int(TOP)}
    assert "thermal_cap_at_save" not in rep.knob("devfreq/fdab0000.npu").detail
    assert (_cooling(root, NODE) / "cur_state").read_text() == "2\n"  # pin never writes it
    run = run_script_locally_full("restore", root, state_dir, shell=shell)
    assert run.returncode == 0 and parse_restore(run.records).ok, run.stdout
    assert (root / GPU / "max_freq").read_text() == TOP + "\n"  # "no user limit" came back


def test_without_cooling_devices_pin_saves_what_it_reads(shell: str, make_tree, state_dir: Path) -> None:
    root = make_tree("rk3588")
    _heat_by_hand(root)
    for cdir in (root / "sys/class/thermal").glob("cooling_device*"):
        shutil.rmtree(cdir)
    run = run_script_locally_full("pin", root, state_dir, shell=shell)
    assert run.returncode == 0, run.stderr
    # a plain tree keeps what is written: the max_freq := top probe moves it, so 800 MHz was a user
    # limit (on a kernel whose cap holds it the probe reads 800 MHz again: test_bs_fuse.py)
    assert _saved(state_dir)[f"{GPU}/max_freq"] == CAP
    assert "thermal_capped" not in [r for r in run.records if r.get("record") == "state"][0]


def test_a_cooling_device_is_found_by_type_not_by_index(make_tree, state_dir: Path) -> None:
    root = make_tree("rk3588")
    _heat_by_hand(root)
    cdev = _cooling(root, NODE)
    (cdev / "type").write_text("thermal-devfreq-1\n")  # older kernels: cannot be tied to a node
    run = run_script_locally_full("pin", root, state_dir, shell="dash")
    assert run.returncode == 0 and _saved(state_dir)[f"{GPU}/max_freq"] == CAP
    run_script_locally_full("restore", root, state_dir, shell="dash")
    (cdev / "type").write_text(f"devfreq-{NODE}\n")
    cdev.rename(cdev.parent / "cooling_device7")  # any index will do
    _heat_by_hand(root)
    run = run_script_locally_full("pin", root, state_dir, shell="dash")
    assert run.returncode == 0 and _saved(state_dir)[f"{GPU}/max_freq"] == TOP
    assert parse_pin(run.records).knob(f"devfreq/{NODE}").detail["thermal_cap_at_save"]["cooling_device"] \
        == "cooling_device7"


def _cap_explains(shell: str, root: Path, rel: str, saved: str, got: str) -> str:
    lib, knobs = board_scripts_dir() / "lib.sh", board_scripts_dir() / "knobs.sh"
    script = (f". {shlex.quote(str(lib))}; . {shlex.quote(str(knobs))}; "
              f'if rk_cap_explains "$1" "$2" "$3"; then echo "yes$RK_V"; else echo no; fi')
    done = subprocess.run([*shlex.split(shell), "-c", script, "sh", rel, saved, got], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "RKDET_ROOT": str(root)}, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_restore_accepts_only_a_read_back_held_at_the_caps_opp(shell: str, make_tree) -> None:
    root = make_tree("rk3588")
    before = tree_digest(root)
    assert _cap_explains(shell, root, f"{GPU}/max_freq", TOP, CAP) == "no"  # cur_state 0: no cap
    _heat_by_hand(root)  # state 2: the cap is the 800 MHz OPP
    got = _cap_explains(shell, root, f"{GPU}/max_freq", TOP, CAP)
    assert got == ('yes,"note":"restored (thermal cap active: reads 800000000)","thermal_cap":'
                   '{"cooling_device":"cooling_device3","cur_state":2,"cap_hz":800000000}')
    assert _cap_explains(shell, root, f"{GPU}/min_freq", TOP, CAP).startswith("yes")  # max wins over min
    assert _cap_explains(shell, root, f"{GPU}/max_freq", TOP, "600000000") == "no"  # not the cap's OPP
    assert _cap_explains(shell, root, f"{GPU}/max_freq", "700000000", CAP) == "no"  # not lower than saved
    assert _cap_explains(shell, root, f"{GPU}/governor", TOP, CAP) == "no"
    assert _cap_explains(shell, root, "sys/class/devfreq/dmc/max_freq", TOP, CAP) == "no"  # dmc uncapped
    assert {k for k in before if before[k] != tree_digest(root).get(k)} == {
        f"{_cooling(root, NODE).relative_to(root)}/cur_state",
        f"sys/devices/platform/{NODE}/devfreq/{NODE}/max_freq"}  # the check itself wrote nothing


def test_probe_shows_each_nodes_cooling_state(make_tree, state_dir: Path) -> None:
    root = make_tree("rk3588")
    _heat_by_hand(root)
    run = run_script_locally_full("probe", root, state_dir, shell="busybox sh")
    devs = {r["name"]: r for r in run.records if r.get("record") == "devfreq"}
    assert (devs[NODE]["cooling_device"], devs[NODE]["cooling_state"]) == ("cooling_device3", 2)
    assert (devs["dmc"]["cooling_device"], devs["dmc"]["cooling_state"]) == ("cooling_device4", 0)
    assert "cooling_state" not in devs["fdab0000.npu"]  # RK3588 boards have no NPU cooling device
