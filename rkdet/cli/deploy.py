"""`rkdet deploy`: the one-board flow (`rkdet.deploy.flow.Deployment`, `run_deploy`), then the run
recorded in the results database (rkdet.history.record).

Why here, in the CLI: a deploy's run belongs in `<out>/rkdet.db` the moment it completes, but the deploy
flow sits below history in the layers contract (history reads result folders, never a board), so
neither may call the other; this command composes them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from rkdet.cli.options import connection_options, deploy_options
from rkdet.cli.warn import say_warnings
from rkdet.config import DEFAULT_CONFIG, DeploySettings, build_deploy_settings
from rkdet.deploy.request import DeployRequest
from rkdet.deploy.settings import settings_source
from rkdet.errors import EXIT_OK, BoardError, InputError, RkdetError
from rkdet.link.connect import open_connection
from rkdet.link.shell import SELFCHECK_S
from rkdet.log import Log, log_console
from rkdet.textsafe import literal

if TYPE_CHECKING:
    from rkdet.deploy.flow import DeployOutcome
    from rkdet.deploy.settings import RunOverrides
    from rkdet.link.ssh import BoardConnection
    from rkdet.records.build import BuildRecord


@click.command("deploy")
@connection_options
@deploy_options
def deploy_command(**opts: Any) -> None:
    """Run a build on a board, pinned, and judge the results: run against run and against golden.

    Settings (run, board, tolerances) come from --config when given, else from the build's own
    config.resolved.json. A completed run is recorded in <out>/rkdet.db (`rkdet history`).

    Exit codes: 0 deterministic and within tolerance of golden, 1 divergence found,
    2 usage/config error, 3 board or connection problem, 130 interrupted (board restored).
    """
    request = DeployRequest.from_options(opts)
    if opts.get("backends"):
        if opts["resume"] or opts["install_selfcheck"] or opts["backend"]:
            raise InputError("--backends runs one fresh pinned session: drop --backend, --resume and --install-selfcheck")
        raise SystemExit(run_backend_pair(request, opts["backends"], as_json=opts["as_json"]))
    outcome = run_deploy(request, resume=opts["resume"], install_selfcheck=opts["install_selfcheck"],
                         as_json=opts["as_json"])
    if outcome.record is not None and outcome.record.status == "complete":
        record_run(request.out, outcome.folder)
    raise SystemExit(outcome.exit_code)


def check_before_connecting(record: BuildRecord, flags: RunOverrides, allow_failed_build: bool, what: str) -> None:
    """What deploy refuses before any connection, one backend or a session of two: a build that failed a
    gate (unless --allow-failed-build) and an --inputs folder that is not the build's fed input."""
    record.info.refuse_failed(what, allow_failed_build)
    if flags.inputs is not None:  # --inputs: every tensor checked against the build's fed input
        from rkdet.deploy.stage import check_inputs

        check_inputs(record.info, Path(flags.inputs), flags.emulate_npu)


def run_deploy(request: DeployRequest, *, resume: bool = False, install_selfcheck: bool = False,
               as_json: bool = False) -> DeployOutcome:
    """Run a build on a board, pinned, judge the results and print the verdict; returns the outcome
    (the caller records it and exits with its code)."""
    from rkdet.records.build import BuildRecord, load_build
    from rkdet.deploy.flow import Deployment, board_label
    from rkdet.deploy.deploy_state import latest_unfinished, load_record, refuse_session_step
    from rkdet.deploy.settings import RunSettings, resolve_build

    console = log_console()

    def log(message: str) -> None:  # deploy's messages carry board-sourced names (SoC, paths)
        console.log(literal(message))

    build, config_path, out, flags = request.build, request.config_path, request.out, request.run
    allow_failed_build = request.allow_failed_build
    given_build = build
    record: BuildRecord | None = None
    if not resume:  # the build loaded once (a wrong --build is exit 2 naming the folder, before its settings)
        record, chosen = resolve_build(config_path, build)
        build = record.folder
    elif build is None and config_path is None:  # judged by the build that run was of (below)
        chosen, build = settings_source(None, None) if DEFAULT_CONFIG.is_file() else (None, None)
    else:
        chosen, build = settings_source(config_path, build)
    request.check_fault()
    if record is not None:  # after the config's own errors (and the default build); all before any connection:
        if install_selfcheck and record.info.origin == "imported":
            raise InputError(f"{build}: an imported .rknn has no reference outputs, so no self-check bundle "
                             "(rkdet-selfcheck compares with expected outputs): deploy it without --install-selfcheck")
        check_before_connecting(record, flags, allow_failed_build,
                                "deploy --install-selfcheck" if install_selfcheck else "deploy")
    with open_connection(request.connection) as conn:
        if resume:  # judged against the build that run was of (recorded), unless --build says otherwise
            folder = latest_unfinished(out, board_label(conn.target.label))
            refuse_session_step(folder)  # before its build is loaded and before any board command
            if given_build is None:
                recorded = load_record(folder).build
                if not recorded and build is None:
                    raise InputError(f"{folder}: the run's build folder is not recorded; pass --build")
                build = Path(recorded or build)
            assert build is not None
            record = load_build(build)
            if chosen is None:
                chosen = build_deploy_settings(record)
        assert chosen is not None and record is not None
        log(f"settings (run, board, tolerances) from {chosen.source}{from_build_note(chosen, config_path)}")
        settings = RunSettings.from_config(chosen, flags)
        deployment = Deployment(conn, record, out, settings, log=log, progress=console.is_terminal,
                                allow_failed_build=allow_failed_build)
        outcome = deployment.resume(folder) if resume else deployment.run()
        if install_selfcheck:
            _install_selfcheck(conn, record, outcome, settings.backend, log, allow_failed_build)
    print_outcome(outcome, settings.pin, flags.emulate_npu is not None, as_json)
    return outcome


