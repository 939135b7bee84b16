"""Open the one SSH connection a command uses, from the flags every board-facing command shares."""

from __future__ import annotations

import logging
from pathlib import Path


def open_connection(board: str, user: str | None, port: int | None, identity: Path | None,
                    known_hosts: Path | None, ssh_config: Path | None, accept_new_host_key: bool,
                    connect_timeout: float = 10.0, sftp_timeout: float = 30.0, proxy_jump: str | None = None):
    """Open the one SSH connection a command uses (strict host keys; BoardError, exit 3, on trouble).
    `proxy_jump` (a fleet inventory's ProxyJump) wins over ~/.ssh/config's, as `ssh -J` does."""
    from rkdet.link.hostkeys import DEFAULT_RKDET_KNOWN_HOSTS
    from rkdet.link.ssh import BoardConnection, Timeouts
    from rkdet.link.target import DEFAULT_SSH_CONFIG

    # paramiko logs transport-thread failures with tracebacks; with no handler they reach stderr (lastResort)
    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    timeouts = Timeouts(connect=connect_timeout, banner=connect_timeout, auth=connect_timeout, sftp=sftp_timeout)
    return BoardConnection.open(board, user=user, port=port, identity=identity,
                                known_hosts=known_hosts or DEFAULT_RKDET_KNOWN_HOSTS,
                                ssh_config=ssh_config or DEFAULT_SSH_CONFIG,
                                accept_new_host_key=accept_new_host_key, timeouts=timeouts, proxy_jump=proxy_jump)
