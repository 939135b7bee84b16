"""Static checks of the board scripts: shellcheck as POSIX sh, parse under each shell, documentation."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

import pytest

from rkdet.boardinfo.scripts import SCRIPT_FILES, SCRIPT_NAMES, board_scripts_dir, deploy_files, script_path


@pytest.mark.slow  # shellcheck -x follows the sourced helpers: ~5 s on 2 busy cores
def test_shellcheck_posix_sh_clean() -> None:
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck not installed; run .ci/setup (apt package shellcheck)")
    files = sorted(str(p) for p in board_scripts_dir().glob("*.sh"))
    done = subprocess.run(["shellcheck", "-s", "sh", "-x", "-f", "gcc", *files], capture_output=True, text=True,
                          cwd=board_scripts_dir(), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("shell", ["dash", "busybox sh", "bash --posix"])
def test_every_script_parses(shell: str) -> None:
    for path in sorted(board_scripts_dir().glob("*.sh")):
        done = subprocess.run([*shlex.split(shell), "-n", str(path)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{shell} -n {path.name}: {done.stderr}"


def test_deploy_list_is_complete() -> None:
    on_disk = {p.name for p in board_scripts_dir().glob("*.sh")}
    assert {p.name for p in deploy_files()} == on_disk == set(SCRIPT_FILES)
    for name in SCRIPT_NAMES:
        path = script_path(name)
        text = path.read_text()
        assert text.startswith("#!/bin/sh\n"), path
        assert os.access(path, os.X_OK), f"{path} is not executable"
        assert "set -eu" in text and "Exit codes:" in text, f"{path}: needs set -eu and documented exit codes"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_help_prints_the_header(name: str) -> None:
    done = subprocess.run(["dash", str(script_path(name)), "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert done.stdout.startswith(f"{name}.sh - ") and "Exit codes:" in done.stdout
    assert not any(line.startswith("#") for line in done.stdout.splitlines())


@pytest.mark.parametrize("name", ["probe", "pin", "restore"])
def test_unknown_argument_is_bad_input(name: str, tmp_path) -> None:
    done = subprocess.run(["dash", str(script_path(name)), "--bogus"], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "RKDET_ROOT": str(tmp_path), "RKDET_STATE_DIR": str(tmp_path)})
    assert done.returncode == 2
    assert "--bogus" in done.stderr and len(done.stderr.strip().splitlines()) == 1