def print_outcome(outcome: DeployOutcome, pinned: bool, emulate_npu: bool, as_json: bool) -> None:
    """A deploy's warnings, verdict lines, verdict and where its results are (and `--json`'s record)."""
    console = log_console()
    say_warnings(console, outcome.warnings)
    if outcome.emulated:
        source = ("the build's RKNN simulator outputs (emulated NPU mode)" if emulate_npu
                  else "onnxruntime on CPU")
        console.print(f"[magenta]EMULATED[/]: outputs come from the rkdet emulator ({source}), not an NPU")
    colour = "green" if outcome.exit_code == EXIT_OK else "red"
    for line in outcome.verdict_lines:
        style = "" if line.startswith("stack: ") else "green" if ": YES " in line else "red"
        console.print(literal(line, style), soft_wrap=True)
    console.print(literal(outcome.verdict, colour))
    restored = "not pinned" if not pinned else {True: "yes", False: "NO"}.get(outcome.restored, "unknown")
    console.print(Text.assemble("results: ", literal(outcome.folder), "  (report.html, report.json)  "
                  f"sent {outcome.transfer.bytes_sent} B, skipped {outcome.transfer.files_skipped} unchanged file(s); "
                  f"board restored: {restored}"))
    if as_json:
        click.echo(json.dumps(outcome.record.to_json() if outcome.record else {}, indent=2, sort_keys=True))


def from_build_note(chosen: DeploySettings, config_path: Path | None) -> str:
    """What a build folder decides on the board when no --config is given (issue 30 #16): its resolved
    config's board work dir and sudo are used (documented), so the log line names them."""
    if config_path is not None or not str(chosen.source).endswith("config.resolved.json"):
        return ""
    board = chosen.board
    return (f" (the build folder's: board work dir {board.workdir or 'the default'}, sudo "
            f"{'yes' if board.sudo else 'no'}; pass --config FILE to use your own)")


def _install_selfcheck(conn: BoardConnection, build: BuildRecord, outcome: DeployOutcome, backend: str, log: Log,
                       allow_failed_build: bool = False) -> None:
    """--install-selfcheck: after a passing deploy, the build's self-check into <workdir>/selfcheck, run once."""
    from rkdet.deploy.selfcheck_install import install_selfcheck

    if outcome.exit_code != EXIT_OK or outcome.record is None or outcome.record.status != "complete":
        outcome.warnings.append("self-check not installed: the deploy did not pass")
        return
    remote = f"{(outcome.record.remote or {})['workdir']}/selfcheck"
    done = install_selfcheck(conn, build, remote, emulated=outcome.emulated, backend=backend,
                             allow_failed_build=allow_failed_build)
    res = conn.run(done.command, check=False, timeout=SELFCHECK_S)
    line = (res.out.strip() or res.err.strip()).splitlines()[-1:] or [f"exit {res.rc}, no output"]
    if res.rc != 0:
        raise BoardError(f"{conn.target.label}: the self-check installed in {remote} failed on its first run "
                         f"(exit {res.rc}): {line[0][:300]}")
    log(f"self-check installed in {remote} and run once: {line[0][:300]}")
    log(f"for a systemd unit (docs/SELFCHECK.md): ExecStartPre={done.command_line}")


