"""Deploy as a new user does (issue 12 §4): from a build alone, with the lines `rkdet emulator start`
prints, and messages that name the cause; a completed run is recorded in the results database, and
--install-selfcheck leaves a working self-check on the board."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deploy_helpers import CONFIG, board_args, error_line, run_folders

from rkdet.emulator.sshd import VARIANTS, EmulatedBoard


@pytest.fixture(scope="module")
def build(one_page_build: Path) -> Path:
    """The session's one-page build (tests/deploy/conftest.py): what is checked here is how a deploy is
    started (from a build alone, the printed lines, sudo and pinning), the run's verdict and records, never
    how many inputs it ran; one page is one board-side inference less in each of the module's ten deploys."""
    return one_page_build


def _rkdet(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """The real CLI, run from `cwd` (a folder without configs/yolov8.yaml unless said otherwise); wide
    lines, so that a path in a log line is not wrapped."""
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ, "COLUMNS": "1000"})


def test_a_build_alone_deploys_records_the_run_and_installs_the_selfcheck(board: EmulatedBoard, build: Path,
                                                                          tmp_path: Path) -> None:
    out = tmp_path / "results"
    assert not (tmp_path / "configs").exists()
    proc = _rkdet(["deploy", *board_args(board), "--build", build, "--out", out, "--repeats", "1",
                   "--warmup", "0", "--no-pin", "--install-selfcheck"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = proc.stderr
    assert f"settings (run, board, tolerances) from {build}/config.resolved.json" in err
    # issue 30 #16: what the build folder decides on the board is said
    assert "(the build folder's: board work dir the default, sudo no; pass --config FILE to use your own)" in err
    assert "board restored: not pinned" in err and "None" not in err
    [folder] = run_folders(out)
    # the run is in the results database
    assert f"recorded in {out}/rkdet.db" in err
    hist = _rkdet(["history", "--results", out, "--json"], cwd=tmp_path, timeout=60)
    assert hist.returncode == 0, hist.stderr
    runs = json.loads(hist.stdout)["runs"]
    assert [r["run_id"] for r in runs] == [folder.name]
    # the self-check: installed under the workdir, run once, its ExecStartPre= line works as printed
    with board.connect() as conn:
        remote = f"{conn.default_workdir()}/selfcheck"
    assert f"self-check installed in {remote} and run once: rkdet-selfcheck: IDENTICAL to onnx-fp32" in err
    line = next(x for x in proc.stderr.splitlines() if "ExecStartPre=" in x)
    command = line.split("ExecStartPre=", 1)[1].strip()
    assert command.startswith(f"python3 {remote}/rkdet-onboard.pyz selfcheck ")
    with board.connect() as conn:
        res = conn.run(["sh", "-c", command], check=False, timeout=300)
    assert res.rc == 0 and "IDENTICAL to onnx-fp32" in res.out, (res.out, res.err)


def test_a_broken_resolved_config_is_bad_input_naming_file_and_key(board: EmulatedBoard, tmp_path: Path) -> None:
    build = tmp_path / "build"
    (build / "golden" / "inputs").mkdir(parents=True)
    for name in ("model.io.json", "model.rknn"):  # a build folder, as far as deploy checks first
        (build / name).write_text("{}")
    # the manifest's two required fields (the strict reader refuses a manifest without them first)
    (build / "manifest.json").write_text(json.dumps({"fingerprint": "ab" * 32, "platform": "rk3588"}))
    (build / "config.resolved.json").write_text(json.dumps({"run": {"repeats": 0}, "board": {}, "tolerances": {}}))
    proc = _rkdet(["deploy", *board_args(board), "--build", build, "--out", tmp_path / "r"], cwd=tmp_path)
    assert proc.returncode == 2
    line = error_line(proc)
    assert f"{build}/config.resolved.json" in line and "'run.repeats'" in line
    (build / "config.resolved.json").unlink()
    proc = _rkdet(["deploy", *board_args(board), "--build", build, "--out", tmp_path / "r"], cwd=tmp_path)
    assert proc.returncode == 2 and "config.resolved.json: missing; pass --config" in error_line(proc)


def test_sudo_that_wants_a_password_is_named_with_the_fix(build: Path, tmp_path: Path) -> None:
    variant = dataclasses.replace(VARIANTS["sudo"], sudo_password=True)
    with EmulatedBoard("rk3588", tmp_path / "board", variant) as board:
        proc = _rkdet(["deploy", *board_args(board), "--config", CONFIG, "--build", build,
                       "--out", tmp_path / "r", "--repeats", "1", "--warmup", "0", "--sudo"], cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert f"settings (run, board, tolerances) from {CONFIG}" in proc.stderr
    line = error_line(proc)
    assert "sudo: a password is required for rkdetsudo" in line and "NOPASSWD" in line and "--user root" in line
    assert "has no sudo at all, deploy without --sudo and with --no-pin" in line  # what works on a board without sudo
    assert "ended without a result" not in line


def test_pinning_refused_for_a_login_without_sudo_names_what_works(build: Path, tmp_path: Path) -> None:
    """The standard board's login has no sudo: on a FUSE sysfs (kernel permissions) pin.sh is denied; the
    advice names --no-pin (and --sudo only for a login that has passwordless sudo), and --no-pin then works."""
    with EmulatedBoard("rk3588", tmp_path / "board", sysfs="fuse") as board:
        args = ["deploy", *board_args(board), "--build", build, "--repeats", "1", "--warmup", "0"]
        proc = _rkdet([*args, "--out", tmp_path / "r"], cwd=tmp_path)
        ok = _rkdet([*args, "--out", tmp_path / "r2", "--no-pin"], cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr[-3000:]
    line = error_line(proc)
    assert "permission denied" in line and "--no-pin" in line and "passwordless sudo" in line
    assert ok.returncode == 0 and "board restored: not pinned" in ok.stderr, ok.stderr[-3000:]


@pytest.mark.parametrize("variant", ["sudo", "standard", "nosftp", "busybox"])
def test_the_printed_deploy_line_of_each_board_variant_works_as_printed(variant: str, build: Path,
                                                                       tmp_path: Path) -> None:
    """Issue 24 §3: every variant's printed line works as printed: a sudo board pins through --sudo, a board
    whose login has no sudo at all says --no-pin (and why) instead of failing at pin.sh."""
    rkdet = Path(sys.executable).with_name("rkdet")
    proc = subprocess.Popen([str(rkdet), "emulator", "start", "--variant", variant, "--dir", str(tmp_path / "d")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if line.strip().startswith("or: rkdet deploy") or not line:
                break
        printed = {key: next(x for x in lines if x.strip().startswith(key)).split(":", 1)[1].strip()
                   for key in ("deploy:", "or:")}
        sudo = variant == "sudo"
        fuse = any("emulated sysfs (fuse)" in x for x in lines)
        unpinned = fuse and not sudo  # kernel permissions: a login without sudo cannot pin
        if unpinned:  # the explanation comes after the deploy lines
            while not any("--no-pin: this board's login" in x for x in lines) and lines[-1]:
                lines.append(proc.stdout.readline())
            assert any("has no sudo" in x and "--variant sudo" in x for x in lines), lines
        for key, text in printed.items():
            argv = shlex.split(text)
            assert argv[:2] == ["rkdet", "deploy"] and ("--sudo" in argv) == sudo and ("--no-pin" in argv) == unpinned, text
            out = tmp_path / key.rstrip(":")
            res = _rkdet([*argv[1:], "--build", build, "--out", out, "--repeats", "1", "--warmup", "0"],
                         cwd=tmp_path)
            assert res.returncode == 0, (key, res.stderr[-3000:])
            assert "SAME (bitwise)" in res.stderr
            assert f"board restored: {'not pinned' if unpinned else 'yes'}" in res.stderr
            [folder] = run_folders(out)
            record = json.loads((folder / "deploy.json").read_text())
            assert record["settings"]["sudo"] is sudo and record["status"] == "complete"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


def test_the_log_line_names_the_work_dir_and_sudo_a_build_folder_sets(tmp_path: Path) -> None:
    """Issue 30 #16: a build folder's board.workdir and board.sudo are used without --config (documented), and said."""
    from rkdet.cli.deploy import from_build_note
    from rkdet.config import build_deploy_settings

    (tmp_path / "config.resolved.json").write_text(json.dumps({"run": {}, "board": {"workdir": "/srv/x", "sudo": True},
                                                               "tolerances": {}}))
    chosen = build_deploy_settings(tmp_path)
    note = from_build_note(chosen, None)
    assert "board work dir /srv/x, sudo yes" in note and "--config" in note
    assert from_build_note(chosen, tmp_path / "mine.yaml") == ""
