"""Every way a deploy can be refused: one `rkdet: ...` line naming the host and what to do, the
documented exit code, no traceback, no half-written results folder, and the board left as it was."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_helpers import REPO, assert_untouched, deploy, deploy_args, error_line, rkdet, run_folders

from rkdet.emulator.sshd import EmulatedBoard, free_port
from rkdet.emulator.fake_tree import tree_digest
from rkdet.errors import EXIT_BOARD


def _refused(proc: subprocess.CompletedProcess, out: Path) -> str:
    assert proc.returncode == EXIT_BOARD, proc.stderr[-3000:]
    assert run_folders(out) == [], "a refused deploy left a results folder"
    return error_line(proc)


def _host_fingerprint(board: EmulatedBoard) -> str:
    line = subprocess.run(["ssh-keygen", "-l", "-f", str(board.workdir / "ssh_host_ed25519_key.pub")],
                          capture_output=True, text=True, check=True).stdout
    return line.split()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A socket on 127.0.0.1 that accepts connections and never says a word (no SSH banner)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def test_silent_host_times_out(board: EmulatedBoard, fast_build: Path, tmp_path: Path, silent_port: int) -> None:
    out = tmp_path / "r"
    proc = rkdet(["deploy", "--board", f"127.0.0.1:{silent_port}", "--user", board.user, "--identity",
                  str(board.identity_file), "--known-hosts", str(board.known_hosts_file), "--ssh-config", "/dev/null",
                  "--connect-timeout", "1.5", "--build", str(fast_build), "--out", str(out)], timeout=60)
    line = _refused(proc, out)
    assert f"127.0.0.1:{silent_port}" in line and "no SSH banner within 1.5 s" in line


def test_refused_port(board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    port = free_port()
    proc = rkdet(["deploy", "--board", f"127.0.0.1:{port}", "--user", board.user, "--identity", str(board.identity_file),
                  "--known-hosts", str(board.known_hosts_file), "--ssh-config", "/dev/null",
                  "--build", str(fast_build), "--out", str(out)], timeout=60)
    line = _refused(proc, out)
    assert f"127.0.0.1:{port}: connection refused" in line


def test_wrong_key(board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    out = tmp_path / "r"
    before = tree_digest(board.root)
    proc = deploy(board, fast_build, out, identity=key)
    line = _refused(proc, out)
    assert "authentication failed" in line and str(key) in line and "--identity" in line
    assert_untouched(board, before)


@pytest.mark.slow
def test_unknown_host_key_then_accept_new(board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"  # empty: the board is new to us
    known.write_text("")
    out = tmp_path / "r"
    before = tree_digest(board.root)
    proc = deploy(board, fast_build, out, known_hosts=known)
    line = _refused(proc, out)
    assert _host_fingerprint(board) in line and "--accept-new-host-key" in line
    assert known.read_text() == ""  # refusing records nothing
    assert_untouched(board, before)

    proc = deploy(board, fast_build, out, "--accept-new-host-key", repeats=1, known_hosts=known)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"[127.0.0.1]:{board.port} ssh-ed25519 " in known.read_text()
    again = rkdet(["board", "info", "--board", board.target, "--user", board.user, "--identity", str(board.identity_file),
                   "--known-hosts", str(known), "--ssh-config", "/dev/null"])
    assert again.returncode == 0, again.stderr  # now known: strict checking passes without the flag
    assert_untouched(board, before)


def test_changed_host_key_is_refused_even_with_accept_new(board: EmulatedBoard, fast_build: Path,
                                                          tmp_path: Path) -> None:
    other = tmp_path / "impostor"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    keytype, data = (tmp_path / "impostor.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{board.port} {keytype} {data}\n")
    out = tmp_path / "r"
    before = tree_digest(board.root)
    for extra in ((), ("--accept-new-host-key",)):
        proc = deploy(board, fast_build, out, *extra, known_hosts=known)
        line = _refused(proc, out)
        assert "HOST KEY CHANGED" in line and _host_fingerprint(board) in line and "ssh-keygen -R" in line
    assert known.read_text() == f"[127.0.0.1]:{board.port} {keytype} {data}\n"
    assert_untouched(board, before)


def test_board_of_another_soc(fast_build: Path, tmp_path: Path) -> None:
    with EmulatedBoard("rk3568", tmp_path / "board") as rk3568:
        before = tree_digest(rk3568.root)
        out = tmp_path / "r"
        proc = deploy(rk3568, fast_build, out)
        line = _refused(proc, out)
        assert "board is rk3568 but the build targets rk3588" in line and "--target rk3568" in line
        assert_untouched(rk3568, before)


def test_sysfs_not_writable_by_the_login_user(fresh_board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    """Knobs owned by root and read-only for the board user (a board whose login is not root, no --sudo)."""
    npu = next((fresh_board.root / "sys/class/devfreq").glob("*.npu"))
    for name in ("governor", "min_freq", "max_freq"):
        os.chown(npu / name, 0, 0)
        os.chmod(npu / name, 0o644)
    before = tree_digest(fresh_board.root)
    out = tmp_path / "r"
    proc = deploy(fresh_board, fast_build, out)
    assert proc.returncode == EXIT_BOARD, proc.stderr[-3000:]
    line = error_line(proc)
    assert "permission denied" in line and f"{npu}/governor" in line and "nothing was changed" in line
    assert "--sudo" in line  # what to do about it from the deploy command
    assert_untouched(fresh_board, before)
    [folder] = run_folders(out)  # the refused run is kept as evidence, marked failed
    record = json.loads((folder / "deploy.json").read_text())
    assert record["status"] == "failed" and "permission denied" in record["error"]
    assert not (folder / "result").exists()


@pytest.fixture
def board_tmp() -> Iterator[Path]:
    """A host directory the board user can reach and write (tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="rkdet-deploy-test-"))
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_disk_full_on_the_board(board: EmulatedBoard, fast_build: Path, tmp_path: Path, board_tmp: Path) -> None:
    """A 4 MiB tmpfs as the remote work dir: preflight refuses before anything is pushed or pinned.
    The tmpfs is mounted on the board's side (its mount namespace), as a board's small partition is."""
    mnt = board_tmp / "small"
    mnt.mkdir()
    on_board = board.on_board_argv()
    subprocess.run([*on_board, "mount", "-t", "tmpfs", "-o", "size=4m,mode=1777", "rkdet-test-full", str(mnt)],
                   check=True)
    try:
        before = tree_digest(board.root)
        out = tmp_path / "r"
        proc = deploy(board, fast_build, out, "--workdir", str(mnt / "wd"))
        line = _refused(proc, out)
        assert "not enough disk in the work dir" in line and "--workdir" in line
        assert_untouched(board, before)
        listing = subprocess.run([*on_board, "find", str(mnt), "-name", "model.rknn"], capture_output=True, text=True)
        assert listing.returncode == 0 and listing.stdout == ""  # the model was never sent
    finally:
        subprocess.run([*on_board, "umount", str(mnt)], check=True)


