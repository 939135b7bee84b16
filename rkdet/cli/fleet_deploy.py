"""`rkdet fleet deploy`: the single-board deploy on every board of an inventory, a names list or
labgrid places, over a matrix of cells, judged as a fleet (registered under `rkdet fleet` by cli.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from rkdet.config import DEFAULT_CONFIG, RESOLVED_CONFIG
from rkdet.cli.fleet import SOURCE_OPTIONS, resolve_boards, source_options
from rkdet.cli.options import option
from rkdet.deploy.request import DeployRequest
from rkdet.fleets.run.one_board import DeployCommon, load_builds
from rkdet.fleets.run.verdict import run_fleet, write_files
from rkdet.fleets.run.matrix import parse_matrix
from rkdet.fleets.run.records import MatrixCell, FleetResult
from rkdet.fleets.run.scheduler import Schedule
from rkdet.log import log_console
from rkdet.textsafe import literal, plain_value

_PRINT = threading.Lock()


@click.command("deploy")
@source_options
@option("config_path", help=f"Config whose run/board/tolerances apply (default: each build's own {RESOLVED_CONFIG}; "
                            f"without --build, {DEFAULT_CONFIG}).")
@option("build", ("--build", "builds"), multiple=True,
        help="Build folder; repeat with one build per NPU family for a mixed fleet (each board runs the one "
             "its SoC takes).")
@click.option("--matrix", "matrix", multiple=True, metavar="AXIS=V1,V2",
              help="Cells to run on every board: core_mask=auto,0,1,2,0_1,0_1_2 and/or backend=rknnlite,onnxruntime "
                   "(default: the config's one cell). A core mask the SoC lacks is skipped and said.")
@click.option("--forks", type=click.IntRange(min=1, max=256), default=8, show_default=True,
              help="Boards deployed at the same time.")
@click.option("--canary", type=click.IntRange(min=0), default=1, show_default=True,
              help="Boards run first, alone; if all of them fail, no other board is started (0: none).")
@click.option("--max-fail-percent", type=click.FloatRange(min=0, max=100), default=100.0, show_default=True,
              help="Start no new board once more than this share of the boards failed (running ones finish).")
@option("repeats")
@option("warmup")
@option("out", help="Results root: board runs in <out>/<board>/…, the fleet run in <out>/fleet/<fleet-run-id>/.")
@option("workdir", help="Remote work dir when the inventory gives none (rkdet_workdir).")
@option("state_dir", help="Remote pin state dir (default as for deploy).")
@option("no_pin")
@option("keep", help="Keep the run folders on the boards after pulling them.")
@option("timeout", type=click.FloatRange(min=1),
        help="Seconds to wait for each cell's run on a board (a session of N core-mask cells: N times it).")
@click.option("--board-timeout", type=click.FloatRange(min=1), default=7200.0, show_default=True,
              help="Seconds a board may take for all its cells; sessions not started by then fail (the board, exit 3).")
@option("lock_timeout", help="Seconds each session waits while another pinned job holds its board (one board, one "
                             "holder); 0: that board fails at once, naming the holder.")
@option("user", help="Login user for boards the source gives none (ansible_user).")
@option("identity", help="Private key for boards the source gives none (ansible_ssh_private_key_file).")
@option("known_hosts", help="rkdet's known_hosts for boards the source gives none (rkdet_known_hosts; default "
                            "~/.config/rkdet/known_hosts; ~/.ssh/known_hosts is read too).")
@option("ssh_config")
@option("accept_new_host_key", help="Trust unknown host keys on first use and record them.")
@option("sudo", help="Board-side work with `sudo -n` where the source says nothing.")
@option("connect_timeout", help="Seconds for each of TCP connect, SSH banner and authentication, per board.")
@option("sftp_timeout", help="Seconds for each answer of a board's SFTP server.")
@option("emulator_fault", help="TEST CONTROL (emulated boards only): as for `rkdet deploy`, on every board.")
@option("emulator_npu", help="TEST CONTROL (emulated boards only): as for `rkdet deploy`, on every board.")
@option("allow_failed_build",
        help="Run a build that failed a gate at convert (refused otherwise, exit 2); every verdict says so.")
@option("as_json", help="Print fleet.json (schema rkdet.fleet/1) on stdout.")
@click.option("--html", "html_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the report here (it is always in the fleet run's folder, whose relative run links it keeps).")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write JUnit XML: one test case per board × cell, failures carrying the first difference.")
def fleet_deploy_command(**options: Any) -> None:
    """Deploy a build to many boards (`--forks` at a time, a canary first) over a matrix of cells, and
    judge them together: determinism classes (bit-identical outputs for every input), the first
    difference between classes, and drift from the history (<out>/rkdet.db).

    Results: <out>/fleet/<fleet-run-id>/fleet.json and report.html, linking each board's ordinary run
    folder. Exit codes: 0 one class and every board within tolerance, 1 more than one class or a board
    outside tolerance, 3 a board could not be run (the others complete and are reported),
    2 usage/config error, 130 interrupted (running boards finish and restore first).
    """
    request = DeployRequest.from_options(options)
    request.check_fault()
    built = load_builds(request.config_path, request.builds, request.allow_failed_build)  # exit 2 before any board
    default = built[0].settings.run
    cells = parse_matrix(options["matrix"], MatrixCell(default.core_mask, default.backend))
    common = DeployCommon(request, board_timeout=options["board_timeout"])
    forks, canary = options["forks"], options["canary"]
    console = log_console()

    def log(board: str, message: str) -> None:
        with _PRINT:
            console.log(literal(f"[{board}] {message}" if board else message))

    with resolve_boards(**{name: options[name] for name in SOURCE_OPTIONS}) as selected:
        engine = getattr(selected, "engine", "")
        log("", f"{len(selected)} board(s){f' (inventory read by {engine})' if engine else ''}, {len(cells)} cell(s): {', '.join(c.name for c in cells)}; "
                f"forks {forks}, canary {canary if len(selected) > canary else 0}")
        fleet, folder = run_fleet(selected, built, cells, common, Schedule(forks, canary, options["max_fail_percent"]), log)
    for caveat in (b.caveat for b in built if b.caveat):  # --allow-failed-build: the fleet's verdict says so too
        fleet.verdict += f" [{caveat}]"
    files = write_files(fleet, folder, options["html_path"], options["junit_path"])
    _print_verdict(fleet, files.folder)
    if options["as_json"]:
        click.echo(files.json.read_text().rstrip("\n"))  # exactly fleet.json
    raise SystemExit(fleet.exit_code)


def _print_verdict(fleet: FleetResult, folder: Path) -> None:
    console = log_console()
    for k in fleet.classes:
        members = ", ".join(f"{m.board} {m.cell}" for m in k.members[:8]) + \
            (f" and {len(k.members) - 8} more" if len(k.members) > 8 else "")
        console.print(literal(f"class {k.name} ({len(k.members)}{'' if k.repeatable else ', NOT repeatable'}): "
                              f"{members}"), soft_wrap=True)
    for d in fleet.differences:
        console.print(literal(f"  {d.line()}"), soft_wrap=True)
    for b in fleet.boards:
        if b.status != "complete":
            console.print(literal(f"board {b.board.name}: {b.status}: {plain_value(b.reason)}", "red"), soft_wrap=True)
    for n in fleet.drift:
        console.print(literal(f"DRIFT {n.line()}", "yellow"), soft_wrap=True)
    drift = (f"; drift from history: {len(fleet.drift)} board×cell moved from its baseline" if fleet.drift
             else "; no drift from the history baselines")
    console.print(literal(fleet.verdict + drift, "green" if fleet.exit_code == 0 else "red"), soft_wrap=True)
    console.print(Text.assemble("fleet results: ", literal(folder), "  (fleet.json, report.html)"))
