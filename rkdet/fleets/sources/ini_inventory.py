"""Ansible's INI inventory format (`/etc/ansible/hosts`), read natively into the one model.

Why its own module: one job, one format. Facts from Ansible's docs and behaviour (not its code):
- lines are stripped; blank lines and lines starting with `#` or `;` are comments;
- `[group]` lists hosts, `[group:vars]` sets `key=value` vars, `[group:children]` lists child groups;
  lines before the first section are hosts of `ungrouped`; other section types are errors;
- a host line is split like a shell line (quotes, `#` comments): the host pattern (a name, a range,
  `name:PORT`), then `key=value` vars; in a `:vars` section the whole rest of the line after the first
  `=` is the value (a `#` there is part of it);
- a value is read as a Python literal when it is one (`2222` a number, `True` a boolean, `'a b'` text),
  else kept as text (`true`, `yes`, `-o ProxyJump=x`);
- a `:children` entry or a `:vars` section must name a group defined somewhere in the file.
"""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from pathlib import Path
from typing import Any

from rkdet.errors import InputError
from rkdet.fleets.sources import hostranges
from rkdet.fleets.sources.model import Inventory, Var
from rkdet.fleets.sources.yaml_inventory import check_cycles
from rkdet.textsafe import visible

_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[#;].*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:[#;].*)?$")
MAX_LITERAL = 4096  # a longer value stays text (literal_eval of untrusted text is bounded)


def parse_value(text: Any) -> Any:
    """An INI value: a Python literal when it is one, else the text itself."""
    if not isinstance(text, str) or len(text) > MAX_LITERAL:
        return text
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def read_ini(path: Path, text: str) -> Inventory:
    """The inventory of an INI file's text (InputError naming FILE:LINE on bad structure)."""
    inv = Inventory(path, {}, {}, {})
    inv.add_group("all", str(path))
    inv.add_group("ungrouped", str(path))
    # a group is created when a section defines it ([g] or [g:children]); until then a [g:vars] section or
    # a children entry naming it waits (as Ansible's pending declarations do), so creation order matches
    waiting_vars: dict[str, tuple[str, dict[str, Var]]] = {}
    waiting_parents: dict[str, tuple[str, list[str]]] = {}

    def define(name: str, where: str) -> None:
        if name in inv.groups:
            return
        inv.add_group(name, where)
        if name in waiting_vars:
            inv.groups[name].vars.update(waiting_vars.pop(name)[1])
        for parent in waiting_parents.pop(name, ("", []))[1]:
            inv.add_child(parent, name)

    group, state = "ungrouped", "hosts"
    section_vars: dict[str, Var] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        where = f"{path}:{lineno}"
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if visible(line, len(line)) != line:
            raise InputError(f"{where}: holds control characters; write the line as plain text")
        if line.startswith("["):
            m = _SECTION.match(line)
            if not m:
                raise InputError(f"{where}: {visible(line, 60)!r} is not a section header ([group], "
                                 "[group:vars] or [group:children])")
            group, kind = m.group(1), m.group(2) or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise InputError(f"{where}: section [{visible(group, 40)}:{visible(kind, 20)}]: "
                                 "the section type must be vars or children")
            if kind == "vars":
                if group in inv.groups:
                    section_vars = inv.groups[group].vars
                else:
                    section_vars = waiting_vars.setdefault(group, (where, {}))[1]
            else:
                define(group, where)
            state = kind
            continue
        if state == "hosts":
            _host_line(inv, group, line, where)
        elif state == "vars":
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise InputError(f"{where}: expected key=value in [{visible(group, 40)}:vars], got {visible(line, 60)!r}")
            section_vars[key.strip()] = Var(value.strip(), where, parse_value)
        else:
            m = _GROUP_NAME.match(line)
            if not m:
                raise InputError(f"{where}: {visible(line, 60)!r} is not a group name "
                                 f"(in [{visible(group, 40)}:children])")
            child = m.group(1)
            if child == "all":
                raise InputError(f"{where}: `all` cannot be a child group (every group is inside it)")
            inv.groups[group].edges.setdefault(child, where)
            if child in inv.groups:
                inv.add_child(group, child)
            else:
                waiting_parents.setdefault(child, (where, []))[1].append(group)
    for name, (where, _) in waiting_vars.items():
        raise InputError(f"{where}: section [{visible(name, 40)}:vars] is for a group the file never defines; "
                         f"add a [{visible(name, 40)}] section or fix the name")
    for name, (where, _) in waiting_parents.items():
        raise InputError(f"{where}: child group {visible(name, 40)!r} is never defined; add a "
                         f"[{visible(name, 40)}] section (it may be empty) or fix the name")
    check_cycles(inv)
    return inv


def _host_line(inv: Inventory, group: str, line: str, where: str) -> None:
    try:
        words = shlex.split(line, comments=True)
    except ValueError as err:
        raise InputError(f"{where}: unreadable host line ({err})") from None
    if not words:
        return
    names, port = hostranges.expand(words[0], where)
    variables: dict[str, Var] = {}
    if port is not None:
        variables["ansible_port"] = Var(port, where)
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise InputError(f"{where}: expected key=value host variables after {visible(words[0], 60)!r}, "
                             f"got {visible(word, 60)!r}")
        variables[key] = Var(value, where, parse_value)
    hostranges.check_spread(names, len(variables), words[0], where)
    for host in names:
        inv.add_host(group, host, where)
        inv.host_vars[host].update(variables)