@pytest.mark.slow
def test_workdir_with_spaces_and_shell_metacharacters(board: EmulatedBoard, fast_build: Path, tmp_path: Path,
                                                      board_tmp: Path) -> None:
    name = "rk dir;$(touch PWNED)`touch PWNED`'\"$HOME*"
    workdir = board_tmp / name
    before = tree_digest(board.root)
    out = tmp_path / "r"
    proc = deploy(board, fast_build, out, "--workdir", str(workdir), "--keep", repeats=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SAME (bitwise)" in proc.stderr
    for place in (board_tmp, Path(board.home), Path("/tmp"), workdir):  # where an injected `touch` would land
        assert not (place / "PWNED").exists(), place
    assert not list(board_tmp.rglob("PWNED")) and not list(Path(board.home).rglob("PWNED"))
    assert [p.name for p in board_tmp.iterdir()] == [name]  # nothing else was created beside it
    assert (workdir / "scripts" / "pin.sh").is_file() and list(workdir.glob("runs/*/result/run.json"))
    assert_untouched(board, before)


def test_not_a_build_folder_fails_before_connecting(tmp_path: Path) -> None:
    out = tmp_path / "r"
    port = free_port()  # nobody listens: the command must not even try
    proc = rkdet(["deploy", "--board", f"127.0.0.1:{port}", "--ssh-config", "/dev/null", "--build", str(tmp_path),
                  "--out", str(out)], timeout=60)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert str(tmp_path) in line and "no manifest.json" in line and "rkdet convert" in line
    assert not out.exists()


@pytest.mark.slow
def test_disk_fills_up_during_the_run(board: EmulatedBoard, fast_build: Path, tmp_path: Path, board_tmp: Path) -> None:
    """A tmpfs work dir with room for preflight, filled by someone else once the run started: the
    runner fails with ENOSPC, the board is restored, and the deploy says so in one line (exit 3)."""
    mnt = board_tmp / "filling"
    mnt.mkdir()
    on_board = board.on_board_argv()  # the tmpfs is the board's (its mount namespace), not the host's
    subprocess.run([*on_board, "mount", "-t", "tmpfs", "-o", "size=160m,mode=1777", "rkdet-test-fill", str(mnt)],
                   check=True)
    proc = None
    try:
        before = tree_digest(board.root)
        out, log = tmp_path / "r", tmp_path / "deploy.log"
        with open(log, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "rkdet.cli",
                                     *deploy_args(board, fast_build, out, "--workdir", str(mnt / "wd"), repeats=40)],
                                    stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)
        deadline = time.monotonic() + 120
        while not re.search(r"inference [1-9][0-9]*/", log.read_text()):  # polls may skip counts
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        # the rest of the disk, as another process on the board would (dd ends with ENOSPC)
        subprocess.run([*on_board, "sh", "-c", 'dd if=/dev/zero of="$1" bs=1M 2> /dev/null; true', "sh",
                        str(mnt / "ballast")], check=True)
        proc.wait(timeout=120)
        text = log.read_text()
        assert proc.returncode == EXIT_BOARD, text[-3000:]
        line = [ln for ln in text.splitlines() if ln.startswith("rkdet: ")]
        assert len(line) == 1 and "Traceback" not in text, text[-3000:]
        # "failed" when the full disk also ate the job's exit status; "exited 3" when the board lock's release
        # (its holder record removed from the state dir on the same tmpfs) freed the page it needed
        assert re.search(r"rkdet-run (failed|exited 3)", line[0]) and "No space left on device" in line[0], line
        subprocess.run([*on_board, "rm", str(mnt / "ballast")], check=True)
        assert_untouched(board, before)
        [folder] = run_folders(out)
        record = json.loads((folder / "deploy.json").read_text())
        assert record["status"] == "failed" and record["restored"] is True
        # the job's own restore records were lost with the disk: deploy re-ran restore.sh to know
        assert any("work dir is full" in w and "ran restore.sh again" in w for w in record["warnings"]), record
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        subprocess.run([*on_board, "umount", str(mnt)], check=True)


