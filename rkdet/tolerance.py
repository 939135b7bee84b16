"""The declared tolerance of a comparison: ONE typed value, validated once where it is read.

It is the `tolerances:` section of the config (rkdet.config uses this model for it), what
`rkdet diff --tolerance/--config` builds, and what deploy judges with, so the three can never
disagree (issue 10). Strict on purpose: a bool is not a number (`max_ulp: true` is refused, not 1),
bounds are finite (`max_abs: .inf` is refused: every bound at 0 already means "not checked
element-wise" once another bound is declared). Strings that spell a number are accepted, because
PyYAML reads `1e-3` (no dot) as a string.

Semantics (also in docs/DIFF_REPORT.md): with every bound at its default the comparison is
*bitwise* (hash equality). Otherwise every declared bound must hold for an output to pass:
``max_abs``/``max_ulp``/``max_lsb`` (when > 0) are element-wise (an element passes if any accepts it;
``max_lsb`` is the int8 distance in quantization steps: |a - b| for integer outputs, |a - b| / scale for
an NPU's dequantized float outputs whose scale the build's manifest names),
``min_cosine``/``max_rel_l2`` (when set) apply to the whole output.

Per-output tolerances (Polygraphy's per-output tolerances): the top-level bounds are the default entry,
used for every output; ``outputs`` maps an output's name to the bounds that differ for it (the keys an
entry names replace the default's, the rest are inherited). `for_output(name)` is the one place that
resolves an output's tolerance; the config spells it ``tolerances: {max_abs: 1e-3, outputs: {scores:
{min_cosine: 0.999}}}`` and ``rkdet diff`` ``--tolerance scores:min_cosine=0.999``.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from pydantic import (BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, field_validator,
                      model_serializer)

from rkdet.errors import InputError

KEYS = ("max_abs", "max_ulp", "max_lsb", "min_cosine", "max_rel_l2")  # the bounds (`outputs` holds entries of them)
_short = reprlib.Repr()
_short.maxstring = _short.maxother = 40
_short.maxlevel, _short.maxlist, _short.maxdict = 1, 3, 3


def _number(key: str, value: Any, *, integer: bool, nullable: bool) -> Any:
    """Coerce one bound; ValueError (one short line, never the whole value) when it is not one."""
    kind = "an integer" if integer else "a number"
    if value is None:
        if nullable:
            return None
        raise ValueError(f"must be {kind}, not null")
    if isinstance(value, str):
        text = value.strip().lower()
        if nullable and text in ("null", "none", ""):
            return None
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise ValueError(f"must be {kind}, got {_short.repr(value)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be {kind}, got {_short.repr(value)}")
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"must be an integer, got {value!r}")
        value = int(value)
    else:
        value = float(value)
    if not math.isfinite(value) or value < 0 and key != "min_cosine":
        raise ValueError(f"must be finite and >= 0, got {value!r}")
    if key == "min_cosine" and not -1.0 <= value <= 1.0:
        raise ValueError(f"must be within [-1, 1], got {value!r}")
    return value


class Tolerance(BaseModel):
    """Bounds a difference must stay within to count as "same"; defaults mean bitwise."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_abs: float = 0.0
    max_ulp: int = 0
    max_lsb: int = 0  # int8 distance in quantization steps (LSB), element-wise
    min_cosine: Optional[float] = None
    max_rel_l2: Optional[float] = None
    # per output name: the bounds that differ from the default (the top level) for that output
    outputs: dict[str, Tolerance] = Field(default_factory=dict)

    @field_validator("max_abs", "max_ulp", "max_lsb", "min_cosine", "max_rel_l2", mode="before")
    @classmethod
    def _checked(cls, value: Any, info: Any) -> Any:
        key = info.field_name
        return _number(key, value, integer=key in ("max_ulp", "max_lsb"), nullable=key in ("min_cosine", "max_rel_l2"))

    @field_validator("outputs", mode="before")
    @classmethod
    def _entries(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ValueError(f"must map output names to bounds, got {_short.repr(value)}")
        for name, entry in value.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"output name {_short.repr(name)} must be non-empty text")
            if isinstance(entry, Mapping) and "outputs" in entry:
                raise ValueError(f"{name}: an output's entry holds bounds only, not another 'outputs'")
        return value

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The default entry's five keys as before; `outputs` only when there is one, each entry with the
        keys it names (so a tolerance without per-output entries dumps exactly as it always did)."""
        data: dict[str, Any] = handler(self)
        data.pop("outputs", None)
        if self.outputs:
            data["outputs"] = {name: {k: getattr(entry, k) for k in KEYS if k in entry.model_fields_set}
                               for name, entry in self.outputs.items()}
        return data

    def __hash__(self) -> int:  # frozen, so hashable like before `outputs` (a dict) was added
        return hash((tuple(getattr(self, k) for k in KEYS),
                     tuple(sorted((n, tuple(sorted(e.model_fields_set & set(KEYS))), hash(e))
                                  for n, e in self.outputs.items()))))

    def for_output(self, name: str) -> Tolerance:
        """The bounds that judge output `name`: its entry's keys over the default's (the default alone
        for an output without an entry). The one resolution of a per-output tolerance."""
        entry = self.outputs.get(name)
        bounds = {k: getattr(self, k) for k in KEYS}
        if entry is not None:
            bounds.update({k: getattr(entry, k) for k in KEYS if k in entry.model_fields_set})
        return Tolerance(**bounds)

    @property
    def default(self) -> Tolerance:
        """The default entry alone (the bounds of an output the map does not name)."""
        return self.for_output("") if self.outputs else self

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None, *, where: str = "tolerances") -> Tolerance:
        """Build from a mapping (deploy's record, --tolerance pairs); bad keys/values raise InputError."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise InputError(f"{where}: expected a mapping of {', '.join(KEYS)}, got {type(data).__name__}")
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise InputError(f"{where}: {describe_error(exc)}") from None

    @classmethod
    def from_pairs(cls, pairs: Iterable[str], base: Tolerance | None = None) -> Tolerance:
        """Apply ``KEY=VALUE`` (the default entry) and ``OUTPUT:KEY=VALUE`` (output OUTPUT's entry) strings
        (the --tolerance flag) over `base`. OUTPUT is everything before the last ``:`` (a name may hold one)."""
        merged: dict[str, Any] = (base or cls()).to_json()
        for pair in pairs:
            target, sep, value = pair.partition("=")
            output, colon, key = target.rpartition(":")
            key = key.strip()
            if not sep or (colon and (not output or key not in KEYS)):
                raise InputError(f"--tolerance {_short.repr(pair)}: expected KEY=VALUE (every output) or "
                                 f"OUTPUT:KEY=VALUE (that output) with KEY one of {', '.join(KEYS)}")
            if not colon:
                merged[key] = value
                continue
            merged.setdefault("outputs", {}).setdefault(output, {})[key] = value
            try:  # named here as the flag spells it (OUTPUT:KEY), not as the mapping nests it
                _number(key, value, integer=key in ("max_ulp", "max_lsb"), nullable=key in ("min_cosine", "max_rel_l2"))
            except ValueError as err:
                raise InputError(f"--tolerance {_short.repr(target)}: {err}") from None
        return cls.from_mapping(merged, where="--tolerance")

    @property
    def bitwise(self) -> bool:
        """True when nothing but bit-identical outputs is accepted (by the default and by every output's entry)."""
        return (self.max_abs == 0 and self.max_ulp == 0 and self.max_lsb == 0 and self.min_cosine is None
                and self.max_rel_l2 is None and all(self.for_output(n).bitwise for n in self.outputs))

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()

    def describe(self) -> str:
        """One short phrase for verdicts and reports (per-output entries after the default: `; NAME: ...`)."""
        if self.outputs:
            return "; ".join([self.default.describe(), *(f"{name}: {self.for_output(name).describe()}"
                                                          for name in self.outputs)])
        if self.bitwise:
            return "bitwise"
        parts = []
        if self.max_abs > 0:
            parts.append(f"max_abs={self.max_abs:g}")
        if self.max_ulp > 0:
            parts.append(f"max_ulp={self.max_ulp}")
        if self.max_lsb > 0:
            parts.append(f"max_lsb={self.max_lsb}")
        if self.min_cosine is not None:
            parts.append(f"min_cosine={self.min_cosine:g}")
        if self.max_rel_l2 is not None:
            parts.append(f"max_rel_l2={self.max_rel_l2:g}")
        return ", ".join(parts)


def describe_error(exc: ValidationError) -> str:
    """The first problem of a ValidationError as `tolerance KEY: message` (never the whole input)."""
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err.get("loc", ())) or "(section)"
    if err.get("type") == "extra_forbidden":
        if len(err.get("loc", ())) > 1:  # inside an output's entry
            return f"unknown tolerance key {key!r}; an output's entry holds {', '.join(KEYS)}"
        return f"unknown tolerance key {key!r}; known: {', '.join(KEYS)}, outputs"
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"tolerance {key} {msg}"


