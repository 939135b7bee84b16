"""Ansible's YAML inventory format, read natively into the one model (`rkdet.fleets.sources.model.Inventory`).

Why its own module: one job, one format. Groups map to `hosts` (host patterns: names, ranges,
`name:PORT`), `vars` and `children`; a host maps to its vars (or nothing). Ansible skips other keys
with a warning; rkdet refuses them (a misspelt `host:` would otherwise drop every board silently).
A file with a top-level `plugin:` key is an inventory plugin's config: only ansible-core reads it.
"""

from __future__ import annotations

from pathlib import Path

from yaml.nodes import MappingNode, Node, SequenceNode

from rkdet.errors import InputError
from rkdet.fleets.sources import hostranges
from rkdet.fleets.sources.model import Inventory, Var
from rkdet.fleets.sources.yamlsafe import compose, construct, fail, is_null, line_of, pairs
from rkdet.textsafe import visible

MAX_GROUP_DEPTH = 64


class _Reader:
    def __init__(self, path: Path, inv: Inventory) -> None:
        self.path = path
        self.inv = inv

    def where(self, line: int) -> str:
        return f"{self.path}:{line}"

    def group(self, name: str, node: Node, line: int, depth: int) -> None:
        if depth > MAX_GROUP_DEPTH:
            raise fail(self.path, line, f"groups nested deeper than {MAX_GROUP_DEPTH}")
        group = self.inv.add_group(name, self.where(line))
        if not is_null(node) and not isinstance(node, MappingNode):
            raise fail(self.path, line_of(node), f"group {visible(name)!r} must be a mapping of "
                                                 "hosts/vars/children (or empty)")
        for key, value, kline in pairs(self.path, node, f"group {visible(name)!r}"):
            if key == "hosts":
                for pattern, hvars, hline in pairs(self.path, value, f"group {visible(name)!r} hosts"):
                    self.hosts(name, pattern, hvars, hline)
            elif key == "vars":
                for var, vnode, vline in pairs(self.path, value, f"group {visible(name)!r} vars"):
                    group.vars[var] = Var(vnode, self.where(vline), construct)
            elif key == "children":
                for child, cnode, cline in pairs(self.path, value, f"group {visible(name)!r} children"):
                    if child == "all":
                        raise fail(self.path, cline, "`all` cannot be a child group (every group is inside it)")
                    self.inv.add_group(child, self.where(cline))
                    self.inv.add_child(name, child)
                    group.edges.setdefault(child, self.where(cline))
                    self.group(child, cnode, cline, depth + 1)
            else:
                raise fail(self.path, kline, f"group {visible(name)!r}: key {visible(key, 40)!r} is not hosts, vars or "
                                             "children (Ansible skips it with a warning); fix or remove it")

    def hosts(self, group: str, pattern: str, node: Node, line: int) -> None:
        names, port = hostranges.expand(pattern, self.where(line))
        if not is_null(node) and not isinstance(node, MappingNode):
            raise fail(self.path, line_of(node), f"host {visible(pattern)!r} must map to its vars (or nothing)")
        written = pairs(self.path, node, f"host {visible(pattern)!r}")
        hostranges.check_spread(names, len(written), pattern, self.where(line))
        for host in names:
            self.inv.add_host(group, host, self.where(line))
            own = self.inv.host_vars[host]
            if port is not None:
                own["ansible_port"] = Var(port, self.where(line))
            for var, vnode, vline in written:
                own[var] = Var(vnode, self.where(vline), construct)


def check_cycles(inv: Inventory) -> None:
    """A group that is its own ancestor has no depth and no precedence: refused, naming the group."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(name: str) -> None:
        state[name] = 1
        for child in inv.groups[name].children:
            if state.get(child) == 1:
                raise InputError(f"{inv.groups[name].edges.get(child, inv.groups[child].where)}: group {visible(child)!r} is a child of {visible(name)!r} "
                                 "but also one of its ancestors (a cycle); remove one `children` entry")
            if state.get(child) is None:
                visit(child)
        state[name] = 2

    try:
        for name in list(inv.groups):
            if state.get(name) is None:
                visit(name)
    except RecursionError:
        raise InputError(f"{inv.path}: groups nested too deeply") from None


def read_yaml(path: Path, text: str) -> Inventory:
    """The inventory of a YAML file's text (InputError naming FILE:LINE on bad structure)."""
    root = compose(path, text)
    if root is None:
        raise InputError(f"{path}: empty inventory; expected a mapping of groups (all:, mygroup:, ...)")
    if not isinstance(root, MappingNode):
        raise fail(path, line_of(root), "an inventory must be a mapping of group names (all:, mygroup:, ...), "
                                        f"not {'a list' if isinstance(root, SequenceNode) else 'a scalar'}")
    inv = Inventory(path, {}, {}, {})
    inv.add_group("all", f"{path}:{line_of(root)}")
    inv.add_group("ungrouped", f"{path}:{line_of(root)}")
    reader = _Reader(path, inv)
    top = pairs(path, root, "the inventory")
    for name, node, line in top:
        if name == "plugin":
            raise fail(path, line, f"`plugin: {visible(getattr(node, 'value', ''), 60)}` is an inventory plugin's "
                                   "config: only ansible-core reads it (install it: docs/FLEET.md)")
    try:
        for name, node, line in top:
            reader.group(name, node, line, 1)
    except RecursionError:
        raise InputError(f"{path}: groups nested too deeply") from None
    check_cycles(inv)
    return inv
