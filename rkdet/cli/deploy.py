"""`rkdet deploy`: the board work (rkdet.cli.board.run_deploy), then the run recorded in the results
database (rkdet.history.record).

Why a module of its own, above both: a deploy's run belongs in `<out>/rkdet.db` the moment it completes,
but the board package sits below history in the layers contract (history reads result folders, never a
board), so neither may call the other; this thin command joins them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from rkdet.cli.board import run_deploy
from rkdet.cli.options import connection_options, deploy_options
from rkdet.deploy.request import DeployRequest
from rkdet.errors import RkdetError
from rkdet.log import log_console
from rkdet.textsafe import literal


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
    outcome = run_deploy(request, resume=opts["resume"], install_selfcheck=opts["install_selfcheck"],
                         as_json=opts["as_json"])
    if outcome.record.get("status") == "complete":
        record_run(request.out, outcome.folder)
    raise SystemExit(outcome.exit_code)


def record_run(results: Path, folder: Path) -> None:
    """Add a completed run to `<results>/rkdet.db`; a failure is a warning (the run folder is the
    evidence, and `rkdet history import` can index it later), never a failed deploy."""
    from rkdet.history.record import record_folder

    console = log_console()
    try:
        record_folder(results, folder)
    except (RkdetError, OSError, ValueError, sqlite3.Error) as err:
        console.print(Text.assemble(("warning", "yellow"), ": ", literal(
            f"run not recorded in {results}/rkdet.db ({err}); `rkdet history import --results {results}` "
            "can add it later")))
        return
    console.log(literal(f"recorded in {results}/rkdet.db (rkdet history --results {results})"))
