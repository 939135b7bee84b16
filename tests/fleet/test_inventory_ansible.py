"""Issue 22: inventories as Ansible users keep them. The native reader (INI, ranges, group_vars/host_vars,
patterns, connection variables), the ansible-core engine, and their parity over the same lab."""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from rkdet.cli import main
from rkdet.errors import InputError
from rkdet.fleets.sources import ansible_engine
from rkdet.fleets.sources.hostranges import expand
from rkdet.fleets.sources.inventory import load_inventory, select
from tests.fleet.ansible_lab import PATTERNS, write_lab


@pytest.fixture(scope="module")
def ansible_program() -> Path:
    """ansible-core's ansible-inventory from the venv .ci/setup builds: required, never skipped."""
    program = ansible_engine.find_program()
    if program is None:
        pytest.fail(f"ansible-core venv missing: run .ci/setup (it builds {ansible_engine.DEFAULT_VENV} from "
                    "requirements/ansible.lock.txt), or set RKDET_ANSIBLE_VENV")
    return program


# ---- ranges ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern, hosts, port", [
    ("rk[01:04].lab", ["rk01.lab", "rk02.lab", "rk03.lab", "rk04.lab"], None),
    ("x[0:10:5]", ["x0", "x5", "x10"], None),
    ("x[01:10:3]", ["x01", "x04", "x07", "x10"], None),
    ("n[a:c]", ["na", "nb", "nc"], None),
    ("n[a:e:2]", ["na", "nc", "ne"], None),
    ("h[:2]", ["h0", "h1", "h2"], None),
    ("n[1:2]-[x:y]", ["n1-x", "n1-y", "n2-x", "n2-y"], None),
    ("rk[8:10].lab:2222", ["rk8.lab", "rk9.lab", "rk10.lab"], 2222),
    ("plain", ["plain"], None),
])
def test_host_ranges_expand_as_ansible_does(pattern: str, hosts: list[str], port: int | None) -> None:
    assert expand(pattern, "f:1") == (hosts, port)


@pytest.mark.parametrize("pattern, message", [
    ("x[3:1]", "begin <= end"), ("x[01:100]", "same width"), ("x[1:2:0]", "step"), ("x[a:2]", "neither numeric"),
    ("x[1]", "must be [begin:end]"), ("fe80::1", "IPv6"), ("x[0:999999]", "more than"),
])
def test_bad_ranges_are_one_line(pattern: str, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)) as err:
        expand(pattern, "inv.ini:7")
    assert str(err.value).startswith("inv.ini:7: host ")


# ---- the native reader over the lab ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ini", "yaml"])
def test_native_reader_reads_the_lab(tmp_path: Path, kind: str) -> None:
    inv = load_inventory(write_lab(tmp_path, kind))
    boards = {b.name: b for b in select(inv, None)}
    assert list(boards)[:1] == ["bastion"]  # ungrouped first, as ansible-inventory lists it
    assert {"rk01.lab", "rk04.lab", "opi5-a", "opi5-c", "roc1.lab", "roc5.lab", "roc9.lab"} <= set(boards)
    rk01, rk02, roc5, opi5b, bastion = (boards[h] for h in ("rk01.lab", "rk02.lab", "roc5.lab", "opi5-b", "bastion"))
    # inventory vars, group_vars/ (a folder of files, README.md skipped), host_vars/ (a file, a folder)
    assert (rk01.user, rk01.port, rk01.sudo, rk01.proxy_jump, rk01.workdir) == ("rock", 2022, True, "bastion", "/opt/rkdet")
    assert rk01.key_file == "~/.ssh/lab_ed25519" and rk01.tags == ("lab", "staging")
    assert rk02.address == "192.168.1.2" and rk02.tags == ("lab",)
    assert (roc5.user, roc5.port, roc5.soc) == ("radxa", 2200, "rk3568")  # host:PORT beats group_vars/all
    assert (opi5b.port, opi5b.soc) == (2202, "rk3588")
    assert (bastion.address, bastion.user, bastion.sudo, bastion.proxy_jump) == ("10.0.0.1", "jump", None, None)
    assert rk01.groups == ("lab", "staging", "rk3588")  # by depth, then name


