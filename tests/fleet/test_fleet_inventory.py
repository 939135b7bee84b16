"""Ansible YAML inventories, --limit patterns and ~/.ssh/config name lists -> FleetBoard records."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from rkdet.cli import main
from rkdet.errors import InputError
from rkdet.fleets.sources.inventory import FleetBoard, boards_from_names, load_inventory, read_boards_file, select
from rkdet.fleets.sources.patterns import evaluate

REPO = Path(__file__).resolve().parents[2]

LAB = """\
all:
  vars:
    ansible_user: root
    rkdet_workdir: /opt/rkdet
    rkdet_sudo: false
  hosts:
    lone:
      ansible_host: 192.168.1.9
  children:
    rk3588:
      vars:
        rkdet_soc: rk3588
        ansible_user: linaro
      children:
        rock5:
          vars:
            ansible_user: rock
          hosts:
            rock5-a:
              ansible_host: 10.0.0.5
              ansible_port: 2222
              ansible_ssh_private_key_file: ~/.ssh/lab key
              rkdet_tags: [vendor-radxa, nightly]
            rock5-b:
        orangepi:
          hosts:
            opi5-a:
              rkdet_sudo: true
              unknown_key: ignored
    rk3568:
      vars:
        rkdet_soc: RK3568
        rkdet_tags: "vendor-firefly, nightly"
      hosts:
        roc-a:
          ansible_port: "2200"
        rock5-b:
    staging:
      hosts:
        rock5-a:
        roc-a:
