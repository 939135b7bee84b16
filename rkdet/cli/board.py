"""`rkdet deploy` and `rkdet board info|pin|restore`: the click commands (parse, connect, call, report)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click
from rich.text import Text

from rkdet.config import DEFAULT_CONFIG, build_deploy_settings, load_config
from rkdet.errors import EXIT_OK, BoardError, InputError
from rkdet.log import log_console
from rkdet.textsafe import literal
from rkdet.cli.options import connection_options
from rkdet.link.connect import ConnectionOptions, open_connection
from rkdet.link.shell import SELFCHECK_S
from rkdet.deploy.settings import settings_source

if TYPE_CHECKING:
    from rkdet.deploy.flow import DeployOutcome
    from rkdet.deploy.request import DeployRequest


def run_deploy(request: DeployRequest, *, resume: bool = False, install_selfcheck: bool = False,
               as_json: bool = False) -> DeployOutcome:
    """Run a build on a board, pinned, judge the results and print the verdict; returns the outcome
    (the caller records it and exits with its code)."""
    from rkdet.records.build import BuildInfo
    from rkdet.deploy.flow import Deployment, board_label
    from rkdet.deploy.deploy_state import latest_unfinished, load_record
    from rkdet.deploy.settings import RunSettings

    console = log_console()

    def log(message: str) -> None:  # deploy's messages carry board-sourced names (SoC, paths)
        console.log(literal(message))

    build, config_path, out, flags = request.build, request.config_path, request.out, request.run
    allow_failed_build = request.allow_failed_build
    given_build = build
    if build is not None and config_path is None and not resume:
        BuildInfo.check(build)  # a wrong --build is exit 2 naming the folder, before reading its settings
    if resume and build is None and config_path is None:  # judged by the build that run was of (below)
        chosen, build = settings_source(None, None) if DEFAULT_CONFIG.is_file() else (None, None)
    else:
        chosen, build = settings_source(config_path, build)
    request.check_fault()
    if not resume:  # after the config's own errors (and the default build); all before any connection:
        info = BuildInfo.load(build)  # a crafted manifest (a fingerprint that is a path) is exit 2 here
        if install_selfcheck and info.origin == "imported":
            raise InputError(f"{build}: an imported .rknn has no reference outputs, so no self-check bundle "
                             "(rkdet-selfcheck compares with expected outputs): deploy it without --install-selfcheck")
        # a build that failed a gate: refused before any connection unless --allow-failed-build
        info.refuse_failed("deploy --install-selfcheck" if install_selfcheck else "deploy", allow_failed_build)
    with open_connection(request.connection) as conn:
        if resume:  # judged against the build that run was of (recorded), unless --build says otherwise
            folder = latest_unfinished(out, board_label(conn.target.label))
            if given_build is None:
                recorded = load_record(folder).get("build")
                if not recorded and build is None:
                    raise InputError(f"{folder}: the run's build folder is not recorded; pass --build")
                build = Path(recorded or build)
                if chosen is None:
                    chosen = build_deploy_settings(build)
        assert chosen is not None and build is not None
        log(f"settings (run, board, tolerances) from {chosen.source}")
        settings = RunSettings.from_config(chosen, flags)
        deployment = Deployment(conn, build, out, settings, log=log, progress=console.is_terminal,
                                allow_failed_build=allow_failed_build)
        outcome = deployment.resume(folder) if resume else deployment.run()
        if install_selfcheck:
            _install_selfcheck(conn, build, outcome, settings.backend, log, allow_failed_build)
    for warning in outcome.warnings:
        console.print(Text.assemble(("warning", "yellow"), ": ", literal(warning)))
    if outcome.emulated:
        source = ("the build's RKNN simulator outputs (emulated NPU mode)" if flags.emulate_npu is not None
                  else "onnxruntime on CPU")
        console.print(f"[magenta]EMULATED[/]: outputs come from the rkdet emulator ({source}), not an NPU")
    colour = "green" if outcome.exit_code == EXIT_OK else "red"
    for line in outcome.verdict_lines:
        style = "" if line.startswith("stack: ") else "green" if ": YES " in line else "red"
        console.print(literal(line, style), soft_wrap=True)
    console.print(literal(outcome.verdict, colour))
    restored = "not pinned" if not settings.pin else {True: "yes", False: "NO"}.get(outcome.restored, "unknown")
    console.print(Text.assemble("results: ", literal(outcome.folder), "  (report.html, report.json)  "
                  f"sent {outcome.transfer.bytes_sent} B, skipped {outcome.transfer.files_skipped} unchanged file(s); "
                  f"board restored: {restored}"))
    if as_json:
        click.echo(json.dumps(outcome.record, indent=2, sort_keys=True))
    return outcome


def _install_selfcheck(conn: Any, build: Path, outcome: DeployOutcome, backend: str, log: Callable[[str], None],
                       allow_failed_build: bool = False) -> None:
    """--install-selfcheck: after a passing deploy, the build's self-check into <workdir>/selfcheck, run once."""
    from rkdet.deploy.selfcheck_install import install_selfcheck

    if outcome.exit_code != EXIT_OK or outcome.record.get("status") != "complete":
        outcome.warnings.append("self-check not installed: the deploy did not pass")
        return
    remote = f"{outcome.record['remote']['workdir']}/selfcheck"
    done = install_selfcheck(conn, build, remote, emulated=outcome.emulated, backend=backend,
                             allow_failed_build=allow_failed_build)
    res = conn.run(done.command, check=False, timeout=SELFCHECK_S)
    line = (res.out.strip() or res.err.strip()).splitlines()[-1:] or [f"exit {res.rc}, no output"]
    if res.rc != 0:
        raise BoardError(f"{conn.target.label}: the self-check installed in {remote} failed on its first run "
                         f"(exit {res.rc}): {line[0][:300]}")
    log(f"self-check installed in {remote} and run once: {line[0][:300]}")
    log(f"for a systemd unit (docs/SELFCHECK.md): ExecStartPre={done.command_line}")


