"""Ansible's `--limit` host patterns, the basics, evaluated the way Ansible evaluates them.

Facts from Ansible's inventory manager (`split_host_pattern`, `order_patterns`,
`_evaluate_patterns`, `_enumerate_matches`):
- a pattern is split on commas when it has one, else on colons: `a:b` and `a,b` are unions;
- terms are applied as all plain terms first (a union, in the order written), then every `&x`
  (intersection), then every `!x` (exclusion); a pattern of only `&`/`!` terms starts from `all`;
- a term is `all` or `*` (every host), a group name (its hosts and its descendants' hosts), a host
  name, or a shell glob (`web*`, `rk35??`) matched against group names and host names.
Ansible warns about a term that matches nothing and goes on; rkdet refuses it (exit 2), because a
mistyped exclusion (`!lab-a` for `!lab_a`) would otherwise silently deploy to the boards it meant to
spare. Regular-expression terms (`~re`) and subscripts (`group[0]`) are not supported: refused.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from rkdet.errors import InputError
from rkdet.textsafe import visible


class Inventory(Protocol):
    """What a pattern is evaluated against (rkdet.fleet.inventory.Inventory has it; no import back)."""

    path: Path

    @property
    def hosts(self) -> list[str]: ...

    @property
    def groups(self) -> Iterable[str]: ...

    def group_hosts(self, name: str) -> list[str]: ...


_GLOB_CHARS = ("?", "*", "[", ".")  # Ansible also tries host names when a term has one of these
_SUBSCRIPT = re.compile(r"\[(-?\d+|\d+[:-]\d*)\]$")


def split_pattern(pattern: str) -> list[str]:
    """Ansible's split: commas when present, else colons; blanks dropped, whitespace stripped."""
    parts = pattern.split(",") if "," in pattern else pattern.split(":")
    return [p.strip() for p in parts if p.strip()]


def order_terms(terms: list[str]) -> list[str]:
    """Plain terms, then `&` terms, then `!` terms; `all` first when only modifiers were given."""
    plain = [t for t in terms if t[0] not in "&!"]
    inter = [t for t in terms if t[0] == "&"]
    excl = [t for t in terms if t[0] == "!"]
    return (plain or ["all"]) + inter + excl


def _matches(inventory: Inventory, term: str, limit: str) -> list[str]:
    """Hosts one term (without its modifier) names, in inventory order."""
    if term in ("all", "*"):
        return inventory.hosts
    if term.startswith("~"):
        raise InputError(f"--limit {visible(limit)!r}: regular-expression terms (~...) are not supported; "
                         "use group names, host names and globs")
    if _SUBSCRIPT.search(term):
        raise InputError(f"--limit {visible(limit)!r}: subscripts ({visible(term)}) are not supported")
    found: dict[str, None] = {}
    groups = [g for g in inventory.groups if g != "all" and fnmatch.fnmatchcase(g, term)]
    for g in groups:
        found.update(dict.fromkeys(inventory.group_hosts(g)))
    if not groups or any(c in term for c in _GLOB_CHARS):
        found.update(dict.fromkeys(h for h in inventory.hosts if fnmatch.fnmatchcase(h, term)))
    if not found and not groups:
        raise InputError(f"{inventory.path}: --limit term {visible(term)!r} matches no group or host; "
                         f"check the spelling (groups: {', '.join(visible(g, 40) for g in sorted(inventory.groups))})")
    return list(found)


def evaluate(inventory: Inventory, pattern: str) -> list[str]:
    """Host names selected by an Ansible pattern, in Ansible's order of evaluation."""
    terms = split_pattern(pattern)
    if not terms:
        raise InputError("--limit: empty pattern; give a group, a host, a glob, or a:b, a:!b, a:&b")
    hosts: list[str] = []
    for term in order_terms(terms):
        if term[0] in "&!":
            bare = term[1:].strip()
            if not bare:
                raise InputError(f"--limit {visible(pattern)!r}: {term!r} needs a name after it")
            that = set(_matches(inventory, bare, pattern))
            hosts = [h for h in hosts if (h in that) == (term[0] == "&")]
        else:
            have = set(hosts)
            hosts.extend(h for h in _matches(inventory, term, pattern) if h not in have)
    return hosts
