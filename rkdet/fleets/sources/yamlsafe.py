"""Untrusted YAML for the fleet readers: bounded reads (regular files only), composed to nodes, no aliases, no merge keys.

Why its own module: the YAML inventory and the group_vars/host_vars files are read the same way, and
every error must name FILE:LINE. The file is untrusted: a FIFO or device is refused before it is
opened for reading (it would block or never end), the size is capped, YAML aliases are refused
before anything is built (no billion-laughs expansion), and merge keys (`<<:`) are refused by name
(Ansible's loader merges them, but they only make sense with aliases, which rkdet does not accept).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rkdet.errors import InputError
from rkdet.textsafe import visible

MAX_YAML_NODES = 200_000
MAX_NAME = 255
NULL_TAG = "tag:yaml.org,2002:null"
MERGE_TAG = "tag:yaml.org,2002:merge"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same events, nodes, marks


def fail(path: Path, line: int, message: str) -> InputError:
    return InputError(f"{path}:{line}: {message}")


def line_of(node: Node) -> int:
    return node.start_mark.line + 1


def read_bounded(path: Path, limit: int, what: str) -> str:
    """The text of a regular file of at most `limit` bytes (InputError, one line, otherwise).
    Opened with O_NONBLOCK and checked with fstat first: a FIFO never blocks the reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory; pass the {what} file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read the {what} ({err.strerror})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{path}: is a directory; pass the {what} file")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: not a regular file (a FIFO, socket or device); pass the {what} file itself")
        with os.fdopen(fd, "rb", closefd=True) as handle:
            fd = -1
            data = handle.read(limit + 1)
    except OSError as err:
        raise InputError(f"{path}: cannot read the {what} ({err.strerror})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise InputError(f"{path}: larger than {limit >> 10} KiB; is this really an {what}?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text (byte {err.start}); save the {what} as UTF-8") from None


def compose(path: Path, text: str) -> Node | None:
    """The document as nodes (with line marks); aliases, merge keys and oversized documents refused first."""
    try:
        count = 0
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise fail(path, line_of(event), f"YAML alias *{visible(event.anchor)}: aliases are not "
                                                 "accepted in an inventory (they can expand without bound); "
                                                 "write the values out")
            if isinstance(event, (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                count += 1
                if count > MAX_YAML_NODES:
                    raise fail(path, line_of(event), f"more than {MAX_YAML_NODES} YAML nodes; "
                                                     "is this really an inventory?")
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InputError(f"{where}: not valid YAML ({visible(err.problem or err.context)})") from None
    except yaml.reader.ReaderError as err:  # a character YAML does not allow (raw control codes)
        line = text[:err.position].count("\n") + 1
        char = err.character if isinstance(err.character, int) else ord(err.character)
        raise InputError(f"{path}:{line}: not valid YAML (character U+{char:04X} is not allowed; "
                         "write control characters as escapes, or not at all)") from None
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML ({visible(err)})") from None
    except RecursionError:
        raise InputError(f"{path}: YAML nested too deeply; is this really an inventory?") from None
    if root is not None:
        _no_merge_keys(path, root)
    return root


def _no_merge_keys(path: Path, root: Node) -> None:
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, MappingNode):
            for key, value in node.value:
                if isinstance(key, ScalarNode) and (key.tag == MERGE_TAG or key.value == "<<"):
                    raise fail(path, line_of(key), "YAML merge key `<<:` is not supported by rkdet's inventory "
                                                   "reader; write the keys out (or use ansible-core: docs/FLEET.md)")
                stack.extend((key, value))
        elif isinstance(node, SequenceNode):
            stack.extend(node.value)


def is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == NULL_TAG


def pairs(path: Path, node: Node, what: str) -> list[tuple[str, Node, int]]:
    """(key, value node, line) of a mapping; a null is empty; duplicate or non-text keys refused."""
    if is_null(node):
        return []
    if not isinstance(node, MappingNode):
        kind = "a list" if isinstance(node, SequenceNode) else "a single value"  # never quote a file's text
        raise fail(path, line_of(node), f"{what} must be a mapping, not {kind}")
    seen: dict[str, int] = {}
    out = []
    for key, value in node.value:
        if not isinstance(key, ScalarNode) or key.tag == NULL_TAG or not str(key.value).strip():
            raise fail(path, line_of(key), f"{what}: a key must be a name")
        name = str(key.value)
        if len(name) > MAX_NAME:
            raise fail(path, line_of(key), f"{what}: name longer than {MAX_NAME} characters")
        if name in seen:
            raise fail(path, line_of(key), f"{what}: {visible(name)!r} appears twice (first on line {seen[name]}); "
                                           "keep one")
        seen[name] = line_of(key)
        out.append((name, value, line_of(key)))
    return out


def construct(node: Node) -> Any:
    """A node's Python value (safe tags only; `!vault` and other tags are ValueError, which `Var.value`
    turns into a line naming the var)."""
    try:
        return yaml.SafeLoader("").construct_object(node, deep=True)
    except yaml.YAMLError as err:
        raise ValueError(f"unreadable value ({visible(getattr(err, 'problem', err))}); "
                         "encrypted (!vault) values are not read by rkdet") from None
