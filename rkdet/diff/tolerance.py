"""The declared tolerance of a comparison: one frozen value shared by config, deploy and diff.

Stdlib only, so the config loader and the deploy path can build it without importing numpy.
Semantics (also in docs/DIFF_REPORT.md): with every bound at its default the comparison is
*bitwise* (hash equality). Otherwise every declared bound must hold for an output to pass:
``max_abs``/``max_ulp`` (when > 0) are element-wise (an element passes if either accepts it),
``min_cosine``/``max_rel_l2`` (when set) apply to the whole output.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from rkdet.errors import InputError

KEYS = ("max_abs", "max_ulp", "min_cosine", "max_rel_l2")


def _number(key: str, value: Any, where: str, *, integer: bool = False, nullable: bool = False) -> Any:
    """Coerce one tolerance value, or raise a one-line error naming `where` and the key."""
    if value is None:
        if nullable:
            return None
        raise InputError(f"{where}: tolerance {key} must be a number, not null")
    if isinstance(value, bool):
        raise InputError(f"{where}: tolerance {key} must be a number, got {value!r}")
    if isinstance(value, str):
        text = value.strip().lower()
        if nullable and text in ("null", "none", ""):
            return None
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            kind = "an integer" if integer else "a number"
            raise InputError(f"{where}: tolerance {key} must be {kind}, got {value!r}") from None
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise InputError(f"{where}: tolerance {key} must be an integer, got {value!r}")
        if not isinstance(value, (int, float)):
            raise InputError(f"{where}: tolerance {key} must be an integer, got {value!r}")
        value = int(value)
    elif not isinstance(value, (int, float)):
        raise InputError(f"{where}: tolerance {key} must be a number, got {value!r}")
    else:
        value = float(value)
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: tolerance {key} must be finite and >= 0, got {value!r}")
    return value


@dataclass(frozen=True)
class Tolerance:
    """Bounds a difference must stay within to count as "same"; defaults mean bitwise."""

    max_abs: float = 0.0
    max_ulp: int = 0
    min_cosine: float | None = None
    max_rel_l2: float | None = None

    def __post_init__(self) -> None:
        if self.min_cosine is not None and not -1.0 <= self.min_cosine <= 1.0:
            raise InputError(f"tolerance min_cosine must be within [-1, 1], got {self.min_cosine!r}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None, *, where: str = "tolerances") -> Tolerance:
        """Build from a config mapping; unknown keys and bad values raise InputError naming them."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise InputError(f"{where}: expected a mapping of {', '.join(KEYS)}, got {type(data).__name__}")
        unknown = sorted(set(data) - set(KEYS))
        if unknown:
            raise InputError(f"{where}: unknown tolerance key {unknown[0]!r}; known: {', '.join(KEYS)}")
        values = dict(
            max_abs=_number("max_abs", data.get("max_abs", 0.0), where),
            max_ulp=_number("max_ulp", data.get("max_ulp", 0), where, integer=True),
            min_cosine=_number("min_cosine", data.get("min_cosine"), where, nullable=True),
            max_rel_l2=_number("max_rel_l2", data.get("max_rel_l2"), where, nullable=True),
        )
        return cls(**values)

    @classmethod
    def from_pairs(cls, pairs: Iterable[str], base: Tolerance | None = None) -> Tolerance:
        """Apply ``KEY=VALUE`` strings (the --tolerance flag) over `base`."""
        merged: dict[str, Any] = (base or cls()).as_dict()
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep:
                raise InputError(f"--tolerance {pair!r}: expected KEY=VALUE with KEY one of {', '.join(KEYS)}")
            merged[key.strip()] = value
        return cls.from_mapping(merged, where="--tolerance")

    @property
    def bitwise(self) -> bool:
        """True when nothing but bit-identical outputs is accepted."""
        return self.max_abs == 0 and self.max_ulp == 0 and self.min_cosine is None and self.max_rel_l2 is None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One short phrase for verdicts and reports."""
        if self.bitwise:
            return "bitwise"
        parts = []
        if self.max_abs > 0:
            parts.append(f"max_abs={self.max_abs:g}")
        if self.max_ulp > 0:
            parts.append(f"max_ulp={self.max_ulp}")
        if self.min_cosine is not None:
            parts.append(f"min_cosine={self.min_cosine:g}")
        if self.max_rel_l2 is not None:
            parts.append(f"max_rel_l2={self.max_rel_l2:g}")
        return ", ".join(parts)
