"""What a deploy command was asked (`DeployRequest`): built from the parsed flags in one call.

Why its own record: `rkdet deploy`, `rkdet fleet deploy` (every board of it) and `rkdet demo` share
the connection flags (`ConnectionOptions`), the run flags that override a config (`RunOverrides`) and
where results go; passing the one record keeps the 30- and 38-parameter signatures from coming back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rkdet.errors import InputError
from rkdet.deploy.settings import RunOverrides
from rkdet.link.connect import ConnectionOptions


@dataclass(frozen=True)
class DeployRequest:
    """The shared deploy flags: how to reach the board(s), the run overrides, the builds and the results root."""

    connection: ConnectionOptions = field(default_factory=ConnectionOptions)
    run: RunOverrides = field(default_factory=RunOverrides)
    out: Path = Path("results")
    config_path: Path | None = None
    builds: tuple[Path, ...] = ()  # `rkdet deploy --build` gives one; `fleet deploy` one per NPU family
    allow_failed_build: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> DeployRequest:
        """The request from a click command's parsed options (`build` or `builds`, the rest by name)."""
        given = options.get("builds")
        if given is None:
            given = () if options.get("build") is None else (options["build"],)
        return cls(connection=ConnectionOptions.from_options(options), run=RunOverrides.from_options(options),
                   out=options.get("out") or Path("results"), config_path=options.get("config_path"),
                   builds=tuple(given), allow_failed_build=bool(options.get("allow_failed_build")))

    def check_fault(self) -> None:
        """--emulator-fault must be JSON (exit 2 before any board is touched)."""
        if self.run.fault is not None:
            try:
                json.loads(self.run.fault)
            except ValueError:
                raise InputError("--emulator-fault: not valid JSON") from None

    @property
    def build(self) -> Path | None:
        """The one build of a single-board deploy (None: the config's default build)."""
        return self.builds[0] if self.builds else None