# THE cross-CPU bound: how far the onnx-fp32 reference made on another CPU class (rkdet.onboard.reference.cpu_class,
# docs/FORMATS.md "CPU class") may lie from this run's FP32 outputs, relative to the largest |value| of the
# reference output. Its FP32 kernels round differently by design (FMA3 or not), so such a reference is judged
# numerically, not bitwise. Measured (bench/results/cross_cpu_reference*.md, the reference's settings, native
# AVX-512 vs qemu -cpu SandyBridge / Nehalem): the tiny conv model 1.58e-07, the default build's YOLOv8n at 640
# 3.83e-06 (max abs 6.68e-05); the bound keeps a 26x margin above the deeper model (deeper models accumulate more
# rounding), and is still far below any difference a decision could follow (decisions are judged as well).
CROSS_CPU_REL = 1e-4


def cross_cpu_tolerance(tolerance: Tolerance, reference_peak: float) -> Tolerance:
    """`tolerance` (one output's) widened by the cross-CPU bound: an element within CROSS_CPU_REL x
    `reference_peak` (the reference output's largest finite |value|) also passes; every other bound stays."""
    return tolerance.model_copy(update={"max_abs": max(tolerance.max_abs, CROSS_CPU_REL * reference_peak)})


def cross_cpu_phrase() -> str:
    """The bound as the verdict line and report.json name it."""
    return f"|difference| <= {CROSS_CPU_REL:g} x max |reference output|"
