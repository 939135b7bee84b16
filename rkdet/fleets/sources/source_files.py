"""The files an inventory source is made of, checked before either engine reads a byte of them.

Why its own module: the native reader and ansible-core must refuse the same crafted folders, and
ansible-core must never be handed a file that makes it run a program, read a host file, block or
grow without bound. One walk (bounded in files and depth, nothing opened) covers the inventory
(a file, or a folder of sources for ansible-core) and the `group_vars/` and `host_vars/` folders
Ansible reads beside it. Refused, one line naming the entry:
- a FIFO, socket or device (a reader would block or never end);
- a symlink that leaves the inventory's folder, dangles or loops, and any symlink to a folder
  (a loop reads forever); a vars file linked to `/etc/shadow` or a private key is never opened;
- a file larger than the reader takes (its size from `stat`: a sparse 1 GiB file is not read);
- an executable file (Ansible runs it as a dynamic inventory) unless the user opted in to inventory
  programs (`--inventory-programs`, docs/FLEET.md); rkdet's own reader never runs one.
Hidden entries of a folder of sources are skipped (Ansible skips them: a `.git`); in the vars folders
every entry is checked (a group may be named `.x`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rkdet.errors import InputError

MAX_ENTRIES = 10_000
MAX_DEPTH = 16
MAX_SOURCE_BYTES = 4 << 20  # as the native reader's MAX_INVENTORY_BYTES
MAX_VARS_BYTES = 1 << 20  # as vars_dirs.MAX_VARS_BYTES
VARS_FOLDERS = ("group_vars", "host_vars")
PROGRAMS_HINT = ("rkdet runs inventory programs only when asked: --inventory-programs (ansible-core engine), "
                 "or chmod -x it if it is a plain inventory")


def is_program(st: os.stat_result) -> bool:
    """What Ansible's `script` plugin takes for a dynamic inventory: a file with an execute bit."""
    return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o111)


def check_source(inventory: Path, programs: bool = False) -> list[Path]:
    """Check an inventory source and the vars folders beside it; returns the programs it holds
    (executable files, only when `programs` allows them: the caller says it runs them)."""
    base_st = _stat(inventory, inventory)
    found: list[Path] = []
    budget = [MAX_ENTRIES]
    if stat.S_ISDIR(base_st.st_mode):
        base = inventory.resolve()
        _walk(base, base, 1, budget, MAX_SOURCE_BYTES, found, programs, "inventory folder")
    else:
        if not stat.S_ISREG(base_st.st_mode):
            raise InputError(f"{inventory}: not a regular file (a FIFO, socket or device); pass the inventory file "
                             "itself")
        if base_st.st_size > MAX_SOURCE_BYTES:
            raise InputError(f"{inventory}: larger than {MAX_SOURCE_BYTES >> 10} KiB; is this really an inventory?")
        if is_program(base_st):
            if not programs:
                raise InputError(f"{inventory}: an executable inventory (a program Ansible would run); {PROGRAMS_HINT}")
            found.append(inventory)
        base = inventory.resolve().parent
        for name in VARS_FOLDERS:
            folder = base / name
            if folder.is_symlink():
                raise InputError(f"{folder}: a symlinked vars folder; rkdet reads vars folders in the inventory's own "
                                 "folder only")
            if folder.is_dir():
                _walk(folder, base, 1, budget, MAX_VARS_BYTES, found, False, "vars folder")
    return found


def _stat(path: Path, shown: Path) -> os.stat_result:
    try:
        return path.stat()
    except FileNotFoundError:
        raise InputError(f"{shown}: no such inventory (or a dangling symlink)") from None
    except OSError as err:
        raise InputError(f"{shown}: cannot read the inventory ({err.strerror})") from None


def _walk(folder: Path, base: Path, depth: int, budget: list[int], limit: int, found: list[Path], programs: bool,
          what: str) -> None:
    if depth > MAX_DEPTH:
        raise InputError(f"{folder}: folders nested deeper than {MAX_DEPTH}")
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as err:
        raise InputError(f"{folder}: cannot list the {what} ({err.strerror})") from None
    for entry in entries:
        if entry.name.startswith(".") and what == "inventory folder":
            continue  # Ansible skips hidden entries of a folder of sources (a .git); a vars file may be `.x.yml`
        budget[0] -= 1
        if budget[0] < 0:
            raise InputError(f"{folder}: more than {MAX_ENTRIES} entries; is this really an inventory's folder?")
        path = Path(entry.path)
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            st = _link_target(path, base, what)
        if stat.S_ISDIR(st.st_mode):
            _walk(path, base, depth + 1, budget, limit, found, programs, what)
        elif not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: not a regular file (a FIFO, socket or device) in the {what}; remove it")
        elif st.st_size > limit:
            raise InputError(f"{path}: larger than {limit >> 10} KiB; is this really an inventory's file?")
        elif is_program(st) and what == "inventory folder":
            if not programs:
                raise InputError(f"{path}: an executable file in the inventory folder (a program Ansible would run); "
                                 f"{PROGRAMS_HINT}")
            found.append(path)


def _link_target(path: Path, base: Path, what: str) -> os.stat_result:
    """A symlink in the source: a file inside the inventory's folder, else refused (never opened)."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InputError(f"{path}: a symlink that dangles or loops in the {what}; remove it") from None
    if real != base and base not in real.parents:
        raise InputError(f"{path}: a symlink out of the inventory's folder ({base}); rkdet reads no file outside "
                         "it: copy what the inventory needs into the folder")
    st = real.stat()
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: a symlink to a folder in the {what} (it can loop); use a real folder")
    return st
