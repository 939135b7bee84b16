"""A host's merged vars -> the `FleetBoard` record: the connection variables rkdet honours, and those it refuses.

Why its own module: both engines (the native reader and ansible-core's JSON) end here, so a variable
means the same whatever read it. Honoured: ansible_host (ansible_ssh_host), ansible_port
(ansible_ssh_port), ansible_user (ansible_ssh_user), ansible_ssh_private_key_file
(ansible_private_key_file), ansible_become (+ ansible_become_method sudo, ansible_become_user root),
ansible_ssh_common_args / ansible_ssh_extra_args (ProxyJump, -J, and the -o options in `_SSH_OPTIONS`),
ansible_connection ssh/smart/paramiko, and rkdet's own rkdet_*. Refused, one line each: passwords (rkdet
authenticates with keys only), other become methods or users, other connections, any ssh option it does
not understand, and anything that would turn host-key checking off (rkdet never does; the operator's
`--accept-new-host-key` is the one way to trust a new key). Every other var is Ansible's business.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from rkdet.errors import InputError
from rkdet.fleets.sources.model import FleetBoard, Var, VarMap
from rkdet.textsafe import visible

MAX_NAME = 255
SOC_RE = re.compile(r"^[a-z0-9]{2,16}$")
_TRUE = {"true", "yes", "on", "1", "y", "t"}
_FALSE = {"false", "no", "off", "0", "n", "f"}
_ALIASES = {  # Ansible's alternative names for one setting: both set to different values is refused
    "address": ("ansible_host", "ansible_ssh_host"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "key": ("ansible_ssh_private_key_file", "ansible_private_key_file"),
}
_PASSWORDS = ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password", "ansible_become_password",
              "ansible_become_pass", "ansible_sudo_pass", "ansible_ssh_private_key_passphrase")
_REFUSED = {
    "ansible_become_flags": "rkdet runs `sudo -n` with no other flags",
    "ansible_become_exe": "rkdet runs the board's `sudo`",
    "ansible_ssh_args": "it replaces OpenSSH's whole option set; put ProxyJump in ansible_ssh_common_args",
    "ansible_ssh_executable": "rkdet connects with paramiko, not an ssh program",
}
_CONNECTIONS = {"ssh", "smart", "paramiko", "paramiko_ssh", "ansible.builtin.ssh", "ansible.builtin.paramiko_ssh"}
_HOSTKEY_VARS = ("ansible_ssh_host_key_checking", "ansible_host_key_checking", "ansible_paramiko_host_key_checking")
_NO_HOSTKEYS = ("rkdet never turns host-key checking off; trust a new board's key once with "
                "--accept-new-host-key (or add it to known_hosts) and remove this setting for rkdet")


def _bool(text: Any) -> bool | None:
    if isinstance(text, bool):
        return text
    if isinstance(text, int) and text in (0, 1):
        return bool(text)
    if isinstance(text, str) and text.strip().lower() in _TRUE | _FALSE:
        return text.strip().lower() in _TRUE
    return None


def _value(name: str, var: Var) -> Any:
    value = var.value()
    if isinstance(value, (dict, list, tuple)):
        if isinstance(value, dict) and "__ansible_vault" in value:
            raise InputError(f"{var.where}: {name}: encrypted (vault) values are not read by rkdet; write the value")
        raise InputError(f"{var.where}: {name} must be a single value, not a {'mapping' if isinstance(value, dict) else 'list'}")
    if isinstance(value, str) and "{{" in value:
        raise InputError(f"{var.where}: {name}: templates ({{{{ ... }}}}) are not evaluated by rkdet; write the value")
    return value


def text(name: str, var: Var, *, spaces: bool = False, limit: int = MAX_NAME, dash: bool = False) -> str:
    """A var that reaches SSH or a path: 1-`limit` characters, no control characters (nor spaces
    unless `spaces`), not starting with '-'."""
    value = _value(name, var)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"{var.where}: {name} must be text")
    out = str(value)
    if not out.strip() or len(out) > limit:
        raise InputError(f"{var.where}: {name} must be 1 to {limit} characters")
    if visible(out, limit) != out or (not spaces and any(c.isspace() for c in out)):
        raise InputError(f"{var.where}: {name}: {visible(out, 60)!r} holds spaces or control characters")
    if out.startswith("-") and not dash:
        raise InputError(f"{var.where}: {name}: {visible(out, 60)!r} must not start with '-'")
    return out


def check_ssh_value(value: object, where: str, what: str) -> str:
    """A name, address or user that reaches SSH: text of 1-255 characters, no spaces or control
    characters, not starting with '-' (the rules inventory values follow; InputError naming `where`)."""
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise InputError(f"{where}: a {what} must be text of 1 to {MAX_NAME} characters")
    if visible(value, MAX_NAME) != value or any(c.isspace() for c in value):
        raise InputError(f"{where}: {what} {visible(value, 60)!r} holds spaces or control characters")
    if value.startswith("-"):
        raise InputError(f"{where}: {what} {visible(value, 60)!r} must not start with '-'")
    return value


def _one(merged: VarMap, key: str) -> tuple[str, Var] | None:
    """The var for a setting Ansible knows under two names; both set differently is refused."""
    found = [(n, merged[n]) for n in _ALIASES[key] if n in merged]
    if len(found) == 2 and _value(found[0][0], found[0][1]) != _value(found[1][0], found[1][1]):
        raise InputError(f"{found[1][1].where}: {found[1][0]} and {found[0][0]} (at {found[0][1].where}) "
                         "disagree; keep one")
    return found[0] if found else None


def _flag(name: str, var: Var) -> bool:
    got = _bool(_value(name, var))
    if got is None:
        raise InputError(f"{var.where}: {name} must be true or false, not {visible(var.value(), 40)!r}")
    return got


def _port(name: str, var: Var) -> int:
    raw = _value(name, var)
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw.strip())
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= 65535:
        raise InputError(f"{var.where}: {name} {visible(raw, 40)!r} is not a port number (1-65535)")
    return raw


# -o options rkdet understands: name -> the values it accepts (None: any, handled by the caller)
_SSH_OPTIONS: dict[str, set[str] | None] = {
    "proxyjump": None,
    "stricthostkeychecking": {"yes", "ask"},  # what rkdet does anyway (it never asks: it refuses)
    "identitiesonly": {"yes"},  # rkdet uses only the key it is given when it is given one
}


def ssh_args(name: str, var: Var) -> str | None:
    """The ProxyJump an ansible_ssh_*_args value sets (None: none); every other option refused by name.
    Given twice, the first wins, as OpenSSH takes the first value of an option (and Ansible passes the
    words to it in order); every value is still checked."""
    raw = var.value()
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    value = text(name, var, spaces=True, limit=4096, dash=True)
    try:
        words = shlex.split(value)
    except ValueError as err:
        raise InputError(f"{var.where}: {name}: unreadable ({err})") from None
    jumps: list[str | None] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("-J", "-o") or (word.startswith(("-J", "-o")) and len(word) > 2):
            flag, rest = word[:2], word[2:]
            if not rest:
                if i + 1 >= len(words):
                    raise InputError(f"{var.where}: {name}: {flag} needs a value")
                i += 1
                rest = words[i]
            if flag == "-J":
                jumps.append(_jump(name, var, rest))
            else:
                key, sep, val = rest.partition("=")
                if not sep:
                    key, _, val = rest.partition(" ")
                key, val = key.strip(), val.strip()
                lk = key.lower()
                if lk in ("stricthostkeychecking", "userknownhostsfile", "globalknownhostsfile") and (
                        val.lower() in ("no", "off", "accept-new", "false") or val == "/dev/null"):
                    raise InputError(f"{var.where}: {name}: -o {visible(key, 40)}={visible(val, 40)}: {_NO_HOSTKEYS}")
                if lk == "proxycommand":
                    raise InputError(f"{var.where}: {name}: -o ProxyCommand: rkdet runs no local command from an "
                                     "inventory; reach the board with ProxyJump (-J HOST)")
                if lk not in _SSH_OPTIONS:
                    raise InputError(f"{var.where}: {name}: -o {visible(key, 40)}: an ssh option rkdet does not "
                                     "understand (it reads ProxyJump, -J, StrictHostKeyChecking=yes, "
                                     "IdentitiesOnly=yes); remove it for the hosts rkdet deploys to")
                allowed = _SSH_OPTIONS[lk]
                if allowed is None:
                    jumps.append(_jump(name, var, val))
                elif val.lower() not in allowed:
                    raise InputError(f"{var.where}: {name}: -o {visible(key, 40)}={visible(val, 40)}: rkdet "
                                     f"understands only {key}={'/'.join(sorted(allowed))}")
        else:
            raise InputError(f"{var.where}: {name}: {visible(word, 40)!r}: an ssh argument rkdet does not "
                             "understand (it reads -J HOST and -o ProxyJump=HOST); remove it for the hosts "
                             "rkdet deploys to")
        i += 1
    return jumps[0] if jumps else None


def _jump(name: str, var: Var, value: str) -> str | None:
    if value.lower() == "none":
        return None
    for hop in value.split(","):
        check_ssh_value(hop, f"{var.where}: {name}: ProxyJump", "jump host")
    return value


def board_from_vars(host: str, host_where: str, merged: VarMap, groups: tuple[str, ...], source: str) -> FleetBoard:
    """The record of one host from its merged vars (InputError naming the var's FILE:LINE)."""
    for pw in _PASSWORDS:
        if pw in merged:
            raise InputError(f"{merged[pw].where}: {pw}: rkdet authenticates with keys only and never sends a "
                             "password; use ansible_ssh_private_key_file (and NOPASSWD sudo on the board)")
    for var_name, why in _REFUSED.items():
        if var_name in merged:
            raise InputError(f"{merged[var_name].where}: {var_name} is not supported by rkdet ({why})")
    for hk in _HOSTKEY_VARS:
        if hk in merged and not _flag(hk, merged[hk]):
            raise InputError(f"{merged[hk].where}: {hk}: false: {_NO_HOSTKEYS}")
    if (v := merged.get("ansible_connection")) is not None:
        conn = text("ansible_connection", v)
        if conn not in _CONNECTIONS:
            raise InputError(f"{v.where}: ansible_connection {visible(conn, 40)!r}: rkdet reaches boards over SSH "
                             "only (ssh, smart, paramiko)")
    found = _one(merged, "address")
    if found:
        address = text(found[0], found[1])
    else:  # the name is the address: it must be one
        address = text(f"host {visible(host, 60)!r} (no ansible_host, so the name is the address)",
                       Var(host, host_where))
    port = _port(*found) if (found := _one(merged, "port")) else None
    user = text(*found) if (found := _one(merged, "user")) else None
    key = text(*found, spaces=True, limit=4096) if (found := _one(merged, "key")) else None
    soc = None
    if (v := merged.get("rkdet_soc")) is not None:
        soc = text("rkdet_soc", v).lower()
        if not SOC_RE.match(soc):
            raise InputError(f"{v.where}: rkdet_soc {visible(soc, 40)!r} is not a SoC name (e.g. rk3588, rv1126)")
    sudo = _become(merged)
    workdir = text("rkdet_workdir", v, limit=4096) if (v := merged.get("rkdet_workdir")) is not None else None
    known_hosts = text("rkdet_known_hosts", v, spaces=True, limit=4096) \
        if (v := merged.get("rkdet_known_hosts")) is not None else None
    tags: tuple[str, ...] = ()
    if (v := merged.get("rkdet_tags")) is not None:
        tags = _tags(v)
    jump = None
    for args in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if (v := merged.get(args)) is not None and (got := ssh_args(args, v)) is not None:
            if jump is not None and got != jump:
                raise InputError(f"{v.where}: {args} names jump host {visible(got, 60)!r} but "
                                 f"ansible_ssh_common_args names {visible(jump, 60)!r}; keep one")
            jump = got
    return FleetBoard(name=host, address=address, port=port, user=user, key_file=key, soc=soc, sudo=sudo,
                 workdir=workdir, known_hosts=known_hosts, tags=tags,
                 groups=tuple(g for g in groups if g != "ungrouped"), source=source, proxy_jump=jump)


def _become(merged: VarMap) -> bool | None:
    """rkdet_sudo, else ansible_become (with method sudo and user root only); both set and differing: refused."""
    become = _flag("ansible_become", merged["ansible_become"]) if "ansible_become" in merged else None
    if become:
        if (v := merged.get("ansible_become_method")) is not None and text("ansible_become_method", v) not in (
                "sudo", "ansible.builtin.sudo"):
            raise InputError(f"{v.where}: ansible_become_method {visible(v.value(), 40)!r}: rkdet becomes root with "
                             "`sudo -n` only; use sudo (with a NOPASSWD rule) or log in as root")
        if (v := merged.get("ansible_become_user")) is not None and text("ansible_become_user", v) != "root":
            raise InputError(f"{v.where}: ansible_become_user {visible(v.value(), 40)!r}: rkdet's sudo runs board "
                             "work as root only; remove it (or set root)")
    if "rkdet_sudo" in merged:
        sudo = _flag("rkdet_sudo", merged["rkdet_sudo"])
        if become is not None and become != sudo:
            raise InputError(f"{merged['rkdet_sudo'].where}: rkdet_sudo {str(sudo).lower()} disagrees with "
                             f"ansible_become {str(become).lower()} (at {merged['ansible_become'].where}); keep one")
        return sudo
    return become


def _tags(var: Var) -> tuple[str, ...]:
    value = var.value()
    if value is None:
        items: list[str] = []
    elif isinstance(value, list):
        items = [text("rkdet_tags item", Var(v, var.where), limit=100) for v in value]
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        items = [t.strip() for t in text("rkdet_tags", var, spaces=True, limit=4096).split(",") if t.strip()]
    else:
        raise InputError(f"{var.where}: rkdet_tags must be a list of words (or one comma-separated string)")
    return tuple(dict.fromkeys(items))
