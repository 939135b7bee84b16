"""`rkdet fleet hosts`: list the boards an inventory, a --limit or a list of names selects."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import click
from rich.table import Table

from rkdet.cli.lazy import LazyGroup
from rkdet.errors import InputError
from rkdet.fleets.sources import ansible_engine
from rkdet.fleets.sources.inventory import FleetBoard, boards_from_names, load_inventory, read_boards_file, select
from rkdet.fleets.sources.labgrid_places import acquired_boards, hold_until_interrupted, parse_coordinator, parse_tags
from rkdet.textsafe import markup_escaped
from rkdet.log import output_console


SOURCE_OPTIONS = ("inventory", "limit", "boards", "boards_file", "labgrid", "tags", "reserve_timeout",
                  "inventory_engine", "inventory_programs")  # the parameters `source_options` adds, as `resolve_boards` takes them


def source_options(func):  # type: ignore[no-untyped-def]
    """The board-source flags (one source per command), shared by `fleet hosts` and `fleet deploy`."""
    options = [
        click.option("--inventory", type=click.Path(path_type=Path), default=None,
                     help="Ansible inventory (YAML or INI, group_vars/ and host_vars/ beside it; with ansible-core "
                          "any source Ansible reads). docs/FLEET.md."),
        click.option("--limit", default=None,
                     help="Ansible host pattern: group, host, all, web*, ~regex, g[0], g[1:3], a:b, a:!b, a:&b."),
        click.option("--inventory-engine", type=click.Choice(ansible_engine.ENGINES), default=None,
                     help="Who reads --inventory: auto (ansible-core's ansible-inventory when installed, else "
                          f"rkdet's reader; ${ansible_engine.ENGINE_ENV}), ansible, native."),
        click.option("--inventory-programs", "inventory_programs", is_flag=True, default=None,
                     help="Let ansible-core run an executable inventory and load ansible.cfg (./, ~, /etc) with its "
                          f"plugins (off by default; ${ansible_engine.PROGRAMS_ENV}=1). docs/FLEET.md."),
        click.option("--board", "boards", multiple=True, help="A board (~/.ssh/config Host or HOST[:PORT]); repeatable."),
        click.option("--boards-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
                     help="A file of board names, one per line (# comments)."),
        click.option("--labgrid", "labgrid", default=None, metavar="HOST:PORT",
                     help="A labgrid coordinator: reserve and acquire the places matching --tags (released on exit)."),
        click.option("--tags", "tags", multiple=True, metavar="KEY=VALUE",
                     help="labgrid place tags to match, e.g. soc=rk3588 (repeatable or comma-separated)."),
        click.option("--reserve-timeout", type=click.FloatRange(min=0), default=300.0, show_default=True,
                     help="Seconds to wait for busy labgrid places before exit 3 naming the place and holder."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@contextlib.contextmanager
def resolve_boards(inventory: Path | None, limit: str | None, boards: tuple[str, ...],
                   boards_file: Path | None, labgrid: str | None = None, tags: tuple[str, ...] = (),
                   reserve_timeout: float = 300.0, inventory_engine: str | None = None,
                   inventory_programs: bool | None = None) -> Iterator[list[FleetBoard]]:
    """The selected boards from exactly one source (InputError, exit 2, on a usage mistake).

    A context manager because a labgrid source holds its places while the block runs and releases
    them when it ends, however it ends; the other sources hold nothing."""
    given = [name for name, value in (("--inventory", inventory), ("--board", boards), ("--boards-file", boards_file),
                                      ("--labgrid", labgrid)) if value]
    if len(given) != 1:
        raise InputError("give one board source: --inventory FILE [--limit P], --board NAME (repeatable), "
                         f"--boards-file FILE or --labgrid HOST:PORT --tags K=V"
                         f"{' (got ' + ', '.join(given) + ')' if given else ''}")
    if limit and not inventory:
        raise InputError("--limit selects from an inventory; use it with --inventory")
    if inventory_programs and not inventory:
        raise InputError("--inventory-programs lets an inventory run programs; use it with --inventory")
    if tags and not labgrid:
        raise InputError("--tags selects labgrid places; use it with --labgrid HOST:PORT")
    if labgrid:
        with acquired_boards(parse_coordinator(labgrid), parse_tags(tags), reserve_timeout) as held:
            yield held
        return
    if inventory:
        yield select_from_inventory(inventory, limit, inventory_engine, inventory_programs)
    elif boards_file:
        yield boards_from_names(read_boards_file(boards_file))
    else:
        yield boards_from_names((b, "--board") for b in boards)


class Selected(list[FleetBoard]):
    """The selected boards, and which engine read the source (`fleet hosts` says it)."""

    engine: str = ""


def select_from_inventory(inventory: Path, limit: str | None, engine: str | None,
                          programs: bool | None = None) -> Selected:
    """The inventory's selected boards, read by ansible-core's ansible-inventory or natively (`engine`);
    the engine line says which, and (ansible-core) which config file and programs were used."""
    _check_source(inventory)
    allowed = ansible_engine.programs_wanted(programs)
    program = ansible_engine.choose(engine)
    if program is None:
        if allowed:
            raise InputError("--inventory-programs needs the ansible-core engine (rkdet's own reader never runs an "
                             "inventory program); install it (docs/FLEET.md) or drop the flag")
        out = Selected(select(load_inventory(inventory), limit))
        out.engine = "native (rkdet's reader; ansible-core not used)"
        return out
    setup = ansible_engine.Setup(programs_allowed=allowed)
    out = Selected(select(ansible_engine.load(program, inventory, limit, setup=setup), None))
    out.engine = f"{ansible_engine.version(program)} ({program}; {setup.describe()})"
    return out


def _check_source(path: Path) -> None:
    """An inventory source is a regular file (or, for ansible-core, a folder): a FIFO or device would block."""
    import stat

    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError(f"{path}: no such inventory") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read the inventory ({err.strerror})") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise InputError(f"{path}: not a regular file (a FIFO, socket or device); pass the inventory file itself")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return ",".join(markup_escaped(v, 60) for v in value) or "-"
    return markup_escaped(value, 80)


@click.group("fleet", cls=LazyGroup, lazy={"deploy": "rkdet.cli.fleet_deploy:fleet_deploy_command"})
def fleet_group() -> None:
    """Many boards: list them (`fleet hosts`), deploy to them and judge them together (`fleet deploy`)."""


@fleet_group.command("hosts")
@source_options
@click.option("--json", "as_json", is_flag=True, help="Print the board records as JSON (schema rkdet.fleet.hosts/1).")
@click.option("--hold", is_flag=True, help="With --labgrid: keep the places acquired until Ctrl-C (for manual use).")
def hosts_command(inventory: Path | None, limit: str | None, boards: tuple[str, ...], boards_file: Path | None,
                  labgrid: str | None, tags: tuple[str, ...], reserve_timeout: float, inventory_engine: str | None,
                  inventory_programs: bool | None, as_json: bool, hold: bool) -> None:
    """List the boards a source selects, with the values a deploy would use ("-": ssh_config/config decide).

    With --labgrid the places are reserved and acquired to read their NetworkService, then released
    (with --hold, only at Ctrl-C)."""
    if hold and not labgrid:
        raise InputError("--hold keeps labgrid places; use it with --labgrid HOST:PORT --tags K=V")
    with resolve_boards(inventory, limit, boards, boards_file, labgrid, tags, reserve_timeout,
                        inventory_engine, inventory_programs) as selected:
        _print_boards(selected, as_json, getattr(selected, "engine", "") or None)
        if hold:
            hold_until_interrupted(selected)


def _print_boards(selected: list[FleetBoard], as_json: bool, engine: str | None = None) -> None:
    if as_json:
        click.echo(json.dumps({"schema": "rkdet.fleet.hosts/1", "engine": engine,
                               "boards": [b.to_json() for b in selected]}, indent=2, sort_keys=True))
        return
    title = f"{len(selected)} board{'s' if len(selected) != 1 else ''}"
    if engine:
        title += f" (inventory read by {markup_escaped(engine, 200)})"
    table = Table(title=title, title_justify="left")
    for col in ("name", "address", "port", "user", "key", "soc", "sudo", "workdir", "jump", "tags", "groups"):
        table.add_column(col, overflow="fold")
    for b in selected:
        table.add_row(*(_cell(v) for v in (b.name, b.address, b.port, b.user, b.key_file, b.soc, b.sudo, b.workdir,
                                             b.proxy_jump, b.tags, b.groups)))
    output_console().print(table)
