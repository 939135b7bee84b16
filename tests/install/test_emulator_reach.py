"""An rkdet whose files sit behind folders the board user cannot search still runs its emulated board.

Why: a clone in /root (0700), a venv under a private home or a `mktemp -d` folder (the installed
wheel) hold the interpreter and the emulated runtime the board's login user runs. The board reaches
them through its own mount namespace (users.Reach: an empty tmpfs over the blocking folder, the
needed paths bound back read-only), so no host permission is loosened and nothing is copied; only
what the board needs is visible there, not the private folder's other files.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from rkdet.emulator import sshd
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import EXIT_BAD_INPUT, InputError


def _private_install(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A 0700 folder holding a copy of the emulated runtime, a venv (numpy etc. through a .pth to
    this venv's site-packages) and a secret file the board must not see."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    double = private / "runtime_double"
    shutil.copytree(sshd.RUNTIME_DOUBLE, double)
    venv = private / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    elsewhere = tmp_path / "elsewhere"  # another private folder, reached only through the venv's .pth
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "site").mkdir()
    (elsewhere / "site" / "reach_probe.py").write_text("WHERE = 'elsewhere'\n")
    (site / "host-venv.pth").write_text(f"{sysconfig.get_path('purelib')}\n{elsewhere / 'site'}\n")
    (private / "secret.txt").write_text("not for the board\n")
    return private, double, venv


def test_private_install_is_reached_inside_the_namespace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    private, double, venv = _private_install(tmp_path)
    monkeypatch.setattr(sshd, "RUNTIME_DOUBLE", double)
    before = private.stat()
    with EmulatedBoard("rk3588", tmp_path / "board", python=venv / "bin" / "python3") as board:
        script = ("import sys, rknnlite.api as api, reach_probe; print(sys.prefix); print(api.__file__); "
                  "print(sorted(__import__('os').listdir(sys.argv[1])))")
        res = subprocess.run([*board.ssh_argv(), "python3", "-c", f'"{script}"', str(private)],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        prefix, api_file, listing = res.stdout.splitlines()
        assert prefix == str(venv)
        assert api_file.startswith(str(double))
        assert "secret.txt" not in listing and set(eval(listing)) <= {"runtime_double", "venv"}  # noqa: S307
        write = subprocess.run([*board.ssh_argv(), f"touch {double}/x"], capture_output=True, text=True, timeout=60)
        assert write.returncode != 0  # bound read-only
    after = private.stat()
    assert stat.S_IMODE(after.st_mode) == 0o700 and (after.st_uid, after.st_mtime_ns) == (before.st_uid, before.st_mtime_ns)
    assert not (double / "x").exists()


def test_a_needed_folder_closed_to_everyone_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    double = tmp_path / "runtime_double"
    shutil.copytree(sshd.RUNTIME_DOUBLE, double)
    double.chmod(0o700)  # the folder itself: no namespace trick can open it without changing the host
    monkeypatch.setattr(sshd, "RUNTIME_DOUBLE", double)
    board = EmulatedBoard("rk3588", tmp_path / "board")
    with pytest.raises(InputError) as err:
        board.start()
    message = str(err.value)
    assert err.value.exit_code == EXIT_BAD_INPUT and "\n" not in message
    assert str(double) in message and "not readable by the board user" in message
    assert board._proc is None  # noqa: SLF001 - no sshd was started