def run_backend_pair(request: DeployRequest, pair: tuple[str, str], *, as_json: bool = False) -> int:
    """`deploy --backends A,B`: the build run with A, then B, on the same board in ONE pinned session
    (rkdet.deploy.session: both preflighted before anything is pushed, the union of their files pushed once,
    one lock, one pin, A's runner then B's, one restore; each run its own folder, recorded in history), then
    the pair's cell (rkdet.diff.backend_pair): SAME bitwise, or the outputs and settings that differ, or what
    B's runtime said when it ran nothing (each --runner-setting goes to the backend whose runner takes it:
    the application's settings). Written to <B's run folder>/backends.json; exit 0 when SAME and both runs
    passed, else 1 (a session refused before it ran, or A's run failing: that error's exit code)."""
    from dataclasses import replace

    from rkdet.backends.registry import backend as descriptor
    from rkdet.deploy.flow import Deployment
    from rkdet.deploy.session import PinnedSession
    from rkdet.deploy.settings import RunSettings, resolve_build
    from rkdet.diff.backend_pair import compare_backends, refused_pair, shared_session

    console = log_console()

    def log(message: str) -> None:
        console.log(literal(message))

    given = request.run.runner_settings  # each --runner-setting goes to the backend(s) whose runner takes it
    for item in given:
        if not any(item.partition("=")[0].strip() in descriptor(n).runner_settings for n in pair):
            raise InputError(f"--runner-setting {item}: neither {pair[0]} nor {pair[1]} takes it")
    record, chosen = resolve_build(request.config_path, request.build)
    request.check_fault()
    check_before_connecting(record, request.run, request.allow_failed_build, "deploy")
    log(f"settings (run, board, tolerances) from {chosen.source}{from_build_note(chosen, request.config_path)}")
    steps: list[RunSettings] = []
    for name in pair:
        own = tuple(s for s in given if s.partition("=")[0].strip() in descriptor(name).runner_settings)
        steps.append(RunSettings.from_config(chosen, replace(request.run, backend=name, runner_settings=own)))
    with open_connection(request.connection) as conn:
        session = PinnedSession([Deployment(conn, record, request.out, s, log=log, progress=console.is_terminal,
                                            allow_failed_build=request.allow_failed_build) for s in steps], log)
        results = session.run()
    for step, settings in zip(results, steps):
        if step.outcome is not None:
            console.log(literal(f"--backends: {step.backend}"))
            print_outcome(step.outcome, settings.pin, settings.emulate_npu is not None, False)
            if step.outcome.record is not None and step.outcome.record.status == "complete":
                record_run(request.out, step.outcome.folder)
    a, b = results
    if a.error is not None:  # what was proven did not run: no pair to judge (the board was restored)
        raise a.error
    assert a.outcome is not None
    if b.error is not None:
        if not isinstance(b.error, BoardError):
            raise b.error
        session_link = shared_session(a.folder, b.folder)
        cell = refused_pair(pair[0], pair[1], _runtime_said(b.folder, str(b.error)), session_link)
        return max(_report_pair(console, cell, b.folder, as_json), a.outcome.exit_code)
    assert b.outcome is not None
    cell = compare_backends(a.folder / "result", b.folder / "result")
    code = _report_pair(console, cell, b.folder, as_json)
    return max(code, a.outcome.exit_code, b.outcome.exit_code)


def _runtime_said(folder: Path, error: str) -> str:
    """What a run that produced nothing said: the runtime's last line in its job.log (not rkdet's own
    records), with deploy's error; bounded and made printable by the caller."""
    try:
        text = (folder / "job.log").read_text(errors="replace")[-65536:]
    except OSError:
        return error
    said = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("{") and "rkdet" not in ln[:6]]
    return f"{said[-1][:200]} ({error})" if said else error


def _report_pair(console: Any, cell: Any, folder: Path, as_json: bool) -> int:
    from rkdet.records.io import SHARED, write_json

    write_json(folder / "backends.json", cell.to_json(), SHARED)
    for line in cell.lines():
        console.print(literal(line, "green" if cell.same else "red"), soft_wrap=True)
    console.print(Text.assemble("backend pair: ", literal(folder / "backends.json")))
    if as_json:
        click.echo(json.dumps(cell.to_json(), indent=2, sort_keys=True))
    return EXIT_OK if cell.same else 1


def record_run(results: Path, folder: Path) -> None:
    """Add a completed run to `<results>/rkdet.db`; a failure is a warning (the run folder is the
    evidence, and `rkdet history import` can index it later), never a failed deploy."""
    from rkdet.history.record import record_folder

    console = log_console()
    try:
        record_folder(results, folder)
    except (RkdetError, OSError, ValueError, sqlite3.Error) as err:
        say_warnings(console, [f"run not recorded in {results}/rkdet.db ({err}); `rkdet history import --results "
                               f"{results}` can add it later"])
        return
    console.log(literal(f"recorded in {results}/rkdet.db (rkdet history --results {results})"))
