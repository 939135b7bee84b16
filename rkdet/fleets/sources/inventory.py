"""Where the boards come from: an Ansible inventory (YAML or INI, with group_vars/ and host_vars/), or ~/.ssh/config names.

Labs already keep their boards in Ansible inventories, so rkdet reads them rather than inventing a
format (docs/FLEET.md). Two engines give the same records: ansible-core's own `ansible-inventory`
when it is installed (`rkdet.fleets.sources.ansible_engine`: every format and plugin Ansible reads, and
Ansible's host selection), else the native readers (`yaml_inventory`, `ini_inventory`, `vars_dirs`,
patterns in `patterns`), which accept what Ansible accepts for those formats and refuse, in one line
naming FILE:LINE and the construct, what they do not read. Connection variables become `FleetBoard`
fields in one place (`connvars`). `write_inventory` is the one writer of the format (the emulated
fleet's inventory is written with it and read back with `load_inventory`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from rkdet.errors import InputError
from rkdet.fleets.sources.connvars import SOC_RE, board_from_vars, check_ssh_value
from rkdet.fleets.sources.ini_inventory import read_ini
from rkdet.fleets.sources.model import FleetBoard, Inventory
from rkdet.fleets.sources.patterns import evaluate
from rkdet.fleets.sources.source_files import check_source
from rkdet.fleets.sources.vars_dirs import load_vars_dirs
from rkdet.fleets.sources.yaml_inventory import read_yaml
from rkdet.fleets.sources.yamlsafe import read_bounded
from rkdet.textsafe import visible

__all__ = ["SOC_RE", "FleetBoard", "Inventory", "board_of", "boards_from_names", "check_ssh_value", "load_inventory",
           "read_boards_file", "select", "write_inventory"]

MAX_INVENTORY_BYTES = 4 << 20  # a lab of thousands of boards is a few hundred KiB
MAX_BOARDS_FILE_BYTES = 1 << 20
MAX_NAME = 255
YAML_SUFFIXES = (".yml", ".yaml", ".json")
INI_SUFFIXES = (".ini", ".cfg")


def load_inventory(path: str | Path) -> Inventory:
    """Read and check an inventory natively: YAML (.yml/.yaml/.json), INI (.ini), or, for any other
    name (`hosts`), YAML when it is a YAML mapping, else INI, as Ansible tries its plugins. Every
    host's record is built now (so a bad value is refused before a deploy starts)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: a folder of inventory sources is read by ansible-core only (docs/FLEET.md); "
                         "pass one inventory file")
    check_source(p)  # the file and the vars folders beside it, as the ansible-core engine checks them
    text = read_bounded(p, MAX_INVENTORY_BYTES, "inventory")
    if p.suffix in YAML_SUFFIXES:
        inv = read_yaml(p, text)
    elif p.suffix in INI_SUFFIXES:
        inv = read_ini(p, text)
    else:
        try:
            inv = read_yaml(p, text)
        except InputError as yaml_err:
            if not _not_yaml_mapping(str(yaml_err)):
                raise
            inv = read_ini(p, text)
    inv.reconcile()
    load_vars_dirs(inv)
    for host in inv.hosts:
        board_of(inv, host)
    return inv


def _not_yaml_mapping(message: str) -> bool:
    return "not valid YAML" in message or "must be a mapping of group names" in message or "empty inventory" in message


def board_of(inv: Inventory, host: str) -> FleetBoard:
    """The host's record, its vars merged with Ansible's precedence."""
    merged, groups = inv.merged_vars(host)
    return board_from_vars(host, inv.host_where.get(host, str(inv.path)), merged, groups, "inventory")


def select(inventory: Inventory, limit: str | None) -> list[FleetBoard]:
    """The boards an Ansible `--limit` pattern selects (all of them without one), in the inventory's order."""
    hosts = inventory.hosts if not limit else evaluate(inventory, limit)
    if not hosts:
        what = f"--limit {visible(limit)!r} selects" if limit else "it lists"
        raise InputError(f"{inventory.path}: {what} no host")
    return [board_of(inventory, h) for h in hosts]


