"""Ansible's host patterns (`--limit`), evaluated natively the way Ansible evaluates them.

Facts from Ansible's docs ("Patterns: targeting hosts and groups") and behaviour (not its code):
- a pattern with a comma is split on commas only; otherwise on colons outside `[...]` and on
  whitespace: `a:b`, `a,b` and `a b` are unions, and `g[1:2]` stays one term;
- terms apply as: every plain term first (a union, in the order written), then every `&x`
  (intersection), then every `!x` (exclusion); a pattern of only `&`/`!` terms starts from `all`;
- a term that is exactly a host's name is that host; else it is matched against every group name
  (`all` and `ungrouped` included) and, when no group matched or the term is a regex or holds one of
  `. ? * [`, against every host name: as a shell glob (whole name, case-sensitive), or with `~` as a
  regular expression (matched at the start of the name);
- a subscript (not on `~` terms) picks from that term's hosts: `g[0]`, `g[-1]`, `g[1:3]` (both ends
  included), `g[2:]` (to the end); `[x-y]` is the old spelling of `[x:y]`; a subscript past the end is
  an error; a group's hosts are its own, then its children's level by level, in the order written.
Bounds (both engines, checked before either reads anything, so they refuse the same patterns): at most
`MAX_PATTERN` characters and `MAX_TERMS` terms; `@FILE` (Ansible reads the limit from a file) is refused,
so no engine reads a file the pattern names or prints its lines; a `~regex` that can backtrack without
bound (a repeated group holding a repeat or an alternation, a backreference, more than `MAX_REPEATS`
repeats) is refused: Python's `re`, which both engines use, backtracks.
Ansible warns about a term that matches nothing and goes on; rkdet refuses it (exit 2), because a
mistyped exclusion (`!lab-a` for `!lab_a`) would otherwise deploy to the boards it meant to spare,
and the refusal says what Ansible would have selected. The selection is listed in the inventory's
order (`Inventory.hosts`), as with the ansible-core engine.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from rkdet.errors import InputError
from rkdet.textsafe import visible


class Inventory(Protocol):
    """What a pattern is evaluated against (rkdet.fleets.sources.model.Inventory has it)."""

    path: Path
    groups: Mapping[str, Any]
    host_where: Mapping[str, str]

    @property
    def hosts(self) -> list[str]: ...

    def group_hosts(self, name: str) -> list[str]: ...


MAX_PATTERN = 1024
MAX_TERMS = 64
MAX_REPEATS = 4
_TERM = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]*))\]$")
_SPECIAL = (".", "?", "*", "[")


def check_limit(pattern: str) -> None:
    """The bounds every `--limit` pattern meets before any engine sees it (InputError, one line)."""
    if pattern.startswith("@"):
        raise InputError("--limit @FILE: rkdet does not read a limit file (neither engine does); pass the pattern "
                         "itself, e.g. --limit \"$(paste -sd, FILE)\"")
    if len(pattern) > MAX_PATTERN:
        raise InputError(f"--limit: a pattern of {len(pattern)} characters (at most {MAX_PATTERN}); use groups")
    terms = split_pattern(pattern)
    if len(terms) > MAX_TERMS:
        raise InputError(f"--limit: {len(terms)} terms (at most {MAX_TERMS}); use groups")
    for term in terms:
        bare = term.lstrip("&!").strip()
        if bare.startswith("~"):
            _check_regex(bare, pattern)


def _check_regex(term: str, pattern: str) -> None:
    """Refuse a regex Python's backtracking matcher can take exponential (or high-degree) time on."""
    from re import _constants as c, _parser  # type: ignore[attr-defined]

    try:
        tree = _parser.parse(term[1:])
    except (re.error, RecursionError, OverflowError) as err:
        raise InputError(f"--limit {visible(pattern)!r}: {visible(term)} is not a valid pattern ({err})") from None
    repeats = [0]
    risky = (f"--limit {visible(pattern)!r}: {visible(term)} can backtrack without bound")
    fix = "; write it without nested repeats, alternations inside a repeat or backreferences (or use globs)"

    def walk(items: Any, inside_repeat: bool) -> bool:
        """True when `items` hold a repeat or an alternation (what a repeat around them makes explosive)."""
        found = False
        for op, av in items:
            if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                lo, hi, body = av
                many = hi is c.MAXREPEAT or hi > 1
                if many:
                    repeats[0] += 1
                    if repeats[0] > MAX_REPEATS:
                        raise InputError(f"{risky} (more than {MAX_REPEATS} repeats){fix}")
                inner = walk(body, inside_repeat or many)
                if many and inner:
                    raise InputError(f"{risky} (a repeat inside a repeat){fix}")
                found = found or many or inner
            elif op == c.BRANCH:
                if inside_repeat:
                    raise InputError(f"{risky} (an alternation inside a repeat){fix}")
                for branch in av[1]:
                    found = walk(branch, inside_repeat) or found
                found = True
            elif op in (c.GROUPREF, c.GROUPREF_EXISTS):
                raise InputError(f"{risky} (a backreference){fix}")
            elif op == c.SUBPATTERN:
                found = walk(av[-1], inside_repeat) or found
            elif op in (c.ASSERT, c.ASSERT_NOT):
                found = walk(av[1], inside_repeat) or found
            elif op == c.ATOMIC_GROUP:
                found = walk(av, inside_repeat) or found
        return found

    walk(tree, False)


