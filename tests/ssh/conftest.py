"""Real OpenSSH sshd boards on 127.0.0.1, started once per session (each start costs ~0.2 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rkdet.emulator.sshd import EmulatedBoard
from rkdet.link.ssh import BoardConnection, Timeouts

FAST = Timeouts(connect=5, banner=5, auth=5, command=60, keepalive=5)


class Boards:
    """Lazily started emulated boards, one per variant, stopped at session end."""

    def __init__(self, tmp_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_factory
        self._boards: dict[str, EmulatedBoard] = {}

    def __getitem__(self, variant: str) -> EmulatedBoard:
        if variant not in self._boards:
            self._boards[variant] = EmulatedBoard("rk3588", self._tmp.mktemp(f"board-{variant}"), variant).start()
        return self._boards[variant]

    def stop(self) -> None:
        for board in self._boards.values():
            board.stop()


@pytest.fixture(scope="session")
def boards(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Boards]:
    b = Boards(tmp_path_factory)
    yield b
    b.stop()


@pytest.fixture(scope="session")
def board(boards: Boards) -> EmulatedBoard:
    return boards["standard"]


@pytest.fixture(scope="session")
def conn(board: EmulatedBoard) -> Iterator[BoardConnection]:
    c = board.connect(timeouts=FAST)
    yield c
    c.close()


@pytest.fixture
def remote_tmp(conn: BoardConnection, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh remote directory (under the board user's $HOME) per test, removed after."""
    path = f"{conn.home}/t-{request.node.name[:40]}"
    conn.run(["rm", "-rf", path])
    conn.run(["mkdir", "-p", path])
    yield path
    conn.run(["rm", "-rf", path], check=False)