"""


def write(tmp_path: Path, text: str, name: str = "inventory.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    return write(tmp_path, LAB)


def boards(path: Path, limit: str | None = None) -> dict[str, FleetBoard]:
    return {b.name: b for b in select(load_inventory(path), limit)}


# ---- groups, children, precedence --------------------------------------------------------------


def test_groups_and_nested_children_give_every_host_its_groups(lab: Path) -> None:
    got = boards(lab)
    assert list(got) == ["lone", "rock5-a", "rock5-b", "opi5-a", "roc-a"]  # order of first appearance
    assert got["rock5-a"].groups == ("rk3588", "staging", "rock5")  # by depth, then name
    assert got["rock5-b"].groups == ("rk3568", "rk3588", "rock5")
    assert got["opi5-a"].groups == ("rk3588", "orangepi")
    assert got["lone"].groups == ()


def test_var_precedence_host_over_child_over_parent_over_all(lab: Path) -> None:
    got = boards(lab)
    assert got["lone"].user == "root"  # only `all` sets it
    assert got["opi5-a"].user == "linaro"  # parent group rk3588 over all
    assert got["rock5-b"].user == "rock"  # child group rock5 (depth 2) over its parent rk3588 (depth 1)
    assert got["opi5-a"].sudo is True and got["lone"].sudo is False  # host var over all
    assert got["rock5-a"].tags == ("vendor-radxa", "nightly")  # host var over nothing
    # rock5-b is in rk3568 (depth 1) and rock5 (depth 2): the deeper group's soc is unset, rk3568 and
    # rk3588 have the same depth, so the later name (rk3588) wins, as in Ansible
    assert got["rock5-b"].soc == "rk3588"
    assert got["roc-a"].soc == "rk3568" and got["roc-a"].tags == ("vendor-firefly", "nightly")


def test_connection_vars_become_the_board_record(lab: Path) -> None:
    a = boards(lab)["rock5-a"]
    assert (a.address, a.port, a.user, a.key_file, a.soc, a.workdir) == (
        "10.0.0.5", 2222, "rock", "~/.ssh/lab key", "rk3588", "/opt/rkdet")
    roc = boards(lab)["roc-a"]
    assert (roc.address, roc.port) == ("roc-a", 2200)  # no ansible_host: the name; a quoted port is read
    assert a.to_json()["groups"] == ["rk3588", "staging", "rock5"]


# ---- --limit patterns --------------------------------------------------------------------------


@pytest.mark.parametrize("pattern, expected", [
    ("rk3588", ["rock5-a", "rock5-b", "opi5-a"]),  # a group with its children's hosts
    ("rock5", ["rock5-a", "rock5-b"]),
    ("roc-a", ["roc-a"]),  # a host
    ("all", ["lone", "rock5-a", "rock5-b", "opi5-a", "roc-a"]),
    ("*", ["lone", "rock5-a", "rock5-b", "opi5-a", "roc-a"]),
    ("rock5-*", ["rock5-a", "rock5-b"]),  # a glob over host names
    ("rk35*", ["rock5-a", "rock5-b", "opi5-a", "roc-a"]),  # a glob over group names
    ("orangepi:rk3568", ["rock5-b", "opi5-a", "roc-a"]),  # union, listed in the inventory's order
    ("orangepi,lone", ["lone", "opi5-a"]),  # comma form
    ("rk3588:!rock5-b", ["rock5-a", "opi5-a"]),  # exclusion
    ("rk3588:&staging", ["rock5-a"]),  # intersection
    ("!rk3588", ["lone", "roc-a"]),  # only a modifier: starts from all
    # Ansible applies plain terms first, then &, then !, whatever the order written
    ("!rock5-a:rk3588:&staging", []),
    ("!rock5-b:rk3568", ["roc-a"]),
])
def test_limit_patterns(lab: Path, pattern: str, expected: list[str]) -> None:
    assert evaluate(load_inventory(lab), pattern) == expected


def test_limit_term_matching_nothing_is_refused(lab: Path) -> None:
    with pytest.raises(InputError, match=r"--limit term '!rk3588x' matches no group or host \(Ansible would warn, "
                                         r"ignore it and select 5 hosts: lone, rock5-a"):
        evaluate(load_inventory(lab), "all:!rk3588x")  # a typo must not deploy to the board it meant to spare
    with pytest.raises(InputError, match="selects no host"):
        select(load_inventory(lab), "rock5:&rk3568:!rock5-b")
    assert evaluate(load_inventory(lab), "~rock.*") == ["rock5-a", "rock5-b"]  # a regex, matched at the start


# ---- bad files: one line naming FILE:LINE ------------------------------------------------------


@pytest.mark.parametrize("text, line, message", [
    ("- a\n- b\n", 1, "must be a mapping of group names"),
    ("just words\n", 1, "must be a mapping of group names"),
    ("lab:\n  hosts:\n    - rock5-a\n    - rock5-b\n", 3, "hosts must be a mapping, not a list"),
    ("lab:\n  hosts:\n    rock5-a:\n      ansible_port: 70000\n", 4, "ansible_port '70000' is not a port number"),
    ("lab:\n  hosts:\n    rock5-a:\n      ansible_port: ssh\n", 4, "ansible_port 'ssh' is not a port number"),
    ("lab:\n  hosts:\n    rock5-a:\n      ansible_port: true\n", 4, "is not a port number"),
    ("lab: 5\n", 1, "group 'lab' must be a mapping"),
    ("lab:\n  - rock5-a\n", 2, "group 'lab' must be a mapping"),
    ("lab:\n  vars: [a, b]\n", 2, "vars must be a mapping, not a list"),
    ("lab:\n  children: rock5\n", 2, "children must be a mapping, not a single value"),
    ("lab:\n  hosts:\n    a:\n    a:\n", 4, "'a' appears twice (first on line 3)"),
    ("lab:\n  vars:\n    rkdet_soc: [rk3588]\n  hosts: {a: }\n", 3, "rkdet_soc must be a single value"),
    ("lab:\n  vars:\n    rkdet_sudo: maybe\n  hosts: {a: }\n", 3, "rkdet_sudo must be true or false"),
    ("lab:\n  hosts:\n    a:\n      ansible_host: '{{ lookup(\"x\") }}'\n", 4, "templates"),
    ("lab:\n  hosts:\n    a:\n      ansible_host: \"10.0.0.1 -oProxyCommand=x\"\n", 4, "holds spaces"),
    ("lab:\n  hosts:\n    a:\n      ansible_user: -oProxyCommand=x\n", 4, "must not start with '-'"),
    ("lab:\n  hosts:\n    'web[09:01]':\n", 3, "a range must have begin <= end"),
    ("lab:\n  hosts:\n    'web[01:9]':\n", 3, "same width"),
    ("lab:\n  hosts: {a: }\n  host: {b: }\n", 3, "key 'host' is not hosts, vars or children"),
    ("lab:\n  vars:\n    <<: {ansible_user: x}\n", 3, "YAML merge key `<<:` is not supported"),
    ("lab:\n  hosts:\n    a:\n      ansible_become: true\n      ansible_become_method: su\n", 5, "ansible_become_method 'su'"),
    ("lab:\n  hosts:\n    a:\n      ansible_ssh_common_args: -o StrictHostKeyChecking=no\n", 4, "--accept-new-host-key"),
    ("lab:\n  hosts:\n    a:\n      ansible_ssh_host_key_checking: false\n", 4, "never turns host-key checking off"),
    ("lab:\n  hosts:\n    a:\n      ansible_ssh_extra_args: -o ServerAliveInterval=5\n", 4, "-o ServerAliveInterval"),
    ("lab:\n  hosts:\n    a:\n      ansible_password: hunter2\n", 4, "keys only"),
    ("lab:\n  hosts: {a: }\n  vars: {x: 1\n", 4, "not valid YAML"),
])
def test_bad_structure_names_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_inventory(path)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_children_cycle_is_refused_naming_the_edge(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        lab:
          children:
            rack1:
              children:
                shelf:
        shelf:
          children:
            lab:
        """)
    with pytest.raises(InputError) as err:
        load_inventory(path)
    assert str(err.value).startswith(f"{path}:8: ")
    assert "a cycle" in str(err.value)


