"""`rkdet board info|pin|restore`: the click commands (parse, connect, call, report)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from rkdet.cli.options import connection_options
from rkdet.config import load_config
from rkdet.link.connect import ConnectionOptions, open_connection
from rkdet.log import log_console
from rkdet.textsafe import literal


@click.group("board")
def board_group() -> None:
    """Inspect a board, or pin/restore its clocks by hand."""


def _board_script(conn_opts: dict[str, Any], name: str, workdir: str | None, state_dir: str | None,
                  extra_env: dict[str, str] | None = None) -> tuple[str, list]:
    """Connect, push the board scripts, run one of them; return the board's label and the script's records."""
    from rkdet.deploy.layout import scripts_dir
    from rkdet.boardinfo.remote_scripts import run_board_script, state_dir_for
    from rkdet.deploy.stage import push_scripts

    sudo = bool(conn_opts.get("sudo"))
    with open_connection(ConnectionOptions.from_options(conn_opts)) as conn:
        wd = conn.abspath(workdir) if workdir else conn.default_workdir()
        push_scripts(conn, scripts_dir(wd))
        env = {"RKDET_WORK_DIR": wd, "RKDET_STATE_DIR": state_dir_for(conn, wd, sudo, state_dir), **(extra_env or {})}
        _, records = run_board_script(conn, name, scripts_dir(wd), env, sudo)
        return conn.target.label, records


@board_group.command("info")
@connection_options
@click.option("--workdir", default=None, help="Remote work dir for the scripts.")
@click.option("--state-dir", default=None, help="Remote pin state dir, where the board lock is (default as for deploy).")
def board_info(workdir: str | None, state_dir: str | None, **conn_opts: Any) -> None:
    """Probe the board and print what it is (JSON lines from probe.sh); the board lock's holder (or "free")
    goes to stderr as one line."""
    from rkdet.boardinfo.lock import probe_lock
    from rkdet.boardinfo.remote_scripts import parse_probe_of

    label, records = _board_script(conn_opts, "probe", workdir, state_dir)
    report = parse_probe_of(label, records)
    report.raise_for_status(label)
    click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    log_console().print(Text.assemble("board lock: ", literal(probe_lock(records, label).line())), soft_wrap=True)


@board_group.command("pin")
@connection_options
@click.option("--config", "config_path", type=click.Path(path_type=Path), default="configs/yolov8.yaml", show_default=True,
              help="Config whose board section says what to pin.")
@click.option("--workdir", default=None, help="Remote work dir for the scripts (default as for deploy).")
@click.option("--state-dir", default=None, help="Remote pin state dir; restore must be given the same one.")
def board_pin(config_path: Path, workdir: str | None, state_dir: str | None, **conn_opts: Any) -> None:
    """Pin the board profile and leave it pinned (restore with `rkdet board restore`)."""
    from rkdet.boardinfo import scripts as board_scripts
    from rkdet.deploy.settings import pin_env_from_config

    cfg = load_config(config_path)
    label, records = _board_script(conn_opts, "pin", workdir, state_dir, pin_env_from_config(cfg.board))
    report = board_scripts.parse_pin(records)
    for knob in report.knobs:
        click.echo(f"{knob.status:8} {knob.knob} {knob.actual or ''} {knob.reason or ''}".rstrip())
    if report.exit_code not in (0, 1):
        report.raise_for_status(label)
    click.echo(f"pinned; state saved on the board: run `rkdet board restore --board {conn_opts['board']}` to undo",
               err=True)


@board_group.command("restore")
@connection_options
@click.option("--workdir", default=None, help="Remote work dir for the scripts (default as for deploy).")
@click.option("--state-dir", default=None, help="Remote pin state dir, as given to `rkdet board pin`.")
def board_restore(workdir: str | None, state_dir: str | None, **conn_opts: Any) -> None:
    """Write back exactly the values saved by pin (idempotent)."""
    from rkdet.boardinfo import scripts as board_scripts
    label, records = _board_script(conn_opts, "restore", workdir, state_dir)
    report = board_scripts.parse_restore(records)
    report.raise_for_status(label)
    click.echo(report.note or f"restored {len(report.knobs)} value(s)")
