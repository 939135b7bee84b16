"""push and pull are written against `BoardLink` (rkdet.link.files), not the SSH connection: any link
that hands out a FileTransfer works, and the exec transfer moves the same verified bytes as SFTP."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rkdet.link.files import BoardLink, ExecFiles, FileTransfer
from rkdet.link.pull import pull
from rkdet.link.ssh import BoardConnection
from rkdet.link.transfer import STREAM_VERIFY_MIN_BYTES, push


class ExecOnly:
    """A BoardLink over an SSH connection whose board has SFTP, that never uses it (delegation only)."""

    def __init__(self, conn: BoardConnection) -> None:
        self._conn = conn
        self.handed_out: list[str] = []

    def __getattr__(self, name: str):  # run, stream, capped, abspath, target, ...: the connection's
        return getattr(self._conn, name)

    @property
    def command_timeout(self) -> float:
        return self._conn.command_timeout

    def files(self) -> FileTransfer:
        self.handed_out.append("exec")
        return ExecFiles(self._conn)


def test_the_connection_hands_out_sftp_and_the_protocol_takes_another_link(conn: BoardConnection, remote_tmp: str,
                                                                           tmp_path: Path) -> None:
    assert conn.files().method == "sftp"  # the emulated board serves SFTP
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "small.bin").write_bytes(os.urandom(70_000))
    (src / "big.bin").write_bytes(os.urandom(STREAM_VERIFY_MIN_BYTES + 1))  # streamed and hashed by the board
    link: BoardLink = ExecOnly(conn)
    stats = push(link, src, f"{remote_tmp}/up")
    assert (stats.method, stats.files_sent) == ("exec", 2) and link.handed_out  # type: ignore[attr-defined]
    got = pull(link, f"{remote_tmp}/up", tmp_path / "back")
    assert got.method == "exec" and got.files_sent == 2
    for rel in ("d/small.bin", "big.bin"):
        assert hashlib.sha256((tmp_path / "back" / rel).read_bytes()).digest() == \
            hashlib.sha256((src / rel).read_bytes()).digest()
    # the same files through the connection's own (SFTP) transfer: unchanged, so nothing is sent again
    assert push(conn, src, f"{remote_tmp}/up").files_skipped == 2
