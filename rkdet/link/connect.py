"""Open the one SSH connection a command uses, from the flags every board-facing command shares.

Why a record: `rkdet deploy`, `rkdet board`, `rkdet layers --board` and every board of `rkdet fleet
deploy` take the same connection flags; `ConnectionOptions` holds them once (built from the parsed
flags in one call) and `for_board` lets a fleet source's per-board values win, so no caller restates
them field by field.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from rkdet.link.ssh import BoardConnection


@dataclass(frozen=True)
class ConnectionOptions:
    """How to reach one board: the `--board --user --port --identity --known-hosts --ssh-config
    --accept-new-host-key --connect-timeout --sftp-timeout` flags (`--sudo`, how board-side work runs,
    is a run setting: `RunOverrides.sudo`)."""

    board: str = ""  # HOST[:PORT] or a Host alias; a fleet's boards come from its source instead
    user: str | None = None
    port: int | None = None
    identity: Path | None = None
    known_hosts: Path | None = None
    ssh_config: Path | None = None
    accept_new_host_key: bool = False
    connect_timeout: float = 10.0
    sftp_timeout: float = 30.0
    proxy_jump: str | None = None  # a fleet inventory's ProxyJump (wins over ~/.ssh/config's, as `ssh -J`)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ConnectionOptions:
        """The record from parsed click options (keys named as the fields; absent ones take the defaults)."""
        return cls(**{f.name: options[f.name] for f in fields(cls) if options.get(f.name) is not None})

    def for_board(self, address: str, *, user: str | None = None, port: int | None = None,
                  identity: Path | None = None, known_hosts: Path | None = None, proxy_jump: str | None = None) -> ConnectionOptions:
        """These options for one board of a fleet: the board's own values (its source's) win where given."""
        return replace(self, board=address, user=user or self.user, port=port,
                       identity=identity or self.identity, known_hosts=known_hosts or self.known_hosts,
                       proxy_jump=proxy_jump)


def open_connection(options: ConnectionOptions) -> BoardConnection:
    """Open the one SSH connection a command uses (strict host keys; BoardError, exit 3, on trouble)."""
    from rkdet.link.hostkeys import DEFAULT_RKDET_KNOWN_HOSTS
    from rkdet.link.ssh import BoardConnection, Timeouts
    from rkdet.link.target import DEFAULT_SSH_CONFIG

    # paramiko logs transport-thread failures with tracebacks; with no handler they reach stderr (lastResort)
    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    o = options
    timeouts = Timeouts(connect=o.connect_timeout, banner=o.connect_timeout, auth=o.connect_timeout,
                        sftp=o.sftp_timeout)
    return BoardConnection.open(o.board, user=o.user, port=o.port, identity=o.identity,
                                known_hosts=o.known_hosts or DEFAULT_RKDET_KNOWN_HOSTS,
                                ssh_config=o.ssh_config or DEFAULT_SSH_CONFIG,
                                accept_new_host_key=o.accept_new_host_key, timeouts=timeouts,
                                proxy_jump=o.proxy_jump)
