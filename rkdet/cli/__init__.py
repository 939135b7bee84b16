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
from rkdet.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, RkdetError
from rkdet.log import VERBOSE_KEY
from rkdet.textsafe import visible


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class RkdetGroup(click.Group):
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


def _register() -> None:
    """Attach the command groups; imports are inside so `rkdet --help` stays fast."""
    # One line per command group, each owned by its area (convert, board, diff, emulator).
    from rkdet.cli.config import config_group
    from rkdet.cli.deploy import deploy_command
    from rkdet.cli.init import init_command
    from rkdet.cli.import_rknn import import_command
    from rkdet.cli.compare_builds import compare_builds_command
    from rkdet.cli.convert import convert_command
    from rkdet.cli.diff import diff_command
    from rkdet.cli.board import board_group
    from rkdet.cli.emulator import emulator
    from rkdet.cli.demo import demo_command
    from rkdet.cli.fleet import fleet_group
    from rkdet.cli.fleet_deploy import fleet_deploy_command
    from rkdet.cli.history import history_group
    from rkdet.cli.layers import layers_command  # the host analysis, or with --board the bisection

    main.add_command(config_group)
    main.add_command(convert_command)
    main.add_command(init_command)
    main.add_command(import_command)
    main.add_command(compare_builds_command)
    main.add_command(diff_command)
    main.add_command(emulator)
    main.add_command(deploy_command)
    main.add_command(board_group)
    main.add_command(demo_command)
    fleet_group.add_command(fleet_deploy_command)
    main.add_command(fleet_group)
    main.add_command(history_group)
    main.add_command(layers_command)


_register()
