"""pin.sh / restore.sh on plain fake trees: transactional, byte-identical restore, clear refusals."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from bs_helpers import VARIANTS

from rkdet.emulator.fake_tree import build_fake_tree, tree_digest
from rkdet.boardinfo.scripts import (ScriptRun, board_scripts_dir, parse_pin, parse_records, parse_restore,
                                     run_script_locally, run_script_locally_full, script_env)
from rkdet.emulator.socs import PROFILES

OPTIONS = {"RKDET_CPU_GOVERNOR": "userspace", "RKDET_THP": "never", "RKDET_CPUIDLE_DEEP": "disable"}


def devfreq_dir(root: Path, name: str) -> Path:
    return root / "sys/class/devfreq" / name


def read(path: Path) -> str:
    return path.read_text().strip()


@pytest.mark.parametrize("soc", sorted(VARIANTS))
def test_pin_then_restore_is_byte_identical(soc: str, shell: str, make_tree, state_dir: Path) -> None:
    prof = VARIANTS[soc]
    root = make_tree(soc)
    before = tree_digest(root)
    run = run_script_locally_full("pin", root, state_dir, shell=shell)
    assert run.returncode == 0, run.stderr
    rep = parse_pin(run.records)
    assert rep.ok and rep.state == "saved" and not rep.by_status("failed")
    for node in prof.devfreq:  # every NPU/GPU/DDR node fixed at its top frequency, read back
        knob = rep.knob(f"devfreq/{node.name}")
        top = max(node.frequencies_hz)
        assert knob is not None and knob.status == "set" and knob.wanted == str(top), knob
        d = devfreq_dir(root, node.name)
        # performance where the image has it; RV1126's NPU lists only userspace: min = max holds it
        governor = "performance" if "performance" in prof.devfreq_governors else node.governor
        assert (read(d / "governor"), read(d / "min_freq"), read(d / "max_freq")) == (governor, str(top), str(top))
    for policy in prof.cpu_policies:
        assert read(root / "sys/devices/system/cpu/cpufreq" / policy.name / "scaling_governor") == "performance"
    compaction = rep.knob("vm/compaction_proactiveness")
    if prof.has_compaction_proactiveness:
        assert compaction.status == "set" and read(root / "proc/sys/vm/compaction_proactiveness") == "0"
    else:
        assert compaction.status == "skipped" and "not present" in compaction.reason
        assert ("4.19" in compaction.reason) == prof.kernel.startswith("4.19")
        assert ("CONFIG_COMPACTION" in compaction.reason) == (not prof.kernel.startswith("4.19"))
    if prof.devfreq_of("gpu") is None:
        assert rep.knob("devfreq/gpu").status == "skipped"
    assert (state_dir / "pin.state").is_file()
    assert tree_digest(root) != before

    run = run_script_locally_full("restore", root, state_dir, shell=shell)
    assert run.returncode == 0, run.stderr
    restored = parse_restore(run.records)
    assert restored.ok and restored.knobs and all(k.status == "restored" for k in restored.knobs)
    assert tree_digest(root) == before
    assert not (state_dir / "pin.state").exists()
    assert list(state_dir.iterdir()) == []  # no temp files left behind

    run = run_script_locally_full("restore", root, state_dir, shell=shell)  # idempotent
    assert run.returncode == 0 and parse_restore(run.records).nothing_to_restore
    assert tree_digest(root) == before


@pytest.mark.parametrize("soc", sorted(VARIANTS))
def test_optional_knobs_pin_and_restore(soc: str, make_tree, state_dir: Path) -> None:
    prof = VARIANTS[soc]
    root = make_tree(soc)
    before = tree_digest(root)
    rc, records = run_script_locally("pin", root, state_dir, env=OPTIONS)
    rep = parse_pin(records)
    assert rc == 0 and rep.ok, records
    for policy in prof.cpu_policies:
        pdir = root / "sys/devices/system/cpu/cpufreq" / policy.name
        top = max(policy.frequencies_khz)
        assert (read(pdir / "scaling_governor"), read(pdir / "scaling_setspeed")) == ("userspace", str(top))
        assert rep.knob(f"cpufreq/{policy.name}").wanted == f"userspace:{top}"
    if prof.thp_enabled is None:  # an image without THP: skipped, not an error
        assert rep.knob("thp/enabled").status == "skipped" and "not present" in rep.knob("thp/enabled").reason
    else:
        assert read(root / "sys/kernel/mm/transparent_hugepage/enabled") == "never"
        assert rep.knob("thp/enabled").status == "set"
    deep = [k for k in rep.of_class("cpuidle") if k.status == "set"]
    assert len(deep) == prof.cpu_count * (len(prof.cpuidle_states) - 1)
    for cpu in range(prof.cpu_count):
        idle = root / f"sys/devices/system/cpu/cpu{cpu}/cpuidle"
        assert read(idle / "state0/disable") == "0"  # WFI stays
        for index in range(1, len(prof.cpuidle_states)):
            assert read(idle / f"state{index}/disable") == "1"
    rc, _ = run_script_locally("restore", root, state_dir)
    assert rc == 0 and tree_digest(root) == before


def test_second_pin_keeps_the_original_state(shell: str, make_tree, state_dir: Path) -> None:
    root = make_tree("rk3568")
    before = tree_digest(root)
    assert run_script_locally("pin", root, state_dir, shell=shell)[0] == 0
    first_state = (state_dir / "pin.state").read_text()
    rc, records = run_script_locally("pin", root, state_dir, shell=shell,
                                   env={"RKDET_NPU_FREQ": "297000000", "RKDET_THP": "never"})
    rep = parse_pin(records)
    assert rc == 0 and rep.state == "kept"
    assert read(devfreq_dir(root, "fde40000.npu") / "max_freq") == "297000000"
    second_state = (state_dir / "pin.state").read_text()
    assert second_state.startswith(first_state)  # original values untouched, THP appended
    assert "transparent_hugepage/enabled\talways [madvise] never" in second_state
    assert "fde40000.npu/min_freq\t200000000" in second_state and "297000000" not in second_state
    assert run_script_locally("restore", root, state_dir, shell=shell)[0] == 0
    assert tree_digest(root) == before


def test_frequency_not_in_the_list_is_rejected(shell: str, make_tree, state_dir: Path) -> None:
    root = make_tree("rk3568")  # lists 297/600 MHz (rk3568.dtsi), not 300/594
    before = tree_digest(root)
    run = run_script_locally_full("pin", root, state_dir, shell=shell, env={"RKDET_NPU_FREQ": "594000000"})
    assert run.returncode == 2
    message = run.stderr.strip()
    assert len(message.splitlines()) == 1
    assert "RKDET_NPU_FREQ=594000000" in message and "fde40000.npu" in message and "600000000" in message
    rep = parse_pin(run.records)
    assert rep.status == "error" and rep.exit_code == 2 and rep.reason in message
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()


def test_a_listed_frequency_is_pinned(make_tree, state_dir: Path) -> None:
    root = make_tree("rk3568")
    rc, records = run_script_locally("pin", root, state_dir, env={"RKDET_NPU_FREQ": "297000000", "RKDET_DDR_FREQ": "keep"})
    rep = parse_pin(records)
    assert rc == 0
    assert rep.knob("devfreq/fde40000.npu").detail["min_hz"] == rep.knob("devfreq/fde40000.npu").detail["max_hz"] == 297000000
    assert rep.knob("devfreq/dmc").status == "skipped" and read(devfreq_dir(root, "dmc") / "governor") == "dmc_ondemand"


@pytest.mark.parametrize("env, needle", [
    ({"RKDET_CPU_GOVERNOR": "turbo"}, "RKDET_CPU_GOVERNOR=turbo"),
    ({"RKDET_CPU_FREQ": "1800000"}, "needs RKDET_CPU_GOVERNOR=userspace"),
    ({"RKDET_CPU_GOVERNOR": "userspace", "RKDET_CPU_FREQ": "1800001"}, "policy0"),
    ({"RKDET_GPU_FREQ": "fast"}, "RKDET_GPU_FREQ=fast"),
    ({"RKDET_THP": "sometimes"}, "RKDET_THP=sometimes"),
    ({"RKDET_COMPACTION": "-1"}, "RKDET_COMPACTION=-1"),
    ({"RKDET_CPUIDLE_DEEP": "off"}, "RKDET_CPUIDLE_DEEP=off"),
])
def test_bad_settings_change_nothing(env: dict, needle: str, make_tree, state_dir: Path) -> None:
    root = make_tree("rk3588")
    before = tree_digest(root)
    run = run_script_locally_full("pin", root, state_dir, env=env)
    assert run.returncode == 2 and needle in run.stderr, run.stderr
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()


def test_read_back_failure_is_reported(make_tree, state_dir: Path) -> None:
    """A clock that does not read back as pinned is "failed" with wanted vs actual (exit 1)."""
    root = make_tree("rk3588")
    npu = devfreq_dir(root, "fdab0000.npu")
    (npu / "max_freq").unlink()
    (npu / "max_freq").symlink_to("/dev/null")  # takes every write, reads back empty
    run = run_script_locally_full("pin", root, state_dir)
    rep = parse_pin(run.records)
    assert run.returncode == 1 and rep.status == "partial"
    knob = rep.knob("devfreq/fdab0000.npu")
    assert knob.status == "failed" and knob.wanted == "1000000000" and knob.actual == "1000000000.."
    assert "did not read back" in run.stderr
    assert [k.knob for k in rep.by_status("failed")] == ["devfreq/fdab0000.npu"]
    assert rep.knob("devfreq/fb000000.gpu").status == "set"


def test_restore_that_does_not_verify_keeps_state(make_tree, state_dir: Path) -> None:
    root = make_tree("rk3588")
    before = tree_digest(root)
    assert run_script_locally("pin", root, state_dir)[0] == 0
    governor = devfreq_dir(root, "fdab0000.npu") / "governor"
    governor.unlink()
    governor.symlink_to("/dev/null")  # the restore write vanishes
    run = run_script_locally_full("restore", root, state_dir)
    rep = parse_restore(run.records)
    assert run.returncode == 1 and rep.status == "partial" and "run restore.sh again" in rep.reason
    assert [k.knob for k in rep.knobs if k.status == "failed"] == ["sys/class/devfreq/fdab0000.npu/governor"]
    assert (state_dir / "pin.state").is_file()
    governor.unlink()
    governor.write_text("performance\n")
    assert run_script_locally("restore", root, state_dir)[0] == 0
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()


def test_foreign_state_file_is_refused(make_tree, state_dir: Path) -> None:
    root = make_tree("rk3588")
    state_dir.mkdir(parents=True)
    (state_dir / "pin.state").write_text("something else\n")
    before = tree_digest(root)
    for name in ("pin", "restore"):
        run = run_script_locally_full(name, root, state_dir)
        assert run.returncode == 2 and "not an rkdet pin state file" in run.stderr
    assert tree_digest(root) == before


def test_state_for_another_root_is_refused(make_tree, state_dir: Path) -> None:
    a, b = make_tree("rk3588", "a"), make_tree("rk3588", "b")
    assert run_script_locally("pin", a, state_dir)[0] == 0
    before_b = tree_digest(b)
    run = run_script_locally_full("restore", b, state_dir)
    assert run.returncode == 2 and "saved for RKDET_ROOT" in run.stderr
    assert tree_digest(b) == before_b
    assert run_script_locally("restore", a, state_dir)[0] == 0


# ---- unprivileged user: root ignores file modes, so this needs a real other uid ----------------------

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory nobody can traverse (pytest's tmp_path is root-only), holding a copy of the board
    scripts: the checkout may sit in a 0700 home (a clone in /root), which another user cannot enter."""
    path = Path(tempfile.mkdtemp(prefix="rkdet-nobody-"))
    path.chmod(0o755)
    try:
        scripts = shutil.copytree(board_scripts_dir(), path / "board_scripts")
        for item in [scripts, *scripts.iterdir()]:
            item.chmod(0o755 if item.is_dir() else 0o644)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as_nobody(name: str, root: Path, state: Path) -> ScriptRun:
    """`name`.sh run as nobody from the copy in `root`'s parent (never from the checkout)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.fail("this test needs root and setpriv (util-linux) to switch to an unprivileged user")
    script = root.parent / "board_scripts" / f"{name}.sh"
    proc = subprocess.run([*NOBODY, "sh", str(script)], env=script_env(root, state), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, check=False)
    return ScriptRun(proc.returncode, parse_records(proc.stdout), proc.stdout, proc.stderr)


def test_non_root_pin_changes_nothing(shared_tmp: Path) -> None:
    root = build_fake_tree(PROFILES["rk3588"], shared_tmp / "root")  # root-owned, 0644 files
    state = shared_tmp / "state"
    state.mkdir(mode=0o777)
    state.chmod(0o777)  # the state dir is writable, the sysfs files are not
    before = tree_digest(root)
    run = _as_nobody("pin", root, state)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "permission denied" in run.stderr and "as root" in run.stderr and "nothing was changed" in run.stderr
    assert str(root) in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert tree_digest(root) == before and list(state.iterdir()) == []


def test_non_root_restore_keeps_state(shared_tmp: Path) -> None:
    root = build_fake_tree(PROFILES["rv1126"], shared_tmp / "root")
    state = shared_tmp / "state"
    before = tree_digest(root)
    assert run_script_locally("pin", root, state)[0] == 0  # as root
    pinned = tree_digest(root)
    state.chmod(0o755)
    run = _as_nobody("restore", root, state)
    assert run.returncode == 3 and "permission denied" in run.stderr and "state kept" in run.stderr
    assert tree_digest(root) == pinned and (state / "pin.state").is_file()
    assert run_script_locally("restore", root, state)[0] == 0  # root repairs
    assert tree_digest(root) == before


def test_kernel_refusing_a_write_mid_pin_rolls_back(make_tree, state_dir: Path) -> None:
    """A privilege error the pre-check could not foresee (LSM, lockdown) rolls everything back.

    The kernel's refusal is a test double: rk_write is redefined to fail for one file with the
    message a shell prints for EACCES; everything else is the real pin/rollback code.
    """

    root = make_tree("rk3588")
    before = tree_digest(root)
    refuse = r'''
rk_write() {
    case $1 in */compaction_proactiveness) RK_ERR="Permission denied"; return 1 ;; esac
    RK_ERR=
    printf '%s\n' "$2" >"$RK_ROOT/$1"
}'''
    script = f'RK_SCRIPT=pin; . "$0/lib.sh"; . "$0/knobs.sh"; {refuse}\nrk_pin_main'
    done = subprocess.run(["dash", "-c", script, str(board_scripts_dir())], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "RKDET_ROOT": str(root), "RKDET_STATE_DIR": str(state_dir)})
    assert done.returncode == 3, done.stdout + done.stderr
    assert "permission denied writing vm/compaction_proactiveness" in done.stderr and "rolled back" in done.stderr
    records = parse_records(done.stdout)
    assert parse_pin(records).rolled_back
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()


def test_read_only_mount_is_named_as_such_for_root(make_tree, state_dir: Path) -> None:
    """Containers often mount /proc/sys read-only: root is refused there, and the message says why."""
    from rkdet.boardinfo.scripts import local_command, script_env

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("needs root and unshare (util-linux) for a private mount namespace")
    root = make_tree("rk3588")
    knob = root / "proc/sys/vm/compaction_proactiveness"
    before = tree_digest(root)
    inner = 'mount -n --bind "$1" "$1" && mount -n -o remount,bind,ro "$1" && shift && exec "$@"'
    argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", inner, "ns", str(knob),
            *local_command("pin", "dash")]
    done = subprocess.run(argv, env=script_env(root, state_dir), capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"read-only: cannot write {knob}" in done.stderr and "remount" in done.stderr
    assert tree_digest(root) == before and not (state_dir / "pin.state").exists()


def test_a_tampered_saved_cur_freq_is_never_executed_nor_written(make_tree, state_dir: Path, tmp_path: Path) -> None:
    """restore only ever writes a saved cur_freq into min/max when it is digits; anything else is
    reported as not read back (state kept), never run or written."""
    root = make_tree("rk3588")
    assert run_script_locally("pin", root, state_dir)[0] == 0
    state = state_dir / "pin.state"
    rel = "sys/class/devfreq/fdab0000.npu/cur_freq"
    marker = tmp_path / "ran"
    text = state.read_text().replace(f"{rel}\t1000000000", f"{rel}\t1$(touch {marker})")
    assert f"touch {marker}" in text
    state.write_text(text)
    run = run_script_locally_full("restore", root, state_dir)
    rep = parse_restore(run.records)
    assert run.returncode == 1 and not marker.exists()
    assert [k.knob for k in rep.knobs if k.status == "failed"] == [rel]
    assert read(root / "sys/class/devfreq/fdab0000.npu/max_freq") == "1000000000"  # min/max restored
    assert state.exists()
