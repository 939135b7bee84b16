"""`<config>.searched.yaml`: the user's config file, verbatim, plus exactly the keys the passing variant changed.

Written beside the config (so its relative paths mean the same files), each changed key on one line with a
comment saying why. The text is edited, not re-dumped, so the user's comments and order stay; the result is
checked by loading it: it must equal the user's config with exactly those keys changed, else the mapping is
dumped whole (comments lost, said in the header).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

MARK = "rkdet convert --search"


def searched_path(config: Path) -> Path:
    name = config.name
    stem = name[: -len(config.suffix)] if config.suffix in (".yaml", ".yml") else name
    return config.with_name(f"{stem}.searched.yaml")


def _value(value: Any) -> str:
    return json.dumps(value)  # JSON scalars and lists are YAML flow values


def _edit(text: str, changes: dict[str, Any], why: str) -> str:
    lines = text.splitlines()
    for dotted, value in changes.items():
        section, key = dotted.split(".", 1)
        start = next((i for i, ln in enumerate(lines) if re.match(rf"^{re.escape(section)}:\s*(#.*)?$", ln)), None)
        entry = f"{key}: {_value(value)}  # {MARK}: {why}"
        if start is None:
            lines += [f"{section}:", f"  {entry}"]
            continue
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t#"):
            end += 1
        block = range(start + 1, end)
        indents = [len(lines[i]) - len(lines[i].lstrip()) for i in block if lines[i].strip() and not lines[i].lstrip().startswith("#")]
        indent = " " * (indents[0] if indents else 2)
        at = next((i for i in block if re.match(rf"^{indent}{re.escape(key)}\s*:", lines[i])), None)
        if at is None:
            lines.insert(start + 1, indent + entry)
            continue
        stop = at + 1  # the old value's continuation lines (a block list or mapping under the key)
        while stop < end and lines[stop].strip():
            ind = len(lines[stop]) - len(lines[stop].lstrip())
            if not (ind > len(indent) or (ind == len(indent) and lines[stop].lstrip().startswith("- "))):
                break
            stop += 1
        lines[at:stop] = [indent + entry]
    return "\n".join(lines) + "\n"


def render(config: Path, changes: dict[str, Any], why: str, header: str) -> str:
    """The searched config's text; loading it gives the user's mapping with exactly `changes` applied."""
    text = config.read_text(encoding="utf-8")
    raw = yaml.safe_load(text) or {}
    expected = copy.deepcopy(raw)
    for dotted, value in changes.items():
        section, key = dotted.split(".", 1)
        if not isinstance(expected.get(section), dict):
            expected[section] = {}
        expected[section][key] = value
    top = "".join(f"# {line}\n" for line in header.splitlines())
    edited = top + _edit(text, changes, why)
    try:
        if yaml.safe_load(edited) == expected:
            return edited
    except yaml.YAMLError:
        pass
    return (top + f"# ({config.name} could not be edited in place: the whole mapping is written, its comments lost)\n"
            + "".join(f"# {MARK} changed {k}: {why}\n" for k in changes)
            + yaml.safe_dump(expected, sort_keys=False))
