"""`group_vars/` and `host_vars/` beside an inventory file, read as Ansible's host_group_vars plugin does.

Why its own module: both native readers (YAML, INI) share it. Facts from Ansible's docs and behaviour:
for a group or host NAME, `group_vars/NAME` (or `host_vars/NAME`) is read when it is a file named NAME,
NAME.yml, NAME.yaml or NAME.json, or a directory of such files (any depth, in sorted order, later files
winning; files with another extension, hidden files and `~` backups are not vars files). Each file is a
YAML mapping of vars (empty is allowed). Bounds: each file as small as an inventory, a fixed number of
files and of directory levels; a FIFO or device is refused.
"""

from __future__ import annotations

from pathlib import Path

from rkdet.errors import InputError
from rkdet.fleets.sources.model import Inventory, Var, VarMap
from rkdet.fleets.sources.yamlsafe import compose, construct, pairs, read_bounded
from rkdet.textsafe import visible

EXTENSIONS = ("", ".yml", ".yaml", ".json")
MAX_FILES = 10_000
MAX_DEPTH = 16
MAX_VARS_BYTES = 1 << 20


def _is_vars_file(path: Path) -> bool:
    return not path.name.startswith(".") and not path.name.endswith("~") and path.suffix in EXTENSIONS


def _dir_files(folder: Path, depth: int, budget: list[int]) -> list[Path]:
    if depth > MAX_DEPTH:
        raise InputError(f"{folder}: vars folders nested deeper than {MAX_DEPTH} (a symlink loop?)")
    out: list[Path] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        if entry.is_dir():
            out.extend(_dir_files(entry, depth + 1, budget))
        elif _is_vars_file(entry):
            out.append(entry)
            budget[0] -= 1
            if budget[0] < 0:
                raise InputError(f"{folder}: more than {MAX_FILES} vars files; is this really a vars folder?")
    return out


def _files_for(base: Path, name: str, budget: list[int]) -> list[Path]:
    found: list[Path] = []
    for ext in EXTENSIONS:
        p = base / f"{name}{ext}"
        if p.is_dir():
            found.extend(_dir_files(p, 1, budget))
        elif p.exists() or p.is_symlink():
            found.append(p)
            budget[0] -= 1
    return found


def _read_vars(path: Path) -> VarMap:
    text = read_bounded(path, MAX_VARS_BYTES, "vars file")
    root = compose(path, text)
    if root is None:
        return {}
    return {k: Var(node, f"{path}:{line}", construct) for k, node, line in pairs(path, root, f"vars file {path.name}")}


def load_vars_dirs(inv: Inventory) -> None:
    """Fill `inv.group_files` and `inv.host_files` from the folders beside `inv.path` (none: nothing)."""
    base = inv.path.resolve().parent
    budget = [MAX_FILES]
    for kind, names, target in (("group_vars", list(inv.groups), inv.group_files),
                                ("host_vars", list(inv.host_where), inv.host_files)):
        folder = base / kind
        if not folder.is_dir():
            continue
        for name in names:
            if "/" in name or name in (".", ".."):
                continue  # no file can be named so
            merged: VarMap = {}
            for f in _files_for(folder, name, budget):
                merged.update(_read_vars(f))
            if budget[0] < 0:
                raise InputError(f"{folder}: more than {MAX_FILES} vars files; is this really a vars folder?")
            if merged:
                target[name] = merged
    for name, group_vars in inv.group_files.items():
        for key, var in group_vars.items():
            if key == "ansible_group_priority":
                raise InputError(f"{var.where}: ansible_group_priority in a group_vars file: Ansible reads it only in "
                                 f"the inventory itself; move it to the inventory's {visible(name, 40)} vars")
