"""Typed reads of one field of a parsed JSON record, each refusal one line naming the file and field.

Why: every record in rkdet/records/ (manifest.json, run.json, ...) comes from a file someone else may
have written; reading a field through these helpers turns a missing or wrongly typed value into
`<file>: <dotted.field>: expected ..., found ...; <what to do>` (InputError, exit 2) instead of a
KeyError or TypeError far from the file. Stdlib and errors only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from rkdet.errors import InputError, RkdetError

T = TypeVar("T")
_MISSING = object()


@dataclass(frozen=True)
class Where:
    """A position in a record: the file, the dotted field path, and the advice for a bad value."""

    file: str
    path: str = ""
    advice: str = "the file is damaged or was not written by rkdet"
    error: type[RkdetError] = InputError

    def at(self, key: str | int) -> Where:
        part = f"[{key}]" if isinstance(key, int) else (f".{key}" if self.path else key)
        return Where(self.file, self.path + part, self.advice, self.error)

    def fail(self, expected: str, value: Any) -> RkdetError:
        found = "nothing" if value is _MISSING else type(value).__name__ if not isinstance(value, (str, int, float)) \
            else repr(value)[:60]
        return self.error(f"{self.file}: {self.path or 'the document'}: expected {expected}, found {found}; "
                          f"{self.advice}")


def obj(value: Any, where: Where) -> Mapping[str, Any]:
    """A JSON object."""
    if not isinstance(value, dict):
        raise where.fail("an object", value)
    return value


def _get(doc: Mapping[str, Any], key: str, where: Where, required: bool) -> Any:
    value = doc.get(key, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise where.at(key).fail("a value", value)
        return None
    return value


def text(doc: Mapping[str, Any], key: str, where: Where, *, required: bool = False) -> str | None:
    value = _get(doc, key, where, required)
    if value is not None and not isinstance(value, str):
        raise where.at(key).fail("a string", value)
    return value


def integer(doc: Mapping[str, Any], key: str, where: Where, *, required: bool = False) -> int | None:
    value = _get(doc, key, where, required)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise where.at(key).fail("an integer", value)
    return value


def number(doc: Mapping[str, Any], key: str, where: Where, *, required: bool = False) -> float | int | None:
    value = _get(doc, key, where, required)
    if value is not None and not is_number(value):
        raise where.at(key).fail("a finite number", value)
    return value


def flag(doc: Mapping[str, Any], key: str, where: Where, *, required: bool = False) -> bool | None:
    value = _get(doc, key, where, required)
    if value is not None and not isinstance(value, bool):
        raise where.at(key).fail("true or false", value)
    return value


def mapping(doc: Mapping[str, Any], key: str, where: Where, *, required: bool = False) -> Mapping[str, Any] | None:
    """A free-form object field (kept as read: its own format is documented elsewhere)."""
    value = _get(doc, key, where, required)
    if value is not None and not isinstance(value, dict):
        raise where.at(key).fail("an object", value)
    return value


def items(doc: Mapping[str, Any], key: str, where: Where, read: Callable[[Any, Where], T], *,
          required: bool = False) -> tuple[T, ...] | None:
    """A list field, each item read by `read(item, where)`."""
    value = _get(doc, key, where, required)
    if value is None:
        return None
    if not isinstance(value, list):
        raise where.at(key).fail("a list", value)
    here = where.at(key)
    return tuple(read(item, here.at(i)) for i, item in enumerate(value))


def nested(doc: Mapping[str, Any], key: str, where: Where, read: Callable[[Mapping[str, Any], Where], T], *,
           required: bool = False) -> T | None:
    """An object field read into its own record by `read(object, where)`."""
    value = _get(doc, key, where, required)
    if value is None:
        return None
    return read(obj(value, where.at(key)), where.at(key))


def is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def a_number(value: Any, where: Where) -> float | int:
    if not is_number(value):
        raise where.fail("a finite number", value)
    return value


def an_int(value: Any, where: Where) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail("an integer", value)
    return value


def a_str(value: Any, where: Where) -> str:
    if not isinstance(value, str):
        raise where.fail("a string", value)
    return value


__all__ = ["Where", "a_number", "a_str", "an_int", "flag", "integer", "is_number", "items", "mapping", "nested",
           "number", "obj", "text"]
