"""ansible-core as rkdet's inventory engine: `ansible-inventory -i INV --list [--limit P]` in a subprocess.

Why a subprocess: ansible-core is GPL-3.0 and lives in its own venv (requirements/ansible.lock.txt,
built by .ci/setup); rkdet never imports it. Asking Ansible itself makes every format and plugin it
reads work (INI, YAML, ranges, group_vars/host_vars, `constructed`, scripts, plugins) and makes host
selection Ansible's by construction. Its JSON is untrusted like any inventory: the output is capped,
its nesting bounded, every value goes through the same checks as the native reader's
(`rkdet.fleets.sources.connvars`).

Which program (docs/FLEET.md): $RKDET_ANSIBLE_INVENTORY (a path to `ansible-inventory`), else
$RKDET_ANSIBLE_VENV/bin/ansible-inventory, else ~/.local/share/rkdet/ansible-venv/bin/ansible-inventory.
`--inventory-engine` (or $RKDET_INVENTORY_ENGINE) is `auto` (ansible-core when found, else native),
`ansible` (required) or `native`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from rkdet.errors import InputError
from rkdet.fleets.sources.model import Inventory, Var
from rkdet.fleets.sources.patterns import describe
from rkdet.textsafe import visible

PROGRAM_ENV = "RKDET_ANSIBLE_INVENTORY"
VENV_ENV = "RKDET_ANSIBLE_VENV"
ENGINE_ENV = "RKDET_INVENTORY_ENGINE"
DEFAULT_VENV = Path("~/.local/share/rkdet/ansible-venv")
ENGINES = ("auto", "ansible", "native")
TIMEOUT = 120.0  # a dynamic inventory may ask a service; beyond this it is stuck
MAX_OUTPUT = 64 << 20
MAX_DEPTH = 64
_NO_MATCH = re.compile(r"Could not match supplied host pattern, ignoring: (.*)$")
_ENV = {  # Ansible's own switches: an unparsable source is an error (not a warning and an empty inventory)
    "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
    "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
    "ANSIBLE_HOST_PATTERN_MISMATCH": "warning",
    "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_FORCE_COLOR": "0",
    "ANSIBLE_LOCALHOST_WARNING": "False",
    "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
}


def find_program() -> Path | None:
    """The `ansible-inventory` to run, or None when ansible-core is not installed where rkdet looks."""
    given = os.environ.get(PROGRAM_ENV)
    if given:
        path = Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise InputError(f"${PROGRAM_ENV}={visible(given)}: no executable ansible-inventory there; fix it or unset it")
        return path
    venv = Path(os.environ.get(VENV_ENV) or DEFAULT_VENV).expanduser()
    path = venv / "bin" / "ansible-inventory"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def choose(engine: str | None) -> Path | None:
    """The program for `engine` (None: the native reader). `ansible` without ansible-core is InputError."""
    engine = (engine or os.environ.get(ENGINE_ENV) or "auto").lower()
    if engine not in ENGINES:
        raise InputError(f"inventory engine {visible(engine)!r}: use auto, ansible or native")
    if engine == "native":
        return None
    program = find_program()
    if program is None and engine == "ansible":
        raise InputError(f"--inventory-engine ansible: ansible-core not found at {DEFAULT_VENV}/bin/ansible-inventory "
                         f"(or ${VENV_ENV}, ${PROGRAM_ENV}); run .ci/setup, or `python3 -m venv {DEFAULT_VENV} && "
                         f"{DEFAULT_VENV}/bin/pip install -r requirements/ansible.lock.txt`")
    return program


def version(program: Path) -> str:
    """`ansible-core X.Y.Z` from the venv's metadata (no subprocess: the dist-info folder names it)."""
    for site in program.parent.parent.glob("lib/python*/site-packages"):
        for info in site.glob("ansible_core-*.dist-info"):
            return "ansible-core " + info.name[len("ansible_core-"):-len(".dist-info")]
    return "ansible-core"


