"""`model.io.json`, typed: what the on-board runner feeds the model and what it names its outputs.

Why: convert, import-rknn and the cut builds of `rkdet layers --board` each wrote it as a dict of
their own, and the self-check bundle read it back unchecked. One record, one bounded strict reader
(records/io.py: a FIFO, a huge file or a wrongly typed field is one line naming the file, exit 2) and
one writer (sorted keys, atomic). The board side reads the same file with its own small reader
(rkdet/onboard/backends.py `load_io_spec`, Python 3.6): the format is docs/FORMATS.md "model.io.json".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.errors import InputError
from rkdet.records import fields as f
from rkdet.records.io import read_json_object, write_json

FILE = "model.io.json"
ADVICE = "re-run rkdet convert"


@dataclass(frozen=True)
class IoInput:
    """One model input as the board feeds it (today: the NHWC uint8 image)."""

    name: str | None
    shape: tuple[int, ...]
    dtype: str = "uint8"
    layout: str = "nhwc"

    @classmethod
    def read(cls, value: Any, where: f.Where) -> IoInput:
        doc = f.obj(value, where)
        return cls(f.text(doc, "name", where), f.items(doc, "shape", where, f.an_int, required=True) or (),
                   f.text(doc, "dtype", where) or "uint8", f.text(doc, "layout", where) or "nhwc")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "layout": self.layout}


@dataclass(frozen=True)
class ModelIo:
    """A build's (or a cut model's) `model.io.json`: its inputs and its output names in order."""

    inputs: tuple[IoInput, ...]
    outputs: tuple[str, ...]

    @classmethod
    def image(cls, input_name: str | None, height: int, width: int, outputs: Sequence[str]) -> ModelIo:
        """The one input every rkdet build has: a [1, H, W, 3] uint8 NHWC image."""
        return cls((IoInput(input_name, (1, int(height), int(width), 3)),), tuple(outputs))

    @classmethod
    def from_json(cls, doc: Any, where: str | Path) -> ModelIo:
        at = f.Where(str(where), advice=ADVICE)
        doc = f.obj(doc, at)
        return cls(f.items(doc, "inputs", at, IoInput.read, required=True) or (),
                   f.items(doc, "outputs", at, f.a_str, required=True) or ())

    def to_json(self) -> dict[str, Any]:
        return {"inputs": [i.to_json() for i in self.inputs], "outputs": list(self.outputs)}


def read_model_io(path: str | Path) -> ModelIo:
    """THE reader of a model.io.json (bounded, strict). FileNotFoundError passes for the caller's message."""
    path = Path(path)
    try:
        doc = read_json_object(path)
    except InputError as exc:
        raise InputError(f"{exc}; {ADVICE}") from None
    return ModelIo.from_json(doc, path)


def write_model_io(path: str | Path, record: ModelIo) -> None:
    """THE writer of a model.io.json (sorted keys, atomic: records/io.py)."""
    write_json(path, record.to_json())


__all__ = ["FILE", "IoInput", "ModelIo", "read_model_io", "write_model_io"]
