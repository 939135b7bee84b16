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

What it may run and read (docs/FLEET.md, docs/SECURITY.md): by default no program and no plugin the
inventory or the current folder brings: the inventory and the vars folders beside it pass
`source_files.check_source` first (an executable source is refused), and ansible-inventory runs with
an empty `ANSIBLE_CONFIG` (no `ansible.cfg` from the current folder, ~ or /etc), its own ANSIBLE_HOME
(no plugins from ~/.ansible), only the file-reading inventory plugins enabled (host_list, ini, yaml,
toml) and only the group_vars/host_vars vars plugin. `--inventory-programs` (or
$RKDET_INVENTORY_PROGRAMS=1) lets Ansible run executable inventories and load the config file
Ansible's own order finds ($ANSIBLE_CONFIG, ./ansible.cfg unless the folder is world-writable,
~/.ansible.cfg, /etc/ansible/ansible.cfg), with its plugins; the engine line names that file and
the programs. Either way the child runs under an address-space limit (`MEMORY_LIMIT`), a CPU-time
limit and a wall-clock limit, in its own process group, killed with rkdet (PR_SET_PDEATHSIG) and on
Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import signal
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.errors import InputError
from rkdet.fleets.sources.model import MAX_HOSTS, Inventory, Var
from rkdet.fleets.sources.patterns import check_limit, describe
from rkdet.fleets.sources.source_files import check_source
from rkdet.textsafe import visible

PROGRAM_ENV = "RKDET_ANSIBLE_INVENTORY"
VENV_ENV = "RKDET_ANSIBLE_VENV"
ENGINE_ENV = "RKDET_INVENTORY_ENGINE"
PROGRAMS_ENV = "RKDET_INVENTORY_PROGRAMS"
DEFAULT_VENV = Path("~/.local/share/rkdet/ansible-venv")
ENGINES = ("auto", "ansible", "native")
TIMEOUT = 120.0  # a dynamic inventory may ask a service; beyond this it is stuck
MEMORY_LIMIT = 1 << 30  # address space of ansible-inventory (about 60 MB resident for a lab's inventory)
FILE_PLUGINS = "host_list,ini,yaml,toml"  # the inventory plugins that only read files
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
    "ANSIBLE_DUPLICATE_YAML_DICT_KEY": "error",  # as rkdet's reader: a key written twice is refused
}
_PR_SET_PDEATHSIG = 1


@dataclass
class Setup:
    """How ansible-inventory was run, for the line that says so: config file and programs used."""

    programs_allowed: bool
    config: Path | None = None  # the ansible.cfg Ansible loaded (None: none)
    ignored: list[str] = field(default_factory=list)  # config files passed over, and why
    programs: list[Path] = field(default_factory=list)  # executable inventory sources it ran

    def describe(self) -> str:
        if not self.programs_allowed:
            return "no ansible.cfg, no inventory programs or plugins (--inventory-programs allows them)"
        config = f"config {self.config}" if self.config else "no ansible.cfg"
        ignored = "".join(f"; ignored {i}" for i in self.ignored)
        ran = ", ".join(str(p) for p in self.programs) or "none"
        return f"inventory programs allowed: {config}{ignored}; programs run: {ran}"


def programs_wanted(flag: bool | None) -> bool:
    """`--inventory-programs`, else $RKDET_INVENTORY_PROGRAMS (1/yes/true)."""
    if flag is not None:
        return flag
    return os.environ.get(PROGRAMS_ENV, "").strip().lower() in ("1", "yes", "true", "on")


def ansible_config(cwd: Path) -> tuple[Path | None, list[str]]:
    """The ansible.cfg Ansible's own order picks ($ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg,
    /etc/ansible/ansible.cfg), skipping ./ansible.cfg in a world-writable folder as Ansible does."""
    ignored: list[str] = []
    given = os.environ.get("ANSIBLE_CONFIG")
    candidates = [Path(given).expanduser()] if given else []
    local = cwd / "ansible.cfg"
    if local.is_file():
        if cwd.stat().st_mode & stat.S_IWOTH:
            ignored.append(f"{local} (in a world-writable folder, as Ansible ignores it)")
        else:
            candidates.append(local)
    candidates += [Path("~/.ansible.cfg").expanduser(), Path("/etc/ansible/ansible.cfg")]
    for c in candidates:
        if c.is_dir():
            c = c / "ansible.cfg"
        if c.is_file():
            return c, ignored
    return None, ignored


