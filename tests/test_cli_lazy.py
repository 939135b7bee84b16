"""The `rkdet` command table: every command is imported only when it runs, and is the command it names."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from rkdet.cli import COMMANDS, main
from rkdet.cli.fleet import fleet_group


def test_every_entry_loads_the_command_it_names() -> None:
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name
    assert fleet_group.get_command(click.Context(fleet_group), "deploy").name == "deploy"


_PROBE = """
import json, sys
from rkdet.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith("rkdet."))))
"""


def _imported(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120,
                          check=True)
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_a_command_imports_its_own_area_only() -> None:
    diff = _imported("diff", "--help")
    assert "rkdet.cli.diff" in diff
    assert not {m for m in diff if m.startswith(("rkdet.convert", "rkdet.fleets", "rkdet.emulator", "rkdet.cli.deploy"))}
    version = _imported("--version")
    assert not {m for m in version if m.startswith("rkdet.cli.") and m != "rkdet.cli.lazy"}


def test_an_unknown_command_is_clicks_usage_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "rkdet.cli", "dploy"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 2 and "No such command 'dploy'" in proc.stderr and "Traceback" not in proc.stderr
