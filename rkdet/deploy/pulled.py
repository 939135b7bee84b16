"""THE one place where what a pull survived becomes the user's warnings, for every command that pulls: deploy (and
the fleet through it), the board bisection (`rkdet layers --board`) and `rkdet audit pull`.

Why: a pull whose SFTP session ended under it fetches the file again over exec and says so in
`TransferStats.notes` (rkdet/link/pull.py). The pull is still verified (sha256), but the cause (a board's
sftp-server dying, a network dropping one channel) is worth looking for, so it must not be swallowed by the
commands that do not print deploy's warnings. `transfer_warnings` is the text; `pull_noted` the pull that adds it
to a command's warnings; each command prints them as it prints its other warnings (`warning: ...`).
"""

from __future__ import annotations

from pathlib import Path

from rkdet.link.files import BoardLink
from rkdet.link.pull import pull
from rkdet.link.transfer import TransferStats


def transfer_warnings(stats: TransferStats) -> list[str]:
    """What the transfer survived, one warning each (each note names the board and the file)."""
    return [str(note) for note in stats.notes]


def pull_noted(conn: BoardLink, remote: str, local: Path, warnings: list[str], *,
               progress: bool = False) -> TransferStats:
    """rkdet.link.pull.pull, with what it survived added to `warnings` (the command shows them)."""
    stats = pull(conn, remote, local, progress=progress)
    warnings += transfer_warnings(stats)
    return stats


__all__ = ["pull_noted", "transfer_warnings"]