def split_pattern(pattern: str) -> list[str]:
    """Ansible's split: commas when present, else colons outside brackets (and whitespace)."""
    parts = pattern.split(",") if "," in pattern else _TERM.findall(pattern)
    return [p.strip() for p in parts if p.strip()]


def order_terms(terms: list[str]) -> list[str]:
    """Plain terms, then `&` terms, then `!` terms; `all` first when only modifiers were given."""
    plain = [t for t in terms if t[0] not in "&!"]
    inter = [t for t in terms if t[0] == "&"]
    excl = [t for t in terms if t[0] == "!"]
    return (plain or ["all"]) + inter + excl


def _subscript(term: str) -> tuple[str, tuple[int, int | None] | None]:
    if term.startswith("~"):
        return term, None
    m = _SUBSCRIPT.match(term)
    if not m:
        return term, None
    expr, idx, start, _sep, end = m.groups()
    if idx is not None:
        return expr, (int(idx), None)
    return expr, (int(start), int(end) if end else -1)


def _apply(hosts: list[str], sub: tuple[int, int | None] | None, term: str, pattern: str) -> list[str]:
    if sub is None:
        return hosts
    start, end = sub
    try:
        if end:  # Ansible's rule: an end of 0 means "just start"
            return hosts[start:(len(hosts) - 1 if end == -1 else end) + 1]
        return [hosts[start]]
    except IndexError:
        raise InputError(f"--limit {visible(pattern)!r}: no host at subscript {visible(term)} "
                         f"(it matches {len(hosts)} host{'s' if len(hosts) != 1 else ''})") from None


def _matcher(expr: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(expr[1:]) if expr.startswith("~") else re.compile(fnmatch.translate(expr))
    except re.error as err:
        raise InputError(f"--limit {visible(pattern)!r}: {visible(expr)} is not a valid pattern ({err})") from None


def _matches(inventory: Inventory, term: str, pattern: str) -> list[str]:
    """The hosts one term (without its modifier) names, as Ansible lists them (duplicates kept: a
    subscript counts them), after its subscript."""
    expr, sub = _subscript(term)
    rx = _matcher(expr, pattern)
    found: list[str] = []
    groups = [g for g in inventory.groups if rx.match(g)]
    for g in groups:
        found.extend(inventory.group_hosts(g))
    if not groups or expr.startswith("~") or any(c in expr for c in _SPECIAL):
        found.extend(h for h in inventory.host_where if rx.match(h))
    return _apply(found, sub, term, pattern)


def evaluate_all(inventory: Inventory, pattern: str) -> tuple[list[str], list[str]]:
    """(hosts Ansible selects, in the inventory's order; the terms that matched nothing)."""
    check_limit(pattern)
    terms = split_pattern(pattern)
    if not terms:
        raise InputError("--limit: empty pattern; give a group, a host, a glob, ~regex, g[0], a:b, a:!b, a:&b")
    hosts: list[str] = []
    missing: list[str] = []
    for term in order_terms(terms):
        if term in inventory.host_where:
            that = [term]
        else:
            bare = term[1:].strip() if term[0] in "&!" else term
            if not bare:
                raise InputError(f"--limit {visible(pattern)!r}: {term!r} needs a name after it")
            that = _matches(inventory, bare, pattern)
            if not that:
                missing.append(term)
        if term[0] == "&":
            keep = set(that)
            hosts = [h for h in hosts if h in keep]
        elif term[0] == "!":
            drop = set(that)
            hosts = [h for h in hosts if h not in drop]
        else:
            have = set(hosts)
            hosts.extend(h for h in that if h not in have)
    chosen = set(hosts)
    return [h for h in inventory.hosts if h in chosen], missing


def describe(hosts: list[str], limit: int = 8) -> str:
    """`N hosts: a, b, ...` (or `nothing`) for a line saying what Ansible would select."""
    if not hosts:
        return "nothing"
    shown = ", ".join(visible(h, 60) for h in hosts[:limit])
    more = f", ... (+{len(hosts) - limit})" if len(hosts) > limit else ""
    return f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}: {shown}{more}"


def evaluate(inventory: Inventory, pattern: str) -> list[str]:
    """Host names selected by an Ansible pattern; a term matching nothing is refused, saying what
    Ansible would have selected instead."""
    hosts, missing = evaluate_all(inventory, pattern)
    if missing:
        groups = ", ".join(visible(g, 40) for g in sorted(inventory.groups))
        raise InputError(f"{inventory.path}: --limit term {visible(missing[0])!r} matches no group or host "
                         f"(Ansible would warn, ignore it and select {describe(hosts)}); check the spelling "
                         f"(groups: {groups})")
    return hosts