@pytest.mark.parametrize("library, expected", [
    (b"\x7fELF\x02\x01\x01\0librknnrt version: 1.6.0 (2de554906@2023-11-21T17:26:33)\0",
     "librknnrt 1.6.0 cannot load model format 6"),
    (None, "no RKNN runtime library found"),
])
def test_board_runtime_that_cannot_run_the_model(fresh_board: EmulatedBoard, fast_build: Path, tmp_path: Path,
                                                 library: bytes | None, expected: str) -> None:
    lib = fresh_board.root / "usr/lib/librknnrt.so"
    if library is None:
        lib.unlink()
    else:
        lib.write_bytes(library)
    before = tree_digest(fresh_board.root)
    out = tmp_path / "r"
    line = _refused(deploy(fresh_board, fast_build, out), out)
    assert expected in line and fresh_board.user in line
    assert_untouched(fresh_board, before)


@pytest.mark.slow
def test_board_without_rknnlite_refused_then_onnxruntime_backend_runs(fast_build: Path, tmp_path: Path) -> None:
    """No rknn-toolkit-lite2 on the board: refused with the way out, and that way out works."""
    with EmulatedBoard("rk3588", tmp_path / "board", env={"PYTHONPATH": str(tmp_path / "nothing")}) as bare:
        before = tree_digest(bare.root)
        out = tmp_path / "r"
        line = _refused(deploy(bare, fast_build, out), out)
        assert "cannot import rknnlite" in line and "--backend onnxruntime" in line
        assert_untouched(bare, before)

        proc = deploy(bare, fast_build, out, "--backend", "onnxruntime", repeats=1)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "SAME (bitwise)" in proc.stderr and "EMULATED" not in proc.stderr
        [folder] = run_folders(out)
        run = json.loads((folder / "result" / "run.json").read_text())
        assert run["backend"] == "onnxruntime" and not run["emulated"]
        assert_untouched(bare, before)


def test_malformed_fault_control_fails_before_connecting(fast_build: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = rkdet(["deploy", "--board", f"127.0.0.1:{free_port()}", "--ssh-config", "/dev/null", "--build",
                  str(fast_build), "--out", str(out), "--emulator-fault", "{occurrence: 1"], timeout=60)
    assert proc.returncode == 2 and "--emulator-fault: not valid JSON" in error_line(proc)
    assert not out.exists()
