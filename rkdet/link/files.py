"""File transfer as a protocol beside `CommandRunner` (labgrid's split: FileTransferProtocol's put/get).

Why: the verified push (transfer.py) and the untrusting pull (pull.py) decide WHAT goes where, with
which checks; how one file's bytes travel is a `FileTransfer`: the board's SFTP server
(rkdet.link.sftp.SftpFiles) or, on boards without one (Dropbear on Buildroot), `cat` over an exec
channel (`ExecFiles`, here). A `BoardLink` is what transfers are written against: a CommandRunner
that also hands out its current FileTransfer. `rkdet.link.ssh.BoardConnection` is the implementation.
Beside put/get, a transfer may answer `entry` (what is at a path) and do `place` (chmod + rename)
without a process on the board: SFTP requests to the running server cost ~0.2-1 ms where a shell
round trip costs 5-15 ms under load; `ExecFiles` declines both and the callers' scripts do it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from rkdet.errors import BoardError
from rkdet.link.shell import CommandRunner, remote_command


class Readable(Protocol):
    """What `put` reads a file's bytes from (a file, or a reader that hashes what it passes on)."""

    def read(self, n: int = -1) -> bytes: ...


class TransferSessionGone(BoardError):
    """A FileTransfer's session (SFTP) closed under a download, nothing of the file kept: the caller may
    fetch it again over exec (ExecFiles), still checked against the board's sha256."""


class FileTransfer(Protocol):
    """How one file's bytes go to and come from a board; the caller verifies them (sha256) itself."""

    @property
    def method(self) -> str:
        """"sftp" or "exec": the channel, as TransferStats records it."""
        ...

    def put(self, reader: Readable, remote: str, advance: Callable[[int], None], *, shown: str, name: str) -> None:
        """Write `reader`'s bytes to the remote path `remote` (a temporary name; the caller renames it).
        BoardError naming `shown` (what goes where) on failure; `name` labels a stalled stream."""
        ...

    def get(self, remote: str, size: int, sink: Callable[[bytes], None], advance: Callable[[int], None]) -> None:
        """Stream the remote file `remote` (declared `size` bytes) into `sink`; BoardError on failure
        (and whatever `sink` raises, unchanged)."""
        ...

    def entry(self, remote: str) -> tuple[str, int] | None:
        """What is at `remote`, not following a link, asked without starting a process on the board:
        ("f", size) a regular file, ("d", 0) a folder, ("-", 0) nothing; None when this transfer
        cannot ask so cheaply or it is anything else (the caller's shell script then decides)."""
        ...

    def place(self, moves: Sequence[tuple[str, str, int]]) -> bool:
        """chmod each already verified temp file to its mode and rename it onto its final path
        (temp, final, mode) without starting a process on the board; False, having done nothing,
        when this transfer cannot (the caller then runs its shell script); BoardError when a step fails."""
        ...


class BoardLink(CommandRunner, Protocol):
    """A board's commands and its file transfer: what push and pull are written against."""

    @property
    def command_timeout(self) -> float:
        """The default bound of one command (a streamed push may take this plus its size at a floor rate)."""
        ...

    def files(self) -> FileTransfer:
        """The transfer to use now: SFTP when the board serves it (and it has not stalled), else exec."""
        ...


class ExecFiles:
    """Files through `cat` over an exec channel of `conn` (boards without an SFTP subsystem)."""

    method = "exec"

    def __init__(self, conn: CommandRunner) -> None:
        self._conn = conn

    def put(self, reader: Readable, remote: str, advance: Callable[[int], None], *, shown: str, name: str) -> None:
        out = bytearray()
        rc = self._conn.stream(remote_command(["sh", "-c", 'cat > "$1"', "sh", remote]), stdin=reader,  # type: ignore[arg-type]  # reads like a file
                               stderr=out.extend, on_send=advance, what=f"upload {name}")
        if rc != 0:
            raise BoardError(f"{self._conn.target.label}: upload of {shown} failed: "
                             f"{out.decode('utf-8', 'replace').strip()}")

    def get(self, remote: str, size: int, sink: Callable[[bytes], None], advance: Callable[[int], None]) -> None:
        err = bytearray()
        name = remote.rsplit("/", 1)[-1]
        def counted(data: bytes) -> None:
            sink(data)
            advance(len(data))

        rc = self._conn.stream(remote_command(["cat", remote]), stdout=counted, stderr=self._conn.capped(err, "cat"),
                               what=f"download {name}", bulk=size)
        if rc != 0:
            raise BoardError(f"{self._conn.target.label}: download of {remote!r} failed: "
                             f"{err.decode('utf-8', 'replace').strip()[-200:]!r}")

    def entry(self, remote: str) -> tuple[str, int] | None:
        return None  # every question is a process: the callers' scripts ask several at once

    def place(self, moves: Sequence[tuple[str, str, int]]) -> bool:
        return False  # no call without a process: the push's commit script does it


__all__ = ["BoardLink", "ExecFiles", "FileTransfer", "Readable", "TransferSessionGone"]