@click.group("board")
def board_group() -> None:
    """Inspect a board, or pin/restore its clocks by hand."""


def _board_script(conn_opts: dict[str, Any], name: str, workdir: str | None, state_dir: str | None,
                  extra_env: dict[str, str] | None = None) -> tuple[str, list]:
    """Connect, push the board scripts, run one of them; return the board's label and the script's records."""
    from rkdet.deploy.layout import scripts_dir
    from rkdet.boardinfo.remote_scripts import run_board_script, state_dir_for
    from rkdet.deploy.stage import push_scripts

    sudo = bool(conn_opts.get("sudo"))
    with open_connection(ConnectionOptions.from_options(conn_opts)) as conn:
        wd = conn.abspath(workdir) if workdir else conn.default_workdir()
        push_scripts(conn, scripts_dir(wd))
        env = {"RKDET_WORK_DIR": wd, "RKDET_STATE_DIR": state_dir_for(conn, wd, sudo, state_dir), **(extra_env or {})}
        _, records = run_board_script(conn, name, scripts_dir(wd), env, sudo)
        return conn.target.label, records


@board_group.command("info")
@connection_options
@click.option("--workdir", default=None, help="Remote work dir for the scripts.")
@click.option("--state-dir", default=None, help="Remote pin state dir, where the board lock is (default as for deploy).")
def board_info(workdir: str | None, state_dir: str | None, **conn_opts: Any) -> None:
    """Probe the board and print what it is (JSON lines from probe.sh); the board lock's holder (or "free")
    goes to stderr as one line."""
    from rkdet.boardinfo.lock import probe_lock
    from rkdet.boardinfo.remote_scripts import parse_probe_of

    label, records = _board_script(conn_opts, "probe", workdir, state_dir)
    report = parse_probe_of(label, records)
    report.raise_for_status(label)
    click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    log_console().print(Text.assemble("board lock: ", literal(probe_lock(records, label).line())), soft_wrap=True)


@board_group.command("pin")
@connection_options
@click.option("--config", "config_path", type=click.Path(path_type=Path), default="configs/yolov8.yaml", show_default=True,
              help="Config whose board section says what to pin.")
@click.option("--workdir", default=None, help="Remote work dir for the scripts (default as for deploy).")
@click.option("--state-dir", default=None, help="Remote pin state dir; restore must be given the same one.")
def board_pin(config_path: Path, workdir: str | None, state_dir: str | None, **conn_opts: Any) -> None:
    """Pin the board profile and leave it pinned (restore with `rkdet board restore`)."""
    from rkdet.boardinfo import scripts as board_scripts
    from rkdet.deploy.settings import pin_env_from_config

    cfg = load_config(config_path)
    label, records = _board_script(conn_opts, "pin", workdir, state_dir, pin_env_from_config(cfg.board))
    report = board_scripts.parse_pin(records)
    for knob in report.knobs:
        click.echo(f"{knob.status:8} {knob.knob} {knob.actual or ''} {knob.reason or ''}".rstrip())
    if report.exit_code not in (0, 1):
        report.raise_for_status(label)
    click.echo(f"pinned; state saved on the board: run `rkdet board restore --board {conn_opts['board']}` to undo",
               err=True)


@board_group.command("restore")
@connection_options
@click.option("--workdir", default=None, help="Remote work dir for the scripts (default as for deploy).")
@click.option("--state-dir", default=None, help="Remote pin state dir, as given to `rkdet board pin`.")
def board_restore(workdir: str | None, state_dir: str | None, **conn_opts: Any) -> None:
    """Write back exactly the values saved by pin (idempotent)."""
    from rkdet.boardinfo import scripts as board_scripts
    label, records = _board_script(conn_opts, "restore", workdir, state_dir)
    report = board_scripts.parse_restore(records)
    report.raise_for_status(label)
    click.echo(report.note or f"restored {len(report.knobs)} value(s)")
