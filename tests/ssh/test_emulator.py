"""The emulated board itself: OpenSSH client compatibility, cleanup, `rkdet emulator start`."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rkdet.link import jobs
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.emulator.fake_tree import tree_digest
from rkdet.errors import InputError


def test_openssh_client_reaches_the_board_strictly(board: EmulatedBoard) -> None:
    res = subprocess.run([*board.ssh_argv(), "printf", "%s", '"$RKDET_ROOT"'], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "SSH_AUTH_SOCK": ""})
    assert res.returncode == 0, res.stderr
    assert res.stdout == str(board.root)


def test_fake_tree_belongs_to_the_board_user_and_is_writable(conn, board: EmulatedBoard) -> None:
    node = f"{board.root}/sys/class/devfreq/fdab0000.npu/governor"
    before = tree_digest(board.root)
    conn.run(["sh", "-c", 'cp "$1" "$1.bak" && echo userspace > "$1"', "sh", node])
    assert Path(node).read_text() == "userspace\n"
    conn.run(["sh", "-c", 'mv "$1.bak" "$1"', "sh", node])
    assert tree_digest(board.root) == before


def test_sudo_board_has_its_own_sudo_and_leaves_no_rule(tmp_path: Path) -> None:
    with EmulatedBoard("rk3568", tmp_path / "w", "sudo") as b, b.connect() as c:
        assert c.run(["sudo", "-n", "id", "-u"]).out == "0\n"
        assert not Path(f"/etc/sudoers.d/rkdet-emulator-{b.port}").exists()  # the host's sudoers is not edited
        board_dir = b.board_dir
        assert b.running
    assert not b.running
    assert board_dir is not None and not board_dir.exists()  # private temp dir removed


def test_given_root_is_used_as_is(tmp_path: Path) -> None:
    root = Path("/tmp") / f"rkdet-given-root-{os.getpid()}"
    root.mkdir(mode=0o755)
    (root / "marker").write_text("mine\n")
    try:
        with EmulatedBoard("rv1126", tmp_path / "w", root=root) as b, b.connect() as c:
            assert c.run(["cat", f"{b.root}/marker"]).out == "mine\n" and b.root == root
    finally:
        (root / "marker").unlink()
        root.rmdir()


def test_unknown_soc_or_variant_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown SoC"):
        EmulatedBoard("rk9999", tmp_path)
    with pytest.raises(InputError, match="unknown variant"):
        EmulatedBoard("rk3588", tmp_path, "dropbear")


def test_cli_start_prints_how_to_connect_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    rkdet = Path(sys.executable).with_name("rkdet")
    proc = subprocess.Popen([str(rkdet), "emulator", "start", "--soc", "rk3568", "--dir", str(tmp_path / "d")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if line.strip().startswith("or: rkdet deploy") or not line:
                break
        text = "".join(lines)
        assert "listening on 127.0.0.1:" in text and "--ssh-config" in text
        ssh_line = next(x for x in lines if x.strip().startswith("ssh:")).split(":", 1)[1].strip()
        res = subprocess.run([*shlex.split(ssh_line), "echo", "ok"], capture_output=True,
                             text=True, timeout=30, env={**os.environ, "SSH_AUTH_SOCK": ""})
        assert res.stdout == "ok\n", res.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "emulator stopped" in err


def test_package_exports_the_emulator() -> None:
    from rkdet import emulator

    assert emulator.EmulatedBoard is EmulatedBoard and "busybox" in emulator.VARIANTS


def test_fuse_sysfs_is_served_to_the_board_user(tmp_path: Path) -> None:
    from rkdet.emulator.mount import fuse_unavailable_reason

    backend = "plain" if fuse_unavailable_reason() else "fuse"  # the plain fallback is tested either way
    with EmulatedBoard("rk3588", tmp_path / "w", sysfs=backend) as b, b.connect() as c:
        assert b.sysfs is not None and b.sysfs.backend == backend
        gov = c.run(["cat", f"{b.root}/sys/class/devfreq/fdab0000.npu/governor"]).out
        assert gov == "rknpu_ondemand\n"
        control = b.sysfs.control_dir
        c.run(["sh", "-c", 'echo 50 > "$1/load.npu.tmp" && mv "$1/load.npu.tmp" "$1/load.npu"', "sh", str(control)])
        assert (control / "load.npu").read_text() == "50\n"
        mounted = b.root
    assert not mounted.exists() or not any(mounted.iterdir())  # unmounted (and removed) on stop


def test_stop_ends_sessions_and_detached_jobs(tmp_path: Path) -> None:
    board = EmulatedBoard("rk3588", tmp_path / "w").start()
    c = board.connect()
    job = jobs.start(c, ["sleep", "300"], "~/j.pid", "~/j.log")
    assert Path(f"/proc/{job.pid}").exists()
    board.stop()
    deadline = time.monotonic() + 5
    while c._client.get_transport().is_active() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not c._client.get_transport().is_active()  # the session was ended with the board
    stat = Path(f"/proc/{job.pid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    c.close()


def test_restart_in_the_same_dir_keeps_the_host_key(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    with EmulatedBoard("rk3588", tmp_path / "w") as b, b.connect(known_hosts=known, accept_new_host_key=True):
        first_key = (b.workdir / "ssh_host_ed25519_key.pub").read_text()
    with EmulatedBoard("rk3588", tmp_path / "w") as b:
        assert (b.workdir / "ssh_host_ed25519_key.pub").read_text() == first_key
        with b.connect() as c:  # its fresh known_hosts names the new port with the same key
            assert c.run(["true"]).rc == 0


def test_emulator_start_builds_the_profile_variant_asked_for(tmp_path: Path) -> None:
    """`rkdet emulator start --speed-bin/--no-compaction/--no-thp` gives the sourced variant profiles."""
    from rkdet.cli.emulator import board_profile

    bin2304 = board_profile("rk3588", "2304", True, True)
    big = [p for p in bin2304.cpu_policies if max(p.frequencies_khz) > 2_000_000]
    assert big and all(max(p.frequencies_khz) == 2_304_000 for p in big)
    assert max(max(p.frequencies_khz) for p in board_profile("rk3588", None, True, True).cpu_policies) == 2_256_000
    bare = board_profile("rk3568", None, False, False)
    assert not bare.has_compaction_proactiveness and bare.thp_enabled is None
    with pytest.raises(InputError, match="--speed-bin is an RK3588 option"):
        board_profile("rk3568", "2304", True, True)
    with pytest.raises(InputError, match="one image profile"):
        board_profile("rv1126", None, False, True)
    with EmulatedBoard(bin2304, tmp_path / "w", "standard") as board:  # the board serves that profile's tree
        top = board.root / "sys/devices/system/cpu/cpufreq" / big[0].name / "cpuinfo_max_freq"
        assert top.read_text().strip() == "2304000"
