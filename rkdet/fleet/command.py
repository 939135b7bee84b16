"""`rkdet fleet hosts`: list the boards an inventory, a --limit or a list of names selects."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from rkdet.errors import InputError
from rkdet.fleet.inventory import Board, boards_from_names, load_inventory, read_boards_file, select
from rkdet.textsafe import markup_escaped


def source_options(func):  # type: ignore[no-untyped-def]
    """The board-source flags (one source per command), shared with the future `fleet deploy`."""
    options = [
        click.option("--inventory", type=click.Path(path_type=Path, dir_okay=False), default=None,
                     help="Ansible YAML inventory (groups, children, hosts, vars; ansible_* and rkdet_* vars)."),
        click.option("--limit", default=None, help="Ansible host pattern: group, host, all, web*, a:b, a:!b, a:&b."),
        click.option("--board", "boards", multiple=True, help="A board (~/.ssh/config Host or HOST[:PORT]); repeatable."),
        click.option("--boards-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
                     help="A file of board names, one per line (# comments)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def resolve_boards(inventory: Path | None, limit: str | None, boards: tuple[str, ...],
                   boards_file: Path | None) -> list[Board]:
    """The selected boards from exactly one source (InputError, exit 2, on a usage mistake)."""
    given = [name for name, value in (("--inventory", inventory), ("--board", boards), ("--boards-file", boards_file))
             if value]
    if len(given) != 1:
        raise InputError("give one board source: --inventory FILE [--limit P], --board NAME (repeatable) "
                         f"or --boards-file FILE{' (got ' + ', '.join(given) + ')' if given else ''}")
    if limit and not inventory:
        raise InputError("--limit selects from an inventory; use it with --inventory")
    if inventory:
        return select(load_inventory(inventory), limit)
    if boards_file:
        return boards_from_names(read_boards_file(boards_file))
    return boards_from_names((b, "--board") for b in boards)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return ",".join(markup_escaped(v, 60) for v in value) or "-"
    return markup_escaped(value, 80)


@click.group("fleet")
def fleet_group() -> None:
    """Many boards: list them now (`fleet deploy` is not there yet)."""


@fleet_group.command("hosts")
@source_options
@click.option("--json", "as_json", is_flag=True, help="Print the board records as JSON (schema rkdet.fleet.hosts/1).")
def hosts_command(inventory: Path | None, limit: str | None, boards: tuple[str, ...], boards_file: Path | None,
                  as_json: bool) -> None:
    """List the boards a source selects, with the values a deploy would use ("-": ssh_config/config decide)."""
    selected = resolve_boards(inventory, limit, boards, boards_file)
    if as_json:
        click.echo(json.dumps({"schema": "rkdet.fleet.hosts/1", "boards": [b.to_json() for b in selected]},
                              indent=2, sort_keys=True))
        return
    table = Table(title=f"{len(selected)} board{'s' if len(selected) != 1 else ''}", title_justify="left")
    for col in ("name", "address", "port", "user", "key", "soc", "sudo", "workdir", "tags", "groups"):
        table.add_column(col, overflow="fold")
    for b in selected:
        table.add_row(*(_cell(v) for v in (b.name, b.address, b.port, b.user, b.key_file, b.soc, b.sudo, b.workdir,
                                             b.tags, b.groups)))
    Console(soft_wrap=False).print(table)