# ---- writing -----------------------------------------------------------------------------------


def _host_vars(board: FleetBoard) -> dict[str, Any]:
    """A board's inventory vars (only the values it sets), in the names `load_inventory` reads."""
    pairs: list[tuple[str, Any]] = [
        ("ansible_host", board.address), ("ansible_port", board.port), ("ansible_user", board.user),
        ("ansible_ssh_private_key_file", board.key_file), ("rkdet_soc", board.soc), ("rkdet_sudo", board.sudo),
        ("rkdet_workdir", board.workdir), ("rkdet_known_hosts", board.known_hosts),
        ("rkdet_tags", list(board.tags) if board.tags else None),
        ("ansible_ssh_common_args", f"-o ProxyJump={board.proxy_jump}" if board.proxy_jump else None)]
    return {k: v for k, v in pairs if v is not None}


def inventory_text(boards: Sequence[FleetBoard], comment: str = "") -> str:
    """An Ansible YAML inventory of `boards`: every board with its connection and rkdet_* vars under
    `all: hosts:`, and each board listed in the group `groups[0]` (a child of `all`) when it has
    one. `load_inventory` lists them as Ansible's tree: boards without a group first, then group by group. `comment` lines go first as `# ` lines.
    `load_inventory` reads it back to the same records (source "inventory")."""
    names = [b.name for b in boards]
    if len(set(names)) != len(names):
        raise InputError("inventory: a host name appears twice")
    top: dict[str, Any] = {"hosts": {b.name: _host_vars(b) for b in boards}}
    children: dict[str, Any] = {}
    for b in boards:
        if b.groups:
            children.setdefault(b.groups[0], {"hosts": {}})["hosts"][b.name] = None
    if children:
        top["children"] = children
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    return head + yaml.safe_dump({"all": top}, sort_keys=False, default_flow_style=False, allow_unicode=False)


def write_inventory(path: str | Path, boards: Sequence[FleetBoard], comment: str = "") -> Path:
    """Write `inventory_text(boards)` to `path` atomically; returns the path."""
    from rkdet.records.io import write_atomic  # the one atomic writer

    p = Path(path)
    write_atomic(str(p), inventory_text(boards, comment))
    return p


# ---- ~/.ssh/config names -----------------------------------------------------------------------


def _check_board_name(name: str, where: str) -> str:
    return check_ssh_value(name, where, "board name")


def boards_from_names(names: Iterable[tuple[str, str]]) -> list[FleetBoard]:
    """Boards named as for `rkdet deploy --board` (an ~/.ssh/config Host alias or HOST[:PORT]).

    `names` are (name, where it came from) pairs so an error names the flag or FILE:LINE; ssh_config
    is applied when each board is connected, exactly as for a single-board deploy.
    """
    boards: list[FleetBoard] = []
    seen: dict[str, str] = {}
    for name, where in names:
        _check_board_name(name, where)
        if name in seen:
            raise InputError(f"{where}: board {visible(name)!r} is named twice (also {seen[name]})")
        seen[name] = where
        boards.append(FleetBoard(name=name, address=name, source="ssh-config"))
    if not boards:
        raise InputError("no board given")
    return boards


def read_boards_file(path: str | Path) -> list[tuple[str, str]]:
    """(name, FILE:LINE) for each board of a names file: one per line, `#` starts a comment."""
    p = Path(path)
    text = read_bounded(p, MAX_BOARDS_FILE_BYTES, "boards file")
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if name:
            out.append((name, f"{p}:{lineno}"))
    if not out:
        raise InputError(f"{p}: names no board (one ~/.ssh/config Host or HOST[:PORT] per line, # comments)")
    return out


def names_of(boards: Sequence[FleetBoard]) -> list[str]:
    return [b.name for b in boards]
