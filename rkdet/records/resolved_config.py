"""`config.resolved.json`, typed: the config a build was made with, one reader and one writer.

Why: convert writes the whole resolved config (paths reduced to names) and import-rknn writes only
the sections a deploy needs (`origin: imported`, `run`, `board`, `tolerances`); deploy, fleet deploy
and `rkdet layers` read it. One bounded reader (records/io.py) checks it is an object whose sections
are objects, naming the file otherwise (exit 2); the sections' own keys are validated by the config
models (rkdet.config `build_deploy_settings`, rkdet.layers.rebuild), which sit above this layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.errors import InputError
from rkdet.records import fields as f
from rkdet.records.io import read_json_object, write_json

FILE = "config.resolved.json"
IMPORTED = "imported"


@dataclass(frozen=True)
class ResolvedConfig:
    """A build's resolved config: the whole document as written, and where it was read from."""

    doc: Mapping[str, Any]
    path: Path | None = None

    @classmethod
    def from_json(cls, doc: Any, where: str | Path, error: type[InputError] = InputError) -> ResolvedConfig:
        at = f.Where(str(where), advice="pass --config FILE, or re-run rkdet convert", error=error)
        # only the shape is this record's: each section's keys are the config models' (rkdet.config)
        return cls(f.obj(doc, at), Path(where))

    @property
    def origin(self) -> str:
        """`imported` (import-rknn: deploy sections only) or `converted` (the whole config)."""
        return IMPORTED if self.doc.get("origin") == IMPORTED else "converted"

    def section(self, name: str) -> Mapping[str, Any]:
        """A section (`run`, `board`, `tolerances`, ...) as written; {} when absent or null."""
        return self.doc.get(name) or {}

    def to_json(self) -> dict[str, Any]:
        return dict(self.doc)


def read_resolved_config(path: str | Path, error: type[InputError] = InputError) -> ResolvedConfig:
    """THE reader of a config.resolved.json (bounded, an object). FileNotFoundError passes for the
    caller's message; anything else is one line naming the file (`error`)."""
    path = Path(path)
    doc = read_json_object(path, error=error)
    return ResolvedConfig.from_json(doc, path, error)


def write_resolved_config(path: str | Path, doc: Mapping[str, Any]) -> None:
    """THE writer of a config.resolved.json (sorted keys, two-space indent, atomic: records/io.py)."""
    write_json(path, dict(doc))


__all__ = ["FILE", "IMPORTED", "ResolvedConfig", "read_resolved_config", "write_resolved_config"]
