"""An installed rkdet whose files the board user cannot read gets one clear line from the emulator.

Why: the emulated board's login user imports the emulated runtime from rkdet's install; under a 0700
folder (a venv in /root, a private temp dir) it could not, and deploy then failed later with a
misleading "RKNNLite.load_rknn failed".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rkdet.emulator import sshd
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import EXIT_BAD_INPUT, InputError


def test_unreadable_runtime_double_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    double = private / "runtime_double"
    shutil.copytree(sshd.RUNTIME_DOUBLE, double)
    monkeypatch.setattr(sshd, "RUNTIME_DOUBLE", double)
    board = EmulatedBoard("rk3588", tmp_path / "board")
    with pytest.raises(InputError) as err:
        board.start()
    message = str(err.value)
    assert err.value.exit_code == EXIT_BAD_INPUT and "\n" not in message
    assert str(double) in message and "not readable by the board user" in message
    assert board._proc is None  # noqa: SLF001 - no sshd was started