def test_yaml_bombs_are_bounded(tmp_path: Path) -> None:
    laughs = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    path = write(tmp_path, "\n".join(laughs) + "\n")
    with pytest.raises(InputError, match=rf"^{path}:2: YAML alias \*a: aliases are not accepted"):
        load_inventory(path)
    many = write(tmp_path, "lab:\n  hosts:\n" + "".join(f"    h{i}:\n" for i in range(250_000)), "many.yaml")
    with pytest.raises(InputError, match=rf"^{many}:100000: more than 200000 YAML nodes"):
        load_inventory(many)  # counted on the event stream, before any node is built
    big = write(tmp_path, "lab:\n  vars:\n    x: '" + "y" * (5 << 20) + "'\n", "big.yaml")
    with pytest.raises(InputError, match=rf"^{big}: larger than 4096 KiB"):
        load_inventory(big)


def test_unknown_vars_and_empty_groups_are_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        lab:
          hosts:
            a:
              ansible_connection: ssh
              foo: {bar: [1, 2]}
        empty:
        """)
    (b,) = select(load_inventory(path), None)
    assert (b.name, b.address, b.groups) == ("a", "a", ("lab",))


# ---- ~/.ssh/config names -----------------------------------------------------------------------


def test_board_names_and_boards_file(tmp_path: Path) -> None:
    names = tmp_path / "boards.txt"
    names.write_text("# lab A\nrock5-a\n\n  roc-a   # the old one\nroot@10.0.0.7:2222\n")
    got = boards_from_names(read_boards_file(names))
    assert [(b.name, b.address, b.port, b.source) for b in got] == [
        ("rock5-a", "rock5-a", None, "ssh-config"), ("roc-a", "roc-a", None, "ssh-config"),
        ("root@10.0.0.7:2222", "root@10.0.0.7:2222", None, "ssh-config")]
    names.write_text("a\nb\na\n")
    with pytest.raises(InputError, match=rf"^{names}:3: board 'a' is named twice \(also {names}:1\)"):
        boards_from_names(read_boards_file(names))
    names.write_text("a\n-oProxyCommand=x\n")
    with pytest.raises(InputError, match=rf"^{names}:2: .*must not start with '-'"):
        boards_from_names(read_boards_file(names))
    names.write_text("# nothing\n")
    with pytest.raises(InputError, match="names no board"):
        read_boards_file(names)


# ---- the command -------------------------------------------------------------------------------


def test_hosts_command_json_and_table(lab: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["fleet", "hosts", "--inventory", str(lab), "--limit", "rk3588:&staging", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "rkdet.fleet.hosts/1"
    assert [b["name"] for b in doc["boards"]] == ["rock5-a"]
    assert doc["boards"][0]["port"] == 2222
    res = runner.invoke(main, ["fleet", "hosts", "--board", "rock5-a", "--board", "roc-a"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert "2 boards" in res.output and "rock5-a" in res.output and "roc-a" in res.output


def test_hosts_table_prints_names_literally(tmp_path: Path) -> None:
    path = write(tmp_path, '"[red]lab[/red]\\e]0;pwned\\a":\n  hosts:\n    rock5:\n      ansible_user: "[bold]rock5[/bold]"\n')
    res = CliRunner().invoke(main, ["fleet", "hosts", "--inventory", str(path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "[bold]rock5[/bold]" in res.output  # markup shown, not applied
    assert "[red]lab[/red]\\x1b]0;pwned\\x07" in res.output  # control characters shown as escapes
    assert "\x1b" not in res.output and "\x07" not in res.output
    raw = write(tmp_path, "lab:\n  hosts:\n    a\x1b[31m:\n", "raw.yaml")
    with pytest.raises(InputError, match=rf"^{raw}:3: not valid YAML \(character U\+001B is not allowed"):
        load_inventory(raw)  # a raw escape byte is not YAML at all


def test_usage_mistakes_exit_2_in_one_line(lab: Path) -> None:
    runner = CliRunner()
    for args, text in ((["--inventory", str(lab), "--board", "x"], "give one board source"),
                       ([], "give one board source"),
                       (["--board", "x", "--limit", "all"], "--limit selects from an inventory")):
        res = runner.invoke(main, ["fleet", "hosts", *args])
        assert res.exit_code == 2 and text in res.output, res.output


def test_bad_inventory_from_the_real_cli_is_one_line_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, "lab:\n  hosts:\n    - a\n")
    done = subprocess.run([sys.executable, "-m", "rkdet.cli", "fleet", "hosts", "--inventory", str(path),
                           "--inventory-engine", "native"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2
    assert done.stderr == f"rkdet: {path}:3: group 'lab' hosts must be a mapping, not a list\n"
    assert done.stdout == ""