def _run(program: Path, inventory: Path, limit: str | None, timeout: float) -> tuple[dict[str, Any], list[str]]:
    argv = [str(program), "-i", str(inventory), "--list"] + (["--limit", limit] if limit else [])
    env = {**os.environ, **_ENV}
    with tempfile.TemporaryDirectory(prefix="rkdet-ansible-") as tmp, \
            tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        env.setdefault("ANSIBLE_LOCAL_TEMP", tmp)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise InputError(f"{inventory}: ansible-inventory gave no answer within {timeout:g} s "
                             "(a dynamic inventory waiting on something?)") from None
        err.seek(0)
        stderr = err.read(1 << 20).decode("utf-8", "replace").splitlines()
        if rc != 0:
            raise InputError(f"{inventory}: ansible-inventory refused it ({visible(_why(stderr, rc), 400)})")
        size = out.seek(0, 2)
        if size > MAX_OUTPUT:
            raise InputError(f"{inventory}: ansible-inventory printed more than {MAX_OUTPUT / (1 << 20):g} MiB")
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise InputError(f"{inventory}: ansible-inventory printed no readable JSON") from None
    _check_depth(doc, inventory)
    if not isinstance(doc, dict):
        raise InputError(f"{inventory}: ansible-inventory printed JSON that is not an inventory")
    missing = [m.group(1).strip() for ln in stderr if (m := _NO_MATCH.search(ln))]
    return doc, missing


def _why(stderr: list[str], rc: int) -> str:
    """Ansible's reasons, one line: each plugin's "Failed to parse ..." warning, else its ERROR line."""
    reasons = [m.group(1) + ": " + m.group(2).strip() for ln in stderr
               if (m := re.search(r"Failed to parse inventory with '([\w.]+)' plugin: (.+)$", ln))]
    if reasons:
        return "; ".join(dict.fromkeys(reasons))
    errors = [ln.split("]:", 1)[-1].strip() for ln in stderr if "ERROR" in ln]
    return errors[0] if errors else (stderr[-1].strip() if stderr else f"exit {rc}")


def _check_depth(doc: Any, inventory: Path) -> None:
    stack = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"{inventory}: ansible-inventory's JSON is nested deeper than {MAX_DEPTH}")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def _names(value: Any, what: str, inventory: Path) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{inventory}: ansible-inventory's {what} is not a list of names")
    return value


def to_inventory(doc: dict[str, Any], inventory: Path, label: str) -> Inventory:
    """The one model from ansible-inventory's JSON: groups and members as Ansible built them, each
    host's vars already merged by Ansible (so they are the host's vars here)."""
    where = f"{inventory} (ansible-inventory)"
    inv = Inventory(inventory, {}, {}, {}, engine=label)
    inv.add_group("all", where)
    inv.add_group("ungrouped", where)
    groups = {k: v for k, v in doc.items() if k != "_meta"}
    for name, body in groups.items():
        if not isinstance(body, dict):
            raise InputError(f"{inventory}: ansible-inventory's group {visible(name, 60)!r} is not an object")
    seen: set[str] = set()

    def walk(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        body = groups.get(name, {})
        inv.add_group(name, where)
        for host in _names(body.get("hosts"), f"{name} hosts", inventory):
            inv.add_host(name, host, f"{where}: host {host}")
        for child in _names(body.get("children"), f"{name} children", inventory):
            if child not in groups:
                continue  # Ansible lists a child it left out of the output for being empty
            inv.add_group(child, where)
            inv.add_child(name, child)
            walk(child)

    walk("all")
    meta = doc.get("_meta", {})
    hostvars = meta.get("hostvars", {}) if isinstance(meta, dict) else {}
    if not isinstance(hostvars, dict):
        raise InputError(f"{inventory}: ansible-inventory's _meta.hostvars is not an object")
    for host in list(inv.host_where):
        hv = hostvars.get(host, {})
        if not isinstance(hv, dict):
            raise InputError(f"{inventory}: ansible-inventory's vars of {visible(host, 60)!r} are not an object")
        inv.host_vars[host] = {k: Var(v, f"{where}: host {host} var {k}") for k, v in hv.items()}
    inv.reconcile()
    return inv


def load(program: Path, inventory: Path, limit: str | None, timeout: float = TIMEOUT) -> Inventory:
    """The inventory as ansible-core reads it, restricted to `limit` (the hosts Ansible selects).
    A term Ansible warns matches nothing is refused, saying what Ansible selects without it."""
    label = version(program)
    doc, missing = _run(program, inventory, limit, timeout)
    inv = to_inventory(doc, inventory, label)
    if limit and not missing and not inv.hosts:
        raise InputError(f"{inventory}: --limit {visible(limit)!r} selects no host")
    if missing:
        raise InputError(f"{inventory}: --limit term {visible(missing[0])!r} matches no group or host "
                         f"(Ansible warns, ignores it and selects {describe(inv.hosts)}); check the spelling")
    return inv
