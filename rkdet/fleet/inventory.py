"""Where the boards come from: an Ansible YAML inventory, or ~/.ssh/config host names.

Labs already keep their boards in Ansible inventories, so rkdet reads that format rather than
inventing one: groups, `children`, `hosts`, `vars` at group and host level, with Ansible's
precedence (host vars over a child group's over its parent's over `all`; groups of the same depth
apply in name order). The connection vars (`ansible_host`, `ansible_port`, `ansible_user`,
`ansible_ssh_private_key_file`) and rkdet's own (`rkdet_soc`, `rkdet_sudo`, `rkdet_workdir`,
`rkdet_tags`, `rkdet_known_hosts`) are read; every other key is ignored, as Ansible ignores vars it does not use.

The file is untrusted input: it is size-bounded, YAML aliases are refused before anything is built
(no billion-laughs expansion), it is composed to nodes so every error names its line, and bad
structure ends in one line `FILE:LINE: what is wrong` (exit 2). Either source yields `Board`
records: the one record `rkdet fleet deploy` will consume. `write_inventory` is the one writer of
the format (the emulated fleet's inventory is written with it and read back with `load_inventory`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rkdet.errors import InputError
from rkdet.fleet.patterns import evaluate
from rkdet.textsafe import visible

MAX_INVENTORY_BYTES = 4 << 20  # a lab of thousands of boards is a few hundred KiB
MAX_YAML_NODES = 200_000
MAX_GROUP_DEPTH = 64
MAX_BOARDS_FILE_BYTES = 1 << 20
MAX_NAME = 255
NULL_TAG = "tag:yaml.org,2002:null"
GROUP_KEYS = ("hosts", "vars", "children")
SOC_RE = re.compile(r"^[a-z0-9]{2,16}$")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same events, nodes, marks
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


@dataclass(frozen=True)
class Board:
    """One board to run on, whatever its source. None means "not set here": ~/.ssh/config, the
    config file or the deploy flags decide (the same rules as a single-board `rkdet deploy`)."""

    name: str  # inventory hostname or the --board name, as written
    address: str  # what SSH connects to: ansible_host, else the name (resolved through ~/.ssh/config)
    port: int | None = None
    user: str | None = None
    key_file: str | None = None
    soc: str | None = None
    sudo: bool | None = None
    workdir: str | None = None
    known_hosts: str | None = None  # rkdet_known_hosts: the known_hosts file for this board (as --known-hosts)
    tags: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()  # every group the host is in (direct and inherited), without `all`
    source: str = "inventory"  # "inventory" | "ssh-config" | "labgrid"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "port": self.port, "user": self.user,
                "key_file": self.key_file, "soc": self.soc, "sudo": self.sudo, "workdir": self.workdir,
                "known_hosts": self.known_hosts, "tags": list(self.tags), "groups": list(self.groups), "source": self.source}


@dataclass
class _Var:
    value: Node
    line: int


@dataclass
class _Group:
    name: str
    line: int
    vars: dict[str, _Var] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)  # direct members, in file order
    children: dict[str, int] = field(default_factory=dict)  # child name -> line of the edge
    parents: set[str] = field(default_factory=set)


@dataclass
class Inventory:
    """A parsed inventory: groups (with `all`), host vars, and the order hosts first appeared."""

    path: Path
    groups: dict[str, _Group]
    host_vars: dict[str, dict[str, _Var]]
    host_lines: dict[str, int]

    @property
    def hosts(self) -> list[str]:
        return list(self.host_lines)

    def group_hosts(self, name: str) -> list[str]:
        """Hosts of a group and of its descendants: own hosts first, then each child's, deduplicated."""
        if name == "all":
            return self.hosts
        seen: dict[str, None] = {}
        stack = [name]
        visited: set[str] = set()
        while stack:
            g = stack.pop(0)
            if g in visited:
                continue
            visited.add(g)
            for h in self.groups[g].hosts:
                seen.setdefault(h, None)
            stack.extend(self.groups[g].children)
        return list(seen)

    def groups_of(self, host: str) -> set[str]:
        """Every group a host belongs to, directly or through children, including `all`."""
        direct = {g.name for g in self.groups.values() if host in g.hosts}
        found: set[str] = set()
        stack = list(direct)
        while stack:
            g = stack.pop()
            if g in found:
                continue
            found.add(g)
            stack.extend(self.groups[g].parents)
        found.add("all")
        return found

    def depth(self, name: str, _memo: dict[str, int] | None = None) -> int:
        """Ansible's group depth: `all` 0, a top-level group 1, a child one more than its deepest parent."""
        memo = {} if _memo is None else _memo
        if name == "all":
            return 0
        if name not in memo:
            parents = self.groups[name].parents or {"all"}
            memo[name] = 1 + max(self.depth(p, memo) for p in parents)
        return memo[name]

    def board(self, host: str) -> Board:
        """The host's record, its vars merged with Ansible's precedence."""
        memo: dict[str, int] = {}
        groups = sorted(self.groups_of(host), key=lambda g: (self.depth(g, memo), g))
        merged: dict[str, _Var] = {}
        for g in groups:
            merged.update(self.groups[g].vars)
        merged.update(self.host_vars.get(host, {}))
        return _board_from_vars(self.path, host, self.host_lines[host], merged, tuple(g for g in groups if g != "all"))


