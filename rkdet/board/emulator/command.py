"""`rkdet emulator start`: run an emulated board in the foreground until Ctrl-C."""

from __future__ import annotations

import shlex
import signal
import threading
from pathlib import Path

import click

from rkdet.board.emulator.sshd import VARIANTS, EmulatedBoard
from rkdet.board.socs import PROFILES


@click.group("emulator")
def emulator() -> None:
    """An emulated Rockchip board on 127.0.0.1 (real sshd, fake sysfs, emulated runtime)."""


@emulator.command("start")
@click.option("--soc", type=click.Choice(sorted(PROFILES)), default="rk3588", show_default=True)
@click.option("--dir", "workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep keys, config and log here (default: a temp dir removed on exit).")
@click.option("--variant", type=click.Choice(list(VARIANTS)), default="standard", show_default=True,
              help="standard; nosftp (no SFTP subsystem); busybox (busybox shell, no SFTP); sudo (passwordless sudo); "
                   "hostile (TEST CONTROL: a board that lies: crafted file listings and results, a stalling SFTP).")
@click.option("--sysfs", type=click.Choice(["auto", "fuse", "plain"]), default="auto", show_default=True,
              help="Emulated sysfs: FUSE with kernel semantics (auto falls back to plain files).")
def start(soc: str, workdir: Path | None, variant: str, sysfs: str) -> None:
    """Start the board, print how to reach it, and stop cleanly on Ctrl-C (or SIGTERM)."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with EmulatedBoard(soc, workdir, variant, sysfs=sysfs) as board:
            click.echo(f"emulated {soc} board ({variant}) listening on {board.target} as user {board.user}")
            backend = board.sysfs.backend if board.sysfs is not None else "plain"
            click.echo(f"  emulated sysfs ({backend}): RKDET_ROOT={board.root}")
            click.echo(f"  ssh:    {shlex.join(board.ssh_argv())}")
            click.echo(f"  deploy: rkdet deploy --board {board.alias} --ssh-config {shlex.quote(str(board.ssh_config_file))}")
            click.echo(f"     or: rkdet deploy --board {board.target} --user {board.user} "
                       f"--identity {shlex.quote(str(board.identity_file))} "
                       f"--known-hosts {shlex.quote(str(board.known_hosts_file))}")
            click.echo("press Ctrl-C to stop", err=True)
            try:
                while not stop.wait(0.5):
                    if not board.running:
                        raise click.ClickException(f"sshd exited; see {board.log_file}")
            except KeyboardInterrupt:
                pass
        click.echo("emulator stopped", err=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
