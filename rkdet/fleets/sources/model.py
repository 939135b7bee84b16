"""The parsed inventory every reader builds (YAML, INI, or ansible-inventory's JSON) and the `FleetBoard` record.

Why its own module: three readers fill one model, and host order, group membership and Ansible's
variable precedence are defined once here, so the native readers and the ansible-core engine give
the same lists by construction. Facts from Ansible's inventory data model (taken as facts, not code):
- `all` holds every host; `ungrouped` (a child of `all`) holds the hosts in no group but `all`;
- a group's depth is the longest path from `all` (a top-level group is 1); groups of one depth apply
  by `ansible_group_priority` (default 1), then name;
- precedence, lowest first: `all`'s inventory vars, the other groups' inventory vars, group_vars/all,
  group_vars/<group> (the same group order), the host's inventory vars, host_vars/<host>.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class FleetBoard:
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
    proxy_jump: str | None = None  # ProxyJump from ansible_ssh_common_args/extra_args (OpenSSH's syntax)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "port": self.port, "user": self.user,
                "key_file": self.key_file, "soc": self.soc, "sudo": self.sudo, "workdir": self.workdir,
                "known_hosts": self.known_hosts, "tags": list(self.tags), "groups": list(self.groups),
                "source": self.source, "proxy_jump": self.proxy_jump}


@dataclass
class Var:
    """One variable as read: its raw value (a YAML node, or a plain value) and where it was written.
    `build` turns the raw value into a Python value when a reader needs it (lazily: a vault value
    rkdet never uses must not stop the inventory from loading)."""

    raw: Any
    where: str  # FILE:LINE, or FILE (ansible-inventory's output has no lines)
    build: Callable[[Any], Any] | None = None

    def value(self) -> Any:
        if self.build is None:
            return self.raw
        try:
            return self.build(self.raw)
        except ValueError as err:
            from rkdet.errors import InputError

            raise InputError(f"{self.where}: {err}") from None


VarMap = dict[str, Var]


@dataclass
class Group:
    name: str
    where: str
    vars: VarMap = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)  # direct members, in the order written
    children: list[str] = field(default_factory=list)  # in the order written
    edges: dict[str, str] = field(default_factory=dict)  # child -> where the edge was written
    parents: list[str] = field(default_factory=list)
    members: set[str] = field(default_factory=set)  # `hosts` as a set: membership in constant time


MAX_HOSTS = 50_000  # every host of every source together; a lab of thousands of boards is far below it
MAX_GROUPS = 10_000
MAX_GROUP_DEPTH = 64  # as the YAML reader's nesting bound
MAX_GROUP_WORK = 2_000_000  # each host's groups (inherited ones included), summed over the hosts


@dataclass
class Inventory:
    """A parsed inventory. `groups` is in creation order with `all` and `ungrouped` first (as Ansible's)."""

    path: Path
    groups: dict[str, Group]
    host_vars: dict[str, VarMap]  # vars written in the inventory source itself
    host_where: dict[str, str]  # where each host was first named
    group_files: dict[str, VarMap] = field(default_factory=dict)  # group_vars/ beside the inventory
    host_files: dict[str, VarMap] = field(default_factory=dict)  # host_vars/ beside the inventory
    engine: str = "native"  # "native" | "ansible-core X.Y.Z"
    host_groups: dict[str, list[str]] = field(default_factory=dict)  # host -> the groups listing it directly
    links: set[tuple[str, str]] = field(default_factory=set)  # (parent, child) group edges
    _depths: dict[str, int] | None = field(default=None, repr=False)
    _layers: dict[frozenset[str], tuple[VarMap, tuple[str, ...]]] = field(default_factory=dict, repr=False)
    _group_work: int = field(default=0, repr=False)

    # -- structure --

    def add_group(self, name: str, where: str) -> Group:
        if name not in self.groups:
            if len(self.groups) >= MAX_GROUPS:
                from rkdet.errors import InputError

                raise InputError(f"{where}: more than {MAX_GROUPS} groups in the inventory; is this really a lab's "
                                 "inventory?")
            self.groups[name] = Group(name, where)
        return self.groups[name]

    def add_host(self, group: str, host: str, where: str) -> None:
        """Constant time (sets beside the ordered lists): an inventory's handling is linear in its hosts,
        and their total is capped (`MAX_HOSTS`), whatever ranges or groups name them."""
        g = self.groups[group]
        if host not in self.host_where:
            if len(self.host_where) >= MAX_HOSTS:
                from rkdet.errors import InputError

                raise InputError(f"{where}: more than {MAX_HOSTS} hosts in the inventory; is this really a lab's "
                                 "inventory? (split it, or check its ranges)")
            self.host_where[host] = where
        if host not in g.members:
            g.members.add(host)
            g.hosts.append(host)
            self.host_groups.setdefault(host, []).append(group)
        self.host_vars.setdefault(host, {})

    def add_child(self, parent: str, child: str) -> None:
        if (parent, child) in self.links:
            return
        self.links.add((parent, child))
        self.groups[parent].children.append(child)
        self.groups[child].parents.append(parent)

    def reconcile(self) -> None:
        """What Ansible does after parsing: every parentless group under `all`, every host in no
        group but `all` into `ungrouped` (and out of it when it is in another group)."""
        self.add_group("all", str(self.path))
        self.add_group("ungrouped", str(self.path))
        for name in list(self.groups):
            if name != "all" and not self.groups[name].parents:
                self.add_child("all", name)
        ungrouped = self.groups["ungrouped"]
        leaving = set()
        for host, where in self.host_where.items():
            others = set(self.host_groups.get(host, ())) - {"all", "ungrouped"}
            if others and host in ungrouped.members:
                leaving.add(host)
            elif not others and host not in ungrouped.members:
                self.add_host("ungrouped", host, where)
        if leaving:  # one pass, not one list removal per host
            ungrouped.hosts[:] = [h for h in ungrouped.hosts if h not in leaving]
            ungrouped.members -= leaving
            for host in leaving:
                self.host_groups[host].remove("ungrouped")
        self.groups = {"all": self.groups["all"], "ungrouped": self.groups["ungrouped"],
                       **{k: v for k, v in self.groups.items() if k not in ("all", "ungrouped")}}
        self.groups["all"].children.sort(key=lambda c: c != "ungrouped")  # ungrouped is all's first child

    # -- order --

    @property
    def hosts(self) -> list[str]:
        """Every host in rkdet's one order: depth first from `all` (ungrouped first, then the top-level
        groups in creation order; a group's own hosts before its children's). ansible-inventory's JSON
        gives the same tree, so both engines list hosts in the same order."""
        order: dict[str, None] = {}
        seen: set[str] = set()

        def walk(name: str) -> None:
            if name in seen:
                return
            seen.add(name)
            if name != "all":
                order.update(dict.fromkeys(self.groups[name].hosts))
            for child in self.groups[name].children:
                walk(child)

        walk("all")
        order.update(dict.fromkeys(self.host_where))  # a host only `all` names (not reachable otherwise)
        return list(order)

    def group_hosts(self, name: str) -> list[str]:
        """A group's hosts as Ansible's group host list orders them (what subscripts index): its own
        hosts, then its descendants' level by level, each level in the order written."""
        seen: dict[str, None] = {}
        level = [name]
        visited: set[str] = set()
        ordered: list[str] = []
        while level:
            nxt: list[str] = []
            for g in level:
                if g in visited:
                    continue
                visited.add(g)
                ordered.append(g)
                nxt.extend(self.groups[g].children)
            level = nxt
        for g in ordered:
            seen.update(dict.fromkeys(self.groups[g].hosts))
        if name == "all":
            seen.update(dict.fromkeys(self.hosts))
        return list(seen)

    def groups_of(self, host: str) -> set[str]:
        """Every group a host belongs to, directly or through children, including `all`."""
        stack = list(self.host_groups.get(host, ()))
        found: set[str] = set()
        while stack:
            g = stack.pop()
            if g in found:
                continue
            found.add(g)
            stack.extend(self.groups[g].parents)
        found.add("all")
        return found

    def depths(self) -> dict[str, int]:
        """Ansible's group depth of every group: `all` 0, a top-level group 1, a child one more than its
        deepest parent. One pass in topological order (linear; no recursion), made once the inventory
        is complete; deeper than `MAX_GROUP_DEPTH` or a cycle is refused."""
        if self._depths is not None:
            return self._depths
        from rkdet.errors import InputError

        waiting = {name: len(g.parents) for name, g in self.groups.items()}
        depth = {"all": 0}
        ready = [name for name, n in waiting.items() if n == 0]
        while ready:
            name = ready.pop()
            depth.setdefault(name, 1)
            if depth[name] > MAX_GROUP_DEPTH:
                raise InputError(f"{self.groups[name].where}: group {name[:60]!r} is nested deeper than "
                                 f"{MAX_GROUP_DEPTH} groups")
            for child in self.groups[name].children:
                depth[child] = max(depth.get(child, 0), depth[name] + 1)
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)
        stuck = [name for name, n in waiting.items() if n > 0]
        if stuck:
            raise InputError(f"{self.groups[stuck[0]].where}: group {stuck[0][:60]!r} is its own ancestor (a cycle); "
                             "remove one `children` entry")
        self._depths = depth
        return depth

    def depth(self, name: str) -> int:
        return self.depths()[name]

    def priority(self, name: str) -> int:
        var = self.groups[name].vars.get("ansible_group_priority")
        if var is None:
            return 1
        try:
            return int(var.value())
        except (TypeError, ValueError):
            from rkdet.errors import InputError

            raise InputError(f"{var.where}: ansible_group_priority must be a whole number") from None

    def merged_vars(self, host: str) -> tuple[VarMap, tuple[str, ...]]:
        """The host's vars with Ansible's precedence, and its groups (sorted as applied, without `all`).

        Call once the inventory is complete: the group layers are worked out once per set of direct
        groups (every host of a range shares one), so a lab's hosts cost linear time; the group work
        of all sets together is capped (`MAX_GROUP_WORK`)."""
        key = frozenset(self.host_groups.get(host, ()))
        layer = self._layers.get(key)
        if layer is None:
            depths = self.depths()
            found = self.groups_of(host)
            self._group_work += len(found)
            if self._group_work > MAX_GROUP_WORK:
                from rkdet.errors import InputError

                raise InputError(f"{self.host_where.get(host, self.path)}: hosts belong to more than {MAX_GROUP_WORK} "
                                 "groups in all (counting inherited ones); is this really a lab's inventory?")
            groups = tuple(sorted((g for g in found if g != "all"), key=lambda g: (depths[g], self.priority(g), g)))
            base: VarMap = {}
            base.update(self.groups["all"].vars)
            for g in groups:
                base.update(self.groups[g].vars)
            base.update(self.group_files.get("all", {}))
            for g in groups:
                base.update(self.group_files.get(g, {}))
            layer = self._layers[key] = (base, groups)
        self._group_work += len(layer[1]) + 1
        if self._group_work > MAX_GROUP_WORK:
            from rkdet.errors import InputError

            raise InputError(f"{self.host_where.get(host, self.path)}: the hosts' group memberships (inherited ones "
                             f"included) add up to more than {MAX_GROUP_WORK}; is this really a lab's inventory?")
        merged = dict(layer[0])
        merged.update(self.host_vars.get(host, {}))
        merged.update(self.host_files.get(host, {}))
        return merged, layer[1]