# ---- reading the YAML --------------------------------------------------------------------------


def _fail(path: Path, line: int, message: str) -> InputError:
    return InputError(f"{path}:{line}: {message}")


def _line(node: Node) -> int:
    return node.start_mark.line + 1


def _read_bounded(path: Path, limit: int, what: str) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory; pass the {what} file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read the {what} ({err.strerror})") from None
    if len(data) > limit:
        raise InputError(f"{path}: larger than {limit >> 10} KiB; is this really an {what}?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text (byte {err.start}); save the {what} as UTF-8") from None


def _compose(path: Path, text: str) -> Node | None:
    """The document as nodes (with line marks); aliases and oversized documents refused first."""
    try:
        count = 0
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise _fail(path, _line(event), f"YAML alias *{visible(event.anchor)}: aliases are not "
                                                "accepted in an inventory (they can expand without bound); "
                                                "write the values out")
            if isinstance(event, (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                count += 1
                if count > MAX_YAML_NODES:
                    raise _fail(path, _line(event), f"more than {MAX_YAML_NODES} YAML nodes; "
                                                    "is this really an inventory?")
        return yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InputError(f"{where}: not valid YAML ({visible(err.problem or err.context)})") from None
    except yaml.reader.ReaderError as err:  # a character YAML does not allow (raw control codes)
        line = text[:err.position].count("\n") + 1
        raise InputError(f"{path}:{line}: not valid YAML (character U+{int(err.character) if isinstance(err.character, int) else ord(err.character):04X} is not allowed; "
                         "write control characters as escapes, or not at all)") from None
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML ({visible(err)})") from None
    except RecursionError:
        raise InputError(f"{path}: YAML nested too deeply; is this really an inventory?") from None


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == NULL_TAG


def _pairs(path: Path, node: Node, what: str) -> list[tuple[str, Node, int]]:
    """(key, value node, line) of a mapping; a null is empty; duplicate or non-text keys refused."""
    if _is_null(node):
        return []
    if not isinstance(node, MappingNode):
        kind = "a list" if isinstance(node, SequenceNode) else f"the scalar {visible(node.value, 40)!r}"
        raise _fail(path, _line(node), f"{what} must be a mapping, not {kind}")
    seen: dict[str, int] = {}
    out = []
    for key, value in node.value:
        if not isinstance(key, ScalarNode) or key.tag == NULL_TAG or not str(key.value).strip():
            raise _fail(path, _line(key), f"{what}: a key must be a name")
        name = str(key.value)
        if len(name) > MAX_NAME:
            raise _fail(path, _line(key), f"{what}: name longer than {MAX_NAME} characters")
        if name in seen:
            raise _fail(path, _line(key), f"{what}: {visible(name)!r} appears twice (first on line {seen[name]}); "
                                          "keep one")
        seen[name] = _line(key)
        out.append((name, value, _line(key)))
    return out


class _Reader:
    """Walks the composed document into groups and host vars."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.groups: dict[str, _Group] = {}
        self.host_vars: dict[str, dict[str, _Var]] = {}
        self.host_lines: dict[str, int] = {}

    def group(self, name: str, node: Node, line: int, depth: int) -> None:
        if depth > MAX_GROUP_DEPTH:
            raise _fail(self.path, line, f"groups nested deeper than {MAX_GROUP_DEPTH}")
        group = self.groups.setdefault(name, _Group(name, line))
        if not _is_null(node) and not isinstance(node, MappingNode):
            raise _fail(self.path, _line(node), f"group {visible(name)!r} must be a mapping of "
                                                "hosts/vars/children (or empty)")
        for key, value, _ in _pairs(self.path, node, f"group {visible(name)!r}"):
            if key == "hosts":
                for host, hvars, hline in _pairs(self.path, value, f"group {visible(name)!r} hosts"):
                    self.host(group, host, hvars, hline)
            elif key == "vars":
                for var, vnode, vline in _pairs(self.path, value, f"group {visible(name)!r} vars"):
                    group.vars[var] = _Var(vnode, vline)
            elif key == "children":
                for child, cnode, cline in _pairs(self.path, value, f"group {visible(name)!r} children"):
                    if child == "all":
                        raise _fail(self.path, cline, "`all` cannot be a child group (every group is inside it)")
                    group.children.setdefault(child, cline)
                    self.group(child, cnode, cline, depth + 1)
                    self.groups[child].parents.add(name)
            # any other key: ignored, as Ansible does (it only warns)

    def host(self, group: _Group, host: str, node: Node, line: int) -> None:
        if "[" in host and ":" in host:
            raise _fail(self.path, line, f"host {visible(host)!r}: host ranges ([a:b]) are not expanded by rkdet; "
                                         "list the hosts")
        if host not in group.hosts:
            group.hosts.append(host)
        self.host_lines.setdefault(host, line)
        own = self.host_vars.setdefault(host, {})
        for var, vnode, vline in _pairs(self.path, node, f"host {visible(host)!r}"):
            own[var] = _Var(vnode, vline)

    def check_cycles(self) -> None:
        """A group that is its own ancestor has no depth and no precedence: refused, naming the edge."""
        state: dict[str, int] = {}  # 1 on the stack, 2 done

        def visit(name: str) -> None:
            state[name] = 1
            for child, line in self.groups[name].children.items():
                if state.get(child) == 1:
                    raise _fail(self.path, line, f"group {visible(child)!r} is a child of {visible(name)!r} but "
                                                 f"also one of its ancestors (a cycle); remove one `children` entry")
                if state.get(child) is None:
                    visit(child)
            state[name] = 2

        for name in list(self.groups):
            if state.get(name) is None:
                visit(name)


def load_inventory(path: str | Path) -> Inventory:
    """Read and check an Ansible YAML inventory (InputError naming FILE:LINE on bad structure)."""
    p = Path(path)
    text = _read_bounded(p, MAX_INVENTORY_BYTES, "inventory")
    root = _compose(p, text)
    if root is None:
        raise InputError(f"{p}: empty inventory; expected a mapping of groups (all:, mygroup:, ...)")
    if not isinstance(root, MappingNode):
        raise _fail(p, _line(root), "an inventory must be a mapping of group names (all:, mygroup:, ...), "
                                    f"not {'a list' if isinstance(root, SequenceNode) else 'a scalar'}")
    reader = _Reader(p)
    reader.groups["all"] = _Group("all", _line(root))
    try:
        for name, node, line in _pairs(p, root, "the inventory"):
            reader.group(name, node, line, 1)
        reader.check_cycles()
    except RecursionError:
        raise InputError(f"{p}: groups nested too deeply") from None
    for name, group in reader.groups.items():
        if name != "all" and not group.parents:
            group.parents.add("all")
    reader.groups["all"].parents.clear()
    inv = Inventory(p, reader.groups, reader.host_vars, reader.host_lines)
    for host in inv.hosts:  # every host's values checked now, not when a deploy reaches it
        inv.board(host)
    return inv


# ---- typed values ------------------------------------------------------------------------------


def _scalar(path: Path, name: str, var: _Var) -> Any:
    node = var.value
    if not isinstance(node, ScalarNode):
        raise _fail(path, var.line, f"{name} must be a single value, not a {'list' if isinstance(node, SequenceNode) else 'mapping'}")
    try:
        value = yaml.SafeLoader("").construct_object(node)
    except yaml.YAMLError as err:
        raise _fail(path, var.line, f"{name}: unreadable value ({visible(getattr(err, 'problem', err))}); "
                                    "encrypted (!vault) values are not supported here") from None
    if isinstance(value, str) and "{{" in value:
        raise _fail(path, var.line, f"{name}: templates ({{{{ ... }}}}) are not evaluated by rkdet; write the value")
    return value


def _text(path: Path, name: str, var: _Var, *, spaces: bool = False, limit: int = MAX_NAME) -> str:
    value = _scalar(path, name, var)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _fail(path, var.line, f"{name} must be text")
    text = str(value)
    if not text.strip() or len(text) > limit:
        raise _fail(path, var.line, f"{name} must be 1 to {limit} characters")
    if visible(text, limit) != text or (not spaces and any(c.isspace() for c in text)):
        raise _fail(path, var.line, f"{name}: {visible(text, 60)!r} holds spaces or control characters")
    if text.startswith("-"):
        raise _fail(path, var.line, f"{name}: {visible(text, 60)!r} must not start with '-'")
    return text


def _board_from_vars(path: Path, host: str, host_line: int, merged: dict[str, _Var],
                     groups: tuple[str, ...]) -> Board:
    def get(name: str) -> _Var | None:
        return merged.get(name)

    if (v := get("ansible_host")) is not None:
        address = _text(path, "ansible_host", v)
    else:  # the name is the address: it must be one
        address = _text(path, f"host {visible(host, 60)!r} (no ansible_host, so the name is the address)",
                        _Var(ScalarNode("tag:yaml.org,2002:str", host), host_line))
    port = None
    if (v := get("ansible_port")) is not None:
        raw = _scalar(path, "ansible_port", v)
        if isinstance(raw, str) and raw.strip().isdigit():
            raw = int(raw.strip())
        if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= 65535:
            raise _fail(path, v.line, f"ansible_port {visible(raw, 40)!r} is not a port number (1-65535)")
        port = raw
    user = _text(path, "ansible_user", v) if (v := get("ansible_user")) is not None else None
    key = _text(path, "ansible_ssh_private_key_file", v, spaces=True, limit=4096) \
        if (v := get("ansible_ssh_private_key_file")) is not None else None
    soc = None
    if (v := get("rkdet_soc")) is not None:
        soc = _text(path, "rkdet_soc", v).lower()
        if not SOC_RE.match(soc):
            raise _fail(path, v.line, f"rkdet_soc {visible(soc, 40)!r} is not a SoC name (e.g. rk3588, rv1126)")
    sudo = None
    if (v := get("rkdet_sudo")) is not None:
        raw = _scalar(path, "rkdet_sudo", v)
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            raw = raw.strip().lower() in _TRUE
        if not isinstance(raw, bool):
            raise _fail(path, v.line, f"rkdet_sudo must be true or false, not {visible(raw, 40)!r}")
        sudo = raw
    workdir = _text(path, "rkdet_workdir", v, limit=4096) if (v := get("rkdet_workdir")) is not None else None
    known_hosts = _text(path, "rkdet_known_hosts", v, spaces=True, limit=4096) \
        if (v := get("rkdet_known_hosts")) is not None else None
    tags: tuple[str, ...] = ()
    if (v := get("rkdet_tags")) is not None:
        tags = _tags(path, v)
    return Board(name=host, address=address, port=port, user=user, key_file=key, soc=soc, sudo=sudo,
                 workdir=workdir, known_hosts=known_hosts, tags=tags, groups=groups, source="inventory")


def _tags(path: Path, var: _Var) -> tuple[str, ...]:
    node = var.value
    if isinstance(node, SequenceNode):
        items = [_text(path, "rkdet_tags item", _Var(n, _line(n)), limit=100) for n in node.value]
    elif isinstance(node, ScalarNode) and not _is_null(node):
        items = [t.strip() for t in _text(path, "rkdet_tags", var, spaces=True, limit=4096).split(",") if t.strip()]
    elif _is_null(node):
        items = []
    else:
        raise _fail(path, var.line, "rkdet_tags must be a list of words (or one comma-separated string)")
    return tuple(dict.fromkeys(items))


# ---- writing -----------------------------------------------------------------------------------


def _host_vars(board: Board) -> dict[str, Any]:
    """A board's inventory vars (only the values it sets), in the names `load_inventory` reads."""
    pairs: list[tuple[str, Any]] = [
        ("ansible_host", board.address), ("ansible_port", board.port), ("ansible_user", board.user),
        ("ansible_ssh_private_key_file", board.key_file), ("rkdet_soc", board.soc), ("rkdet_sudo", board.sudo),
        ("rkdet_workdir", board.workdir), ("rkdet_known_hosts", board.known_hosts),
        ("rkdet_tags", list(board.tags) if board.tags else None)]
    return {k: v for k, v in pairs if v is not None}


def inventory_text(boards: Sequence[Board], comment: str = "") -> str:
    """An Ansible YAML inventory of `boards`: every board with its connection and rkdet_* vars under
    `all: hosts:` (in the order given, which `load_inventory` keeps), and each board listed in the
    group `groups[0]` (a child of `all`) when it has one. `comment` lines go first as `# ` lines.
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


def write_inventory(path: str | Path, boards: Sequence[Board], comment: str = "") -> Path:
    """Write `inventory_text(boards)` to `path` atomically; returns the path."""
    from rkdet.runner import write_atomic  # the one atomic writer

    p = Path(path)
    write_atomic(str(p), inventory_text(boards, comment))
    return p


# ---- ~/.ssh/config names -----------------------------------------------------------------------


def check_ssh_value(value: object, where: str, what: str) -> str:
    """A name, address or user that reaches SSH: text of 1-255 characters, no spaces or control
    characters, not starting with '-' (the rules inventory values follow; InputError naming `where`)."""
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise InputError(f"{where}: a {what} must be text of 1 to {MAX_NAME} characters")
    if visible(value, MAX_NAME) != value or any(c.isspace() for c in value):
        raise InputError(f"{where}: {what} {visible(value, 60)!r} holds spaces or control characters")
    if value.startswith("-"):
        raise InputError(f"{where}: {what} {visible(value, 60)!r} must not start with '-'")
    return value


def _check_board_name(name: str, where: str) -> str:
    return check_ssh_value(name, where, "board name")


def boards_from_names(names: Iterable[tuple[str, str]]) -> list[Board]:
    """Boards named as for `rkdet deploy --board` (an ~/.ssh/config Host alias or HOST[:PORT]).

    `names` are (name, where it came from) pairs so an error names the flag or FILE:LINE; ssh_config
    is applied when each board is connected, exactly as for a single-board deploy.
    """
    boards: list[Board] = []
    seen: dict[str, str] = {}
    for name, where in names:
        _check_board_name(name, where)
        if name in seen:
            raise InputError(f"{where}: board {visible(name)!r} is named twice (also {seen[name]})")
        seen[name] = where
        boards.append(Board(name=name, address=name, source="ssh-config"))
    if not boards:
        raise InputError("no board given")
    return boards


def read_boards_file(path: str | Path) -> list[tuple[str, str]]:
    """(name, FILE:LINE) for each board of a names file: one per line, `#` starts a comment."""
    p = Path(path)
    text = _read_bounded(p, MAX_BOARDS_FILE_BYTES, "boards file")
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if name:
            out.append((name, f"{p}:{lineno}"))
    if not out:
        raise InputError(f"{p}: names no board (one ~/.ssh/config Host or HOST[:PORT] per line, # comments)")
    return out


def select(inventory: Inventory, limit: str | None) -> list[Board]:
    """The boards an Ansible `--limit` pattern selects (all of them without one)."""
    hosts = inventory.hosts if not limit else evaluate(inventory, limit)
    if not hosts:
        what = f"--limit {visible(limit)!r} selects" if limit else "it lists"
        raise InputError(f"{inventory.path}: {what} no host")
    return [inventory.board(h) for h in hosts]


def names_of(boards: Sequence[Board]) -> list[str]:
    return [b.name for b in boards]
