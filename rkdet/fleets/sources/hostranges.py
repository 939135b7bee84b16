"""Ansible host patterns in an inventory: `name`, `name:PORT`, and ranges `rk[01:16].lab`, `n[a:f]`, `x[0:10:2]`.

Why its own module: the YAML and INI readers both name hosts this way. Facts from Ansible's docs and
behaviour (not its code): a `[begin:end]` or `[begin:end:step]` range expands inclusively; numeric
bounds with a leading zero keep their width (begin and end must then be equally wide); an empty
begin is 0; letters range over a-z then A-Z; several ranges in one name multiply out; a trailing
`:PORT` sets ansible_port. Anything else with brackets or colons (IPv6 addresses) is refused here.
"""

from __future__ import annotations

import re
import string

from rkdet.errors import InputError
from rkdet.textsafe import visible

MAX_EXPANDED = 100_000  # a range of more hosts than a lab could own is a typo (or an attack)
MAX_VAR_COPIES = 1_000_000  # a range's hosts times the vars written beside it: each host gets its own copy
_RANGE = re.compile(r"\[([^\]]*)\]")
_PORT = re.compile(r"^(.*[^:]):(\d{1,5})$")


def split_port(pattern: str, where: str) -> tuple[str, int | None]:
    """(`name`, port) from `name` or `name:PORT` (ranges kept in the name)."""
    masked = _RANGE.sub(lambda m: "R" * len(m.group(0)), pattern)
    port = None
    if masked.count(":") == 1 and (m := _PORT.match(masked)):
        port = int(m.group(2))
        if not 1 <= port <= 65535:
            raise InputError(f"{where}: host {visible(pattern, 80)!r}: port {port} is not 1-65535")
        pattern = pattern[:len(m.group(1))]
    elif ":" in masked:
        raise InputError(f"{where}: host {visible(pattern, 80)!r}: IPv6 addresses and other names with ':' are "
                         "not read by rkdet's inventory reader; name the host and set ansible_host (or use "
                         "ansible-core: docs/FLEET.md)")
    return pattern, port


def _bounds(text: str, pattern: str, where: str) -> list[str]:
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise InputError(f"{where}: host {visible(pattern, 80)!r}: a range must be [begin:end] or [begin:end:step]")
    beg, end = parts[0] or "0", parts[1]
    step_text = parts[2] if len(parts) == 3 else "1"
    if not end:
        raise InputError(f"{where}: host {visible(pattern, 80)!r}: a range needs an end")
    if not step_text.isdigit() or int(step_text) < 1:
        raise InputError(f"{where}: host {visible(pattern, 80)!r}: a range step must be a whole number >= 1")
    step = int(step_text)
    if beg.isdigit() and end.isdigit():
        if int(beg) > int(end):
            raise InputError(f"{where}: host {visible(pattern, 80)!r}: a range must have begin <= end")
        width = len(beg) if beg[0] == "0" and len(beg) > 1 else 0
        if width and len(end) != width:
            raise InputError(f"{where}: host {visible(pattern, 80)!r}: a zero-padded range needs begin and end "
                             "of the same width")
        if (int(end) - int(beg)) // step + 1 > MAX_EXPANDED:
            raise InputError(f"{where}: host {visible(pattern, 80)!r}: expands to more than {MAX_EXPANDED} hosts")
        return [str(i).zfill(width) for i in range(int(beg), int(end) + 1, step)]
    letters = string.ascii_letters
    if len(beg) == 1 and len(end) == 1 and beg in letters and end in letters:
        if letters.index(beg) > letters.index(end):
            raise InputError(f"{where}: host {visible(pattern, 80)!r}: a range must have begin <= end")
        return list(letters[letters.index(beg):letters.index(end) + 1:step])
    raise InputError(f"{where}: host {visible(pattern, 80)!r}: range [{visible(text, 40)}] is neither numeric "
                     "nor one letter to one letter")


def check_spread(names: list[str], nvars: int, pattern: str, where: str) -> None:
    """Vars written beside a range are copied to each host: a bound on the copies (linear work)."""
    if len(names) * nvars > MAX_VAR_COPIES:
        raise InputError(f"{where}: host {visible(pattern, 80)!r}: {len(names)} hosts times {nvars} vars is more than "
                         f"{MAX_VAR_COPIES} values; put shared vars in a group")


def expand(pattern: str, where: str) -> tuple[list[str], int | None]:
    """The host names a pattern names, and its port (None when it has none)."""
    name, port = split_port(pattern, where)
    if "]" in _RANGE.sub("", name) or "[" in _RANGE.sub("", name):
        raise InputError(f"{where}: host {visible(pattern, 80)!r}: unbalanced '[' or ']'")
    names = [name]
    while names and _RANGE.search(names[0]):
        out: list[str] = []
        for n in names:
            m = _RANGE.search(n)
            assert m is not None
            for piece in _bounds(m.group(1), pattern, where):
                out.append(n[:m.start()] + piece + n[m.end():])
                if len(out) > MAX_EXPANDED:
                    raise InputError(f"{where}: host {visible(pattern, 80)!r}: expands to more than "
                                     f"{MAX_EXPANDED} hosts")
        names = out
    return names, port