def _child_limits(memory: int, cpu: float) -> Callable[[], None]:
    """Run in the child before exec: its address space and CPU time capped, and killed with rkdet."""
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        seconds = max(1, int(cpu))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 5))
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # rkdet died before the line above took effect
            os._exit(1)

    return apply


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


def _environment(tmp: Path, setup: Setup) -> dict[str, str]:
    env = {**os.environ, **_ENV}
    env.setdefault("ANSIBLE_LOCAL_TEMP", str(tmp / "local"))
    empty = tmp / "ansible.cfg"  # an existing file: Ansible passes over an ANSIBLE_CONFIG that is not there
    empty.write_text("[defaults]\n")
    if not setup.programs_allowed:
        env.update({"ANSIBLE_CONFIG": str(empty), "ANSIBLE_HOME": str(tmp / "home"),
                    "ANSIBLE_INVENTORY_ENABLED": FILE_PLUGINS, "ANSIBLE_VARS_ENABLED": "host_group_vars",
                    "ANSIBLE_INVENTORY_PLUGINS": str(tmp / "none"), "ANSIBLE_VARS_PLUGINS": str(tmp / "none"),
                    "ANSIBLE_COLLECTIONS_PATH": str(tmp / "none")})
        return env
    config, setup.ignored = ansible_config(Path.cwd())
    setup.config = config
    env["ANSIBLE_CONFIG"] = str(config or empty)  # exactly the file named on the engine line
    return env


def _run(program: Path, inventory: Path, limit: str | None, timeout: float,
         setup: Setup) -> tuple[dict[str, Any], list[str]]:
    argv = [str(program), "-i", str(inventory), "--list"] + (["--limit", limit] if limit else [])
    with tempfile.TemporaryDirectory(prefix="rkdet-ansible-") as tmp_name, \
            tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        env = _environment(Path(tmp_name), setup)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                start_new_session=True, preexec_fn=_child_limits(MEMORY_LIMIT, timeout))
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            cause = ("an inventory program or plugin waiting on something?" if setup.programs_allowed
                     else "the inventory is too large for it?")
            raise InputError(f"{inventory}: ansible-inventory gave no answer within {timeout:g} s and was stopped "
                             f"({cause})") from None
        except BaseException:  # Ctrl-C, SIGTERM (raised as KeyboardInterrupt): the child goes with rkdet
            _kill(proc)
            raise
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


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The child and whatever it started (its own process group), then reaped: nothing left."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _why(stderr: list[str], rc: int) -> str:
    """Ansible's reasons, one line: its memory or CPU limit, each plugin's "Failed to parse ..."
    warning, else its ERROR line."""
    limit = f"memory limit of {MEMORY_LIMIT >> 20} MiB; is this really a lab's inventory?"
    if rc == -signal.SIGXCPU:
        return "it ran out of its CPU-time limit; is this really a lab's inventory?"
    if any("MemoryError" in ln for ln in stderr):
        return f"it ran out of its {limit}"
    if rc < 0:  # a C allocation failing unchecked under the limit ends Python by a signal
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"it was ended by {name}, most likely at its {limit}"
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
    named = sum(len(b.get("hosts") or ()) for b in groups.values() if isinstance(b, dict))
    if named > MAX_HOSTS * 4:  # a host is listed once per direct group: refuse before building anything
        raise InputError(f"{inventory}: ansible-inventory lists more than {MAX_HOSTS} hosts; is this really a "
                         "lab's inventory?")
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


def load(program: Path, inventory: Path, limit: str | None, timeout: float = TIMEOUT,
         setup: Setup | None = None) -> Inventory:
    """The inventory as ansible-core reads it, restricted to `limit` (the hosts Ansible selects).
    A term Ansible warns matches nothing is refused, saying what Ansible selects without it.
    `setup` (default: no programs) says whether inventory programs may run; it is filled in with
    the config file and programs used."""
    setup = setup if setup is not None else Setup(programs_allowed=False)
    if limit:
        check_limit(limit)
    setup.programs = check_source(inventory, setup.programs_allowed)
    label = version(program)
    doc, missing = _run(program, inventory, limit, timeout, setup)
    inv = to_inventory(doc, inventory, label)
    if limit and not missing and not inv.hosts:
        raise InputError(f"{inventory}: --limit {visible(limit)!r} selects no host")
    if missing:
        raise InputError(f"{inventory}: --limit term {visible(missing[0])!r} matches no group or host "
                         f"(Ansible warns, ignores it and selects {describe(inv.hosts)}); check the spelling")
    return inv
