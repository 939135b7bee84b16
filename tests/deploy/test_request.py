"""The deploy request: the shared flags parsed once into typed records (ConnectionOptions, RunOverrides,
DeployRequest), the same for `rkdet deploy` and `rkdet fleet deploy`, and no signature piling them up again."""

from __future__ import annotations

import ast
from pathlib import Path

import click
import pytest

from rkdet.cli.deploy import deploy_command
from rkdet.cli.fleet_deploy import fleet_deploy_command
from rkdet.cli.options import CONNECTION, DEPLOY
from rkdet.config import BoardSection, DeploySettings, RunSection
from rkdet.deploy.request import DeployRequest
from rkdet.deploy.settings import RunOverrides, RunSettings
from rkdet.errors import InputError
from rkdet.link.connect import ConnectionOptions
from rkdet.tolerance import Tolerance

REPO = Path(__file__).resolve().parents[2]


def _parsed(command: click.Command, argv: list[str]) -> dict:
    ctx = command.make_context(command.name or "x", argv)
    return dict(ctx.params)


def test_deploy_flags_become_one_request() -> None:
    opts = _parsed(deploy_command, ["--board", "rk:2222", "--user", "u", "--sudo", "--repeats", "4",
                                    "--core-mask", "0,1", "--emulator-npu", "2", "--build", "b", "--timeout", "9"])
    req = DeployRequest.from_options(opts)
    assert req.connection == ConnectionOptions(board="rk:2222", user="u")
    assert (req.run.repeats, req.run.core_mask, req.run.sudo, req.run.emulate_npu, req.run.timeout) == \
        (4, "0,1", True, 2, 9.0)
    assert req.build == Path("b") and req.builds == (Path("b"),) and req.out == Path("results")
    default = DeployRequest.from_options(_parsed(deploy_command, ["--board", "h"]))
    assert default.run == RunOverrides() and default.build is None  # nothing given: the config decides


def test_fleet_flags_are_the_same_records() -> None:
    opts = _parsed(fleet_deploy_command, ["--board", "a", "--build", "x", "--build", "y", "--known-hosts", "k",
                                          "--lock-timeout", "5", "--no-pin", "--emulator-fault", '{"bit": 1}'])
    req = DeployRequest.from_options(opts)
    assert req.builds == (Path("x"), Path("y"))
    assert req.connection.known_hosts == Path("k") and req.connection.board == ""  # boards come from the source
    assert (req.run.lock_timeout, req.run.no_pin, req.run.fault) == (5, True, '{"bit": 1}')
    one = req.connection.for_board("10.0.0.7", user="pi", port=2200, proxy_jump="jump")
    assert (one.board, one.user, one.port, one.known_hosts, one.proxy_jump) == ("10.0.0.7", "pi", 2200, Path("k"), "jump")
    assert req.connection.for_board("b").user is None  # the board's own value only where it gives one


def test_shared_flags_have_one_declaration() -> None:
    """Every shared flag fleet deploy takes parses to the same name and type as deploy's (help may differ)."""
    deploy = {p.name: p for p in deploy_command.params}
    fleet = {p.name: p for p in fleet_deploy_command.params}
    shared = (set(CONNECTION) | set(DEPLOY)) & set(fleet)
    assert {"user", "identity", "known_hosts", "sudo", "repeats", "out", "emulator_npu", "lock_timeout"} <= shared
    for name in shared - {"timeout"}:  # fleet's --timeout is at least 1 s
        assert type(fleet[name].type) is type(deploy[name].type), name
        assert fleet[name].default == deploy[name].default, name
    assert fleet["builds"].multiple and fleet["builds"].opts == ["--build"]


def test_bad_fault_json_is_input_error() -> None:
    with pytest.raises(InputError, match="--emulator-fault: not valid JSON"):
        DeployRequest(run=RunOverrides(fault="{nope")).check_fault()


def test_overrides_win_over_the_config() -> None:
    sections = DeploySettings(run=RunSection(repeats=3, core_mask="0_1"), board=BoardSection(sudo=True, workdir="/opt"),
                              tolerances=Tolerance(), source="t")
    s = RunSettings.from_config(sections, RunOverrides(repeats=7, sudo=False))
    assert (s.repeats, s.sudo, s.core_mask, s.workdir) == (7, False, "0_1", "/opt")
    assert RunSettings.from_config(sections) == RunSettings.from_config(sections, RunOverrides())


def test_no_signature_piles_up_parameters() -> None:
    """The 30- and 38-parameter signatures are gone: no function in rkdet takes more than 13 (click
    callbacks with many flags take **options and build the request in one call)."""
    found = []
    for path in (REPO / "rkdet").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                if count > 13:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({count})")
    assert not found, found
