"""The `rkdet` command line: parse, call one function, map errors to exit codes.

Each command group lives beside the code it drives (``rkdet/<area>/command.py``) and is
registered here, so this file stays a table of contents.
"""

from __future__ import annotations

import sys

import click

from rkdet import __version__
from rkdet.errors import EXIT_INTERRUPTED, RkdetError


class RkdetGroup(click.Group):
    """A click group that turns RkdetError into `rkdet: message` and its exit code."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except RkdetError as err:
            click.echo(f"rkdet: {err}", err=True)
            sys.exit(err.exit_code)
        except KeyboardInterrupt:
            click.echo("rkdet: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)


@click.group(cls=RkdetGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rkdet")
def main() -> None:
    """Deterministic, provable inference on Rockchip NPUs."""


def _register() -> None:
    """Attach the command groups; imports are inside so `rkdet --help` stays fast."""
    # One line per command group, each owned by its area (convert, board, diff, emulator).
    from rkdet.config_command import config_group

    main.add_command(config_group)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
