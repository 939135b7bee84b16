"""A click group whose commands are imported when they are asked for, not when `rkdet` starts.

Why: every `rkdet` process used to import every command's area (the toolkit and ONNX plumbing, fleets,
the emulator, history) before parsing its arguments; a `diff` in a CI loop or a deploy started by a fleet
paid for all of them. The command table below each group names where a command lives; `--help` still
lists every command (it imports them all, to show their help lines).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

import click


class LazyGroup(click.Group):
    """`lazy` maps a command name to "module:attribute", imported on first use and checked to be that command."""

    def __init__(self, *args: object, lazy: Mapping[str, str] | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            self.add_command(self._load(cmd_name))
        return super().get_command(ctx, cmd_name)

    def _load(self, name: str) -> click.Command:
        module, _, attribute = self.lazy[name].partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command) or command.name != name:  # a wrong table entry is a bug here
            raise TypeError(f"{self.lazy[name]} is not the click command {name!r}")
        return command