def test_group_vars_all_beats_a_child_groups_inventory_vars(tmp_path: Path) -> None:
    """Ansible's precedence: inventory group vars < group_vars/all < group_vars/<group> < host vars."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("ansible_user: from-gv-all\nrkdet_workdir: /gv-all\n")
    (tmp_path / "group_vars" / "g.yml").write_text("rkdet_workdir: /gv-g\n")
    path = tmp_path / "inv.ini"
    path.write_text("[g]\na\nb ansible_user=host\n[g:vars]\nansible_user=inventory-g\nrkdet_workdir=/inv-g\n")
    a, b = select(load_inventory(path), None)
    assert (a.user, a.workdir) == ("from-gv-all", "/gv-g")
    assert (b.user, b.workdir) == ("host", "/gv-g")


@pytest.mark.parametrize("text, line, message", [
    ("[g:vars]\nx=1\n", 1, "never defines"),
    ("[g:children]\nh\n", 2, "child group 'h' is never defined"),
    ("[g:other]\n", 1, "section type must be vars or children"),
    ("[g\n", 1, "is not a section header"),
    ("[g]\na ansible_port\n", 2, "expected key=value"),
    ("[g]\na ansible_port=99999\n", 2, "not a port number"),
    ("[g]\na ansible_become=true ansible_become_method=su\n", 2, "sudo -n"),
    ("[g]\na ansible_ssh_common_args='-o ProxyCommand=nc %h'\n", 2, "ProxyCommand"),
    ("[g]\na ansible_connection=docker\n", 2, "over SSH only"),
    ("[g:vars]\nansible_host_key_checking=False\n[g]\na\n", 2, "--accept-new-host-key"),
])
def test_bad_ini_is_one_line_naming_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = tmp_path / "inv.ini"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_inventory(path)
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_extensionless_file_is_yaml_or_ini_as_ansible_tries_them(tmp_path: Path) -> None:
    ini, yml = tmp_path / "a" / "hosts", tmp_path / "b" / "hosts"
    ini.parent.mkdir(), yml.parent.mkdir()
    ini.write_text("[web]\nw1\n")
    yml.write_text("web:\n  hosts:\n    w1:\n")
    assert [b.name for b in select(load_inventory(ini), None)] == ["w1"]
    assert [b.name for b in select(load_inventory(yml), None)] == ["w1"]


@pytest.mark.parametrize("value, jump", [
    ("-o ProxyJump=bastion", "bastion"), ("-J admin@gw:2222", "admin@gw:2222"), ("-Jgw1,gw2", "gw1,gw2"),
    ("-o 'ProxyJump gw' -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes", "gw"), ("-o ProxyJump=none", None),
    ("-J first -o ProxyJump=second", "first"), ("-o ProxyJump=none -J gw", None),  # the first wins, as OpenSSH
])
def test_ssh_args_give_the_jump_host(tmp_path: Path, value: str, jump: str | None) -> None:
    path = tmp_path / "inv.yml"
    path.write_text(f"g:\n  hosts:\n    a:\n      ansible_ssh_extra_args: {json.dumps(value)}\n")
    (b,) = select(load_inventory(path), None)
    assert b.proxy_jump == jump


@pytest.mark.parametrize("value, message", [
    ("-o StrictHostKeyChecking=accept-new", "--accept-new-host-key"),
    ("-o UserKnownHostsFile=/dev/null", "never turns host-key checking off"),
    ("-o ControlMaster=auto", "-o ControlMaster: an ssh option rkdet does not understand"),
    ("-v", "'-v': an ssh argument rkdet does not understand"),
    ("-o ProxyJump=-oProxyCommand=x", "must not start with '-'"),
])
def test_ssh_args_rkdet_does_not_understand_are_refused_by_name(tmp_path: Path, value: str, message: str) -> None:
    path = tmp_path / "inv.yml"
    path.write_text(f"g:\n  hosts:\n    a:\n      ansible_ssh_common_args: {json.dumps(value)}\n")
    with pytest.raises(InputError, match=re.escape(message)) as err:
        load_inventory(path)
    assert str(err.value).startswith(f"{path}:4: ansible_ssh_common_args")


def test_become_and_rkdet_sudo(tmp_path: Path) -> None:
    path = tmp_path / "inv.yml"
    path.write_text("g:\n  hosts:\n    a: {ansible_become: 'yes'}\n    b: {ansible_become: true, rkdet_sudo: false}\n")
    with pytest.raises(InputError, match=r":4: rkdet_sudo false disagrees with ansible_become true"):
        load_inventory(path)
    path.write_text("g:\n  hosts:\n    a: {ansible_become: 'yes', ansible_become_method: sudo, ansible_become_user: root}\n"
                    "    b: {ansible_become: false, ansible_become_method: su}\n")
    assert [b.sudo for b in select(load_inventory(path), None)] == [True, False]


# ---- untrusted files ---------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["native", "ansible"])
def test_a_fifo_inventory_is_refused_not_waited_on(tmp_path: Path, engine: str, ansible_program: Path) -> None:
    fifo = tmp_path / "hosts.yml"
    os.mkfifo(fifo)
    res = CliRunner().invoke(main, ["fleet", "hosts", "--inventory", str(fifo), "--inventory-engine", engine])
    assert res.exit_code == 2
    assert res.output == f"rkdet: {fifo}: not a regular file (a FIFO, socket or device); pass the inventory file itself\n"
    with pytest.raises(InputError, match="not a regular file"):
        load_inventory(fifo)


def test_a_fifo_in_group_vars_is_refused(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    os.mkfifo(tmp_path / "group_vars" / "g.yml")
    path = tmp_path / "inv.ini"
    path.write_text("[g]\na\n")
    with pytest.raises(InputError, match=r"group_vars/g.yml: not a regular file"):
        load_inventory(path)


def test_scripts_and_folders_are_left_to_ansible_core(tmp_path: Path) -> None:
    script = tmp_path / "inventory.py"
    script.write_text("#!/bin/sh\ntouch \"$(dirname \"$0\")/ran\"\necho '{}'\n")
    script.chmod(0o755)
    with pytest.raises(InputError, match=r"inventory.py: an executable inventory \(a program Ansible would run\); "
                                         r"rkdet runs inventory programs only when asked: --inventory-programs"):
        load_inventory(script)
    assert not (tmp_path / "ran").exists()
    with pytest.raises(InputError, match="a folder of inventory sources is read by ansible-core only"):
        load_inventory(tmp_path)


def test_ansible_core_reads_a_folder_of_sources_and_a_script(tmp_path: Path, ansible_program: Path) -> None:
    folder = tmp_path / "inventory"
    folder.mkdir()
    (folder / "a.ini").write_text("[web]\nw1 ansible_port=2201\n")
    (folder / "b.yml").write_text("db:\n  hosts:\n    d1:\n      ansible_become: true\n")
    res = CliRunner().invoke(main, ["fleet", "hosts", "--inventory", str(folder), "--json"],
                             env={"RKDET_INVENTORY_ENGINE": "auto"})
    assert res.exit_code == 0, res.output
    got = {b["name"]: (b["port"], b["sudo"]) for b in json.loads(res.output)["boards"]}
    assert got == {"w1": (2201, None), "d1": (None, True)}
    script = tmp_path / "dyn.sh"
    script.write_text("#!/bin/sh\necho '{\"lab\": {\"hosts\": [\"s1\"], \"vars\": {\"ansible_user\": \"rock\"}}}'\n")
    script.chmod(0o755)
    setup = ansible_engine.Setup(programs_allowed=True)
    (b,) = select(ansible_engine.load(ansible_program, script, None, setup=setup), None)
    assert setup.programs == [script]
    assert (b.name, b.user, b.groups) == ("s1", "rock", ("lab",))


def test_merge_keys_and_aliases_are_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "inv.yml"
    path.write_text("g:\n  hosts:\n    a:\n      <<: {ansible_user: x}\n")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:4: YAML merge key `<<:` is not supported"):
        load_inventory(path)
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "a.yml").write_text("base: &b {x: 1}\nmore: *b\n")
    path.write_text("g:\n  hosts:\n    a:\n")
    with pytest.raises(InputError, match=r"host_vars/a.yml:2: YAML alias \*b"):
        load_inventory(path)


# ---- the ansible-core engine -------------------------------------------------------------------


def test_fleet_hosts_says_which_engine_read_the_inventory(tmp_path: Path, ansible_program: Path) -> None:
    path = write_lab(tmp_path, "ini")
    runner = CliRunner()
    got = {}
    for engine in ("ansible", "native"):
        res = runner.invoke(main, ["fleet", "hosts", "--inventory", str(path), "--limit", "staging", "--json",
                                   "--inventory-engine", engine])
        assert res.exit_code == 0, res.output
        got[engine] = json.loads(res.output)
    assert got["ansible"]["engine"].startswith("ansible-core 2.19.")
    assert got["native"]["engine"].startswith("native")
    assert got["ansible"]["boards"] == got["native"]["boards"]
    res = runner.invoke(main, ["fleet", "hosts", "--inventory", str(path), "--inventory-engine", "ansible"],
                        env={"COLUMNS": "250"})
    assert "inventory read by ansible-core 2.19." in res.output


def test_engine_ansible_without_ansible_core_is_one_line(tmp_path: Path) -> None:
    path = write_lab(tmp_path, "ini")
    res = CliRunner().invoke(main, ["fleet", "hosts", "--inventory", str(path), "--inventory-engine", "ansible"],
                             env={"RKDET_ANSIBLE_VENV": str(tmp_path / "none"), "RKDET_ANSIBLE_INVENTORY": None})
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "ansible-core not found" in res.output and ".ci/setup" in res.output
    res = CliRunner().invoke(main, ["fleet", "hosts", "--inventory", str(path)],  # auto: the native reader
                             env={"RKDET_ANSIBLE_VENV": str(tmp_path / "none"), "RKDET_ANSIBLE_INVENTORY": None,
                                  "RKDET_INVENTORY_ENGINE": None})
    assert res.exit_code == 0 and "native" in res.output
    res = CliRunner().invoke(main, ["fleet", "hosts", "--inventory", str(path)],
                             env={"RKDET_ANSIBLE_INVENTORY": str(tmp_path / "nope")})
    assert res.exit_code == 2 and "RKDET_ANSIBLE_INVENTORY" in res.output


def test_engine_refusal_names_ansibles_reason(tmp_path: Path, ansible_program: Path) -> None:
    path = tmp_path / "inv.yml"
    path.write_text("lab:\n  hosts:\n    - a\n")
    with pytest.raises(InputError, match=r"ansible-inventory refused it \(.*yaml: Invalid \"hosts\" entry") as err:
        ansible_engine.load(ansible_program, path, None)
    assert "\n" not in str(err.value)


# ---- parity: the native reader and ansible-core, the same lab, >= 30 patterns ---------------------


def _outcome(fn) -> tuple[str, object]:  # type: ignore[no-untyped-def]
    try:
        return "ok", [b.to_json() for b in fn()]
    except InputError as err:
        text = str(err)
        m = re.search(r"select(?:s)? (nothing|\d+ hosts?: [^)]*)\)", text)
        if "matches no group or host" in text and m:
            return "no-match", m.group(1)  # the refusal says what Ansible selects: compared too
        if "subscript" in text or "No hosts matched the subscripted pattern" in text:
            return "bad-subscript", None
        if "selects no host" in text:
            return "empty", None
        return "refused", text


# The YAML lab is the INI lab written the other way: what the format changes is how groups, children and
# variables are read, so YAML runs every group and host name once and each kind of outcome; the selection
# grammar (>= 30 patterns) runs on the INI lab. One ansible-inventory run per pattern is the cost.
YAML_PATTERNS = ["all", "rk3588", "rk3568", "lab", "staging", "ungrouped", "bastion", "shelf", "rk01.lab",
                 "lab:!staging", "staging:&rk3568", "rk3588[1:2]", "rk3588[9]", "nosuch"]


@pytest.mark.parametrize("kind", ["ini", "yaml"])
def test_native_and_ansible_core_agree(tmp_path: Path, kind: str, ansible_program: Path) -> None:
    path = write_lab(tmp_path, kind)
    assert len(PATTERNS) >= 30 and set(YAML_PATTERNS) <= set(PATTERNS)
    native_inv = load_inventory(path)
    patterns = [None, *(PATTERNS if kind == "ini" else YAML_PATTERNS)]

    def both(pattern: str | None) -> tuple[tuple[str, object], tuple[str, object]]:
        native = _outcome(lambda: select(native_inv, pattern))
        ansible = _outcome(lambda: select(ansible_engine.load(ansible_program, path, pattern), None))
        return native, ansible

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(both, patterns))
    differ = [(p, n, a) for p, (n, a) in zip(patterns, results) if n != a]
    assert not differ, "\n".join(f"{p!r}:\n  native  {n}\n  ansible {a}" for p, n, a in differ)
    kinds = {n[0] for n, _ in results}
    assert kinds >= {"ok", "no-match", "bad-subscript"}  # the lab exercises every outcome
    assert sum(1 for n, _ in results if n[0] == "ok") >= (30 if kind == "ini" else 10)


# ---- the engine's output is bounded (a stand-in program plays a misbehaving ansible-inventory) ----


@pytest.mark.parametrize("body, message", [
    ("exec sleep 30", "no answer within 0.5 s"),
    ("python3 -c 'print(\"[\" * 500 + \"]\" * 500)'", "nested deeper than 64"),
    ("python3 -c 'print(\"{\\\"_meta\\\": 1, \\\"x\\\": \\\"\" + \"a\" * 3000 + \"\\\"}\")'", "printed more than"),
    ("echo 'not json'", "printed no readable JSON"),
    ("echo '[WARNING]: Failed to parse inventory with '\"'\"'ini'\"'\"' plugin: bad line 3' >&2; exit 1",
     "refused it (ini: bad line 3)"),
])
def test_engine_output_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, message: str) -> None:
    program = tmp_path / "bin" / "ansible-inventory"
    program.parent.mkdir()
    program.write_text(f"#!/bin/sh\n{body}\n")
    program.chmod(0o755)
    monkeypatch.setattr(ansible_engine, "MAX_OUTPUT", 2048)
    inv = tmp_path / "inv.ini"
    inv.write_text("[g]\na\n")
    with pytest.raises(InputError, match=re.escape(message)) as err:
        ansible_engine.load(program, inv, None, timeout=0.5 if "sleep" in body else 120)
    assert str(err.value).startswith(f"{inv}: ") and "\n" not in str(err.value)


def test_the_inventorys_jump_host_wins_over_ssh_config(tmp_path: Path) -> None:
    from rkdet.link.target import resolve_target

    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host b\n  ProxyJump other\n")
    assert resolve_target("b", ssh_config=cfg, system_known_hosts=None).proxy_jump == "other"
    assert resolve_target("b", ssh_config=cfg, system_known_hosts=None, proxy_jump="gw").proxy_jump == "gw"
