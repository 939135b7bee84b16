"""The `rkdet` command line: parse, call one function, map errors to exit codes.

Every command lives in this package (``rkdet/cli/<command>.py``), the one place where areas are
composed (convert + search, deploy + history, layers + bisection); this file registers them.
"""

from __future__ import annotations

import os
import signal
import sys

import click

from rkdet import __version__
from rkdet.cli.lazy import LazyGroup
from rkdet.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, RkdetError
from rkdet.log import VERBOSE_KEY
from rkdet.textsafe import visible


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class RkdetGroup(LazyGroup):
    """A click group that turns RkdetError into `rkdet: message` and its exit code."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        signal.signal(signal.SIGTERM, _terminate)  # clean up like Ctrl-C: no half-written output
        try:
            return super().invoke(ctx)
        except RkdetError as err:
            click.echo(f"rkdet: {visible(err)}", err=True)  # messages quote board/result-set data
            sys.exit(err.exit_code)
        except KeyboardInterrupt:
            click.echo("rkdet: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except Exception as err:  # a bug: one line by default, the traceback on request
            if os.environ.get("RKDET_DEBUG"):
                raise
            click.echo(f"rkdet: internal error ({err.__class__.__name__}: {visible(err)}); "
                       "rerun with RKDET_DEBUG=1 for the traceback and report it", err=True)
            sys.exit(EXIT_BAD_INPUT)


@click.group(cls=RkdetGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rkdet")
@click.option("-v", "--verbose", is_flag=True, help="Timestamps on the progress log lines.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Deterministic, provable inference on Rockchip NPUs."""
    ctx.meta[VERBOSE_KEY] = verbose


# Each command where it lives, imported only when it runs (rkdet/cli/lazy.py).
COMMANDS = {
    "accuracy": "rkdet.cli.accuracy:accuracy_command",  # accuracy against labels (FP32, INT8 emulation, board)
    "audit": "rkdet.cli.audit:audit_group",
    "board": "rkdet.cli.board:board_group",
    "compare-builds": "rkdet.cli.compare_builds:compare_builds_command",
    "config": "rkdet.cli.config:config_group",
    "convert": "rkdet.cli.convert:convert_command",
    "demo": "rkdet.cli.demo:demo_command",
    "deploy": "rkdet.cli.deploy:deploy_command",
    "diff": "rkdet.cli.diff:diff_command",
    "emulator": "rkdet.cli.emulator:emulator",
    "fleet": "rkdet.cli.fleet:fleet_group",
    "history": "rkdet.cli.history:history_group",
    "import-rknn": "rkdet.cli.import_rknn:import_command",
    "init": "rkdet.cli.init:init_command",
    "layers": "rkdet.cli.layers:layers_command",  # the host analysis, or with --board the bisection
    "runner": "rkdet.cli.runner:runner_group",  # rkdet-run-c built against your SDK (rknn_c backend)
}
main.lazy.update(COMMANDS)
