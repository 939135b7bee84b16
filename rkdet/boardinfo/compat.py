"""Known incompatibilities of the board's software stack with a build: one table, each row with its source.

Preflight (`rkdet/boardinfo/preflight.py`) checks every row against the board's probe and the build's
manifest before anything on the board changes. A row whose combination is present either blocks the
deploy (exit 3, the message says the fix and cites the row's source) or warns. A row that cannot be
decided because a version is unknown (no driver version readable, a runtime string rkdet cannot
parse) is a warning naming what was not known: unknown combinations warn, never block.

Versions are (major, minor, patch). Rows are data; `check` is the one reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Optional

from rkdet import socs

Version = tuple[int, int, int]
_NUMBER = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
# SoCs whose NPU is RKNPU 1 (galcore): the legacy runtime only (librknn_runtime, RKNN-Toolkit 1.x models).
RKNPU1_SOCS = frozenset(socs.RKNPU1_SOCS)


def version_of(text: Optional[str]) -> Optional[Version]:
    """The first x.y[.z] in a version string ("librknnrt version: 2.5.0 (…)", "RKNPU driver: v0.9.8")."""
    found = _NUMBER.search(text or "")
    return (int(found.group(1)), int(found.group(2)), int(found.group(3) or 0)) if found else None


def dotted(version: Optional[Version]) -> str:
    return ".".join(map(str, version)) if version else "unknown"


@dataclass(frozen=True)
class StackFacts:
    """What the rows are checked against: the board's probe and the build's `.rknn` header."""

    soc: Optional[str]
    runtime_library: Optional[str]  # "/usr/lib/librknnrt.so" | "/usr/lib/librknn_runtime.so" | None
    runtime: Optional[Version]
    driver: Optional[Version]
    model_format: Optional[int]  # .rknn container format (6 for rknn-toolkit2 >= 2.0)
    model_toolkit: Optional[Version]

    @property
    def runtime_kind(self) -> Optional[str]:
        name = (self.runtime_library or "").rsplit("/", 1)[-1]
        return "librknn_runtime" if name.startswith("librknn_runtime") else "librknnrt" if name else None


@dataclass(frozen=True)
class Incompatibility:
    """One known-bad combination. Every condition set must hold for the row to apply; `source` says
    where it is documented (issue, release note, user guide)."""

    key: str
    severity: Literal["block", "warn"]
    what: str  # the combination, with {runtime} {driver} {format} {toolkit} {soc} filled in
    fix: str
    source: str
    socs: frozenset[str] = frozenset()  # the board's SoC is one of these (empty: any)
    runtime_kind: Optional[str] = None  # the board's runtime library is this kind
    model_format_min: Optional[int] = None  # the .rknn's container format >= this
    model_toolkit_min: Optional[Version] = None  # the .rknn was built by a toolkit >= this
    model_toolkit_below: Optional[Version] = None  # the .rknn was built by a toolkit < this
    model_newer_than_runtime: bool = False  # the .rknn's toolkit is newer than the board's librknnrt
    runtime_below: Optional[Version] = None  # librknnrt < this
    runtime_at_least: Optional[Version] = None  # librknnrt >= this
    driver_below: Optional[Version] = None  # rknpu driver < this

    def decide(self, f: StackFacts) -> tuple[bool | None, list[str]]:
        """(True: applies, False: does not, None: cannot tell), and the facts that were unknown."""
        unknown: list[str] = []
        verdicts: list[bool] = []

        def need(known: object, name: str, test: bool) -> None:
            if known is None:
                unknown.append(name)
            else:
                verdicts.append(test)

        if self.socs:
            need(f.soc, "the SoC", (f.soc or "").lower() in self.socs)
        if self.runtime_kind:
            need(f.runtime_kind, "the runtime library", f.runtime_kind == self.runtime_kind)
        if self.model_format_min is not None:
            need(f.model_format, "the model format", (f.model_format or 0) >= self.model_format_min)
        if self.model_toolkit_min is not None:
            need(f.model_toolkit, "the model's toolkit version", f.model_toolkit is not None
                 and f.model_toolkit >= self.model_toolkit_min)
        if self.model_toolkit_below is not None:
            need(f.model_toolkit, "the model's toolkit version", f.model_toolkit is not None
                 and f.model_toolkit < self.model_toolkit_below)
        if self.model_newer_than_runtime:
            need(f.model_toolkit if f.runtime is not None else None, "the model's toolkit and the librknnrt versions",
                 f.model_toolkit is not None and f.runtime is not None and f.model_toolkit > f.runtime)
        if self.runtime_below is not None:
            need(f.runtime, "the librknnrt version", f.runtime is not None and f.runtime < self.runtime_below)
        if self.runtime_at_least is not None:
            need(f.runtime, "the librknnrt version", f.runtime is not None and f.runtime >= self.runtime_at_least)
        if self.driver_below is not None:
            need(f.driver, "the rknpu driver version", f.driver is not None and f.driver < self.driver_below)
        if not all(verdicts):
            return False, []  # a known condition fails: the row does not apply, whatever is unknown
        return (None, unknown) if unknown else (True, [])

    def text(self, f: StackFacts) -> str:
        return self.what.format(runtime=dotted(f.runtime), driver=dotted(f.driver), format=f.model_format,
                                toolkit=dotted(f.model_toolkit), soc=f.soc, library=f.runtime_library)


_LIBRKNNRT_FIX = ("install the librknnrt that matches the toolkit (rknn-toolkit2 {toolkit}: copy "
                  "rknpu2/runtime/Linux/librknn_api/aarch64/librknnrt.so from airockchip/rknn-toolkit2 v{toolkit} "
                  "to /usr/lib on the board), or build with the toolkit that matches the board's runtime")
_DRIVER_FIX = ("update the rknpu kernel driver (it is part of the kernel: a newer board image, or the vendor kernel "
               "rebuilt with airockchip/rknn-llm rknpu-driver 0.9.8), or use a librknnrt the driver supports")

KNOWN: tuple[Incompatibility, ...] = (
    Incompatibility(
        key="rknn-format-6-on-librknnrt-1", severity="block",
        what="librknnrt {runtime} cannot load model format {format} (built by rknn-toolkit2 {toolkit}): the runtime "
             "says 'Invalid RKNN model version {format}'",
        fix=_LIBRKNNRT_FIX,
        source="ultralytics/ultralytics#18928; airockchip/rknn-toolkit2#281 and #254 (librknnrt 1.3/1.4 logs); "
               "RKNPU2 user guide FAQ 10.1.1: models of toolkit 2.x need runtime >= 2.0.0",
        model_format_min=6, runtime_below=(2, 0, 0), runtime_kind="librknnrt"),
    Incompatibility(
        key="toolkit-1.5.2-model-on-older-librknnrt", severity="block",
        what="librknnrt {runtime} is older than 1.5.2, which a model of rknn-toolkit2 {toolkit} needs",
        fix=_LIBRKNNRT_FIX,
        source="RKNPU2 user guide FAQ 10.1.1 model/runtime table: model 1.5.2 and 1.6.0 need runtime >= 1.5.2",
        model_toolkit_min=(1, 5, 2), runtime_below=(1, 5, 2), runtime_kind="librknnrt"),
    Incompatibility(
        key="rknpu-driver-older-than-librknnrt-2", severity="block",
        what="rknpu driver {driver} is older than librknnrt {runtime} asks for (>= 0.8.8): the runtime warns "
             "'recommend to upgrade the driver' and runs may abort",
        fix=_DRIVER_FIX,
        source="rockchip-linux/rknn-toolkit2#271; airockchip/rknn-toolkit2#16 (librknnrt 2.0.0b0 on driver 0.8.2: "
               "'Current driver version: 0.8.2, recommend to upgrade the driver to the new version: >= 0.8.8', "
               "then 'Aborted')",
        runtime_at_least=(2, 0, 0), driver_below=(0, 8, 8), runtime_kind="librknnrt"),
    Incompatibility(
        key="rknpu-driver-below-0.9.2", severity="warn",
        what="rknpu driver {driver} is older than 0.9.2, the oldest Rockchip recommends",
        fix=_DRIVER_FIX,
        source="RKNPU2 user guide FAQ 10.1.1 'NPU kernel driver and runtime compatibility': upgrade the driver "
               "to 0.9.2 or later; airockchip/rknn-toolkit2#468 (0.8.2 much slower than 0.9.2)",
        driver_below=(0, 9, 2), runtime_kind="librknnrt"),
    Incompatibility(
        key="toolkit-2.3.0-model-on-librknnrt-2.3.2", severity="warn",
        what="a model of rknn-toolkit2 {toolkit} on librknnrt {runtime}: a 2.3.0 model was reported to segfault "
             "under librknnrt 2.3.2 (tensor-layout validation tightened) and to run under 2.3.0",
        fix="rebuild the model with the toolkit matching the board's runtime (rkdet convert --toolkit), or pin "
            "librknnrt to the model's toolkit version",
        source="jaylfc/taOS#42 (an SD UNet .rknn of rknn-toolkit2 2.3.0 segfaults under librknnrt 2.3.2; "
               "librknnrt 2.3.0 works)",
        model_toolkit_min=(2, 3, 0), model_toolkit_below=(2, 3, 1), runtime_at_least=(2, 3, 2),
        runtime_kind="librknnrt"),
    Incompatibility(
        key="model-toolkit-newer-than-librknnrt", severity="warn",
        what="the model was built by rknn-toolkit2 {toolkit}, newer than the board's librknnrt {runtime}",
        fix=_LIBRKNNRT_FIX,
        source="airockchip/rknn-toolkit2#506 (a 2.3.2 model: rknn_run segfault under librknnrt 2.3.0, gone with "
               "2.3.2); RKNPU2 user guide FAQ 10.1.1 (the runtime should be at least the model's toolkit)",
        model_newer_than_runtime=True, runtime_kind="librknnrt"),
    Incompatibility(
        key="rv1126-needs-legacy-runtime", severity="block",
        what="{soc} has an RKNPU 1 NPU (galcore): it runs only the legacy runtime librknn_runtime with models of "
             "RKNN-Toolkit 1.x, not this rknn-toolkit2 model (format {format})",
        fix="build for it with the legacy RKNN-Toolkit 1.7.x (rkdet convert --target rv1126 with "
            "target.toolkit1_python) and run it with rknn-toolkit-lite v1 and librknn_runtime; RV1126B is a "
            "different chip that rknn-toolkit2 supports as rv1126b",
        source="rockchip-linux/rknpu README (RV1109/RV1126: RKNPU 1, rknn-toolkit 1.x); airockchip/rknn-toolkit2 "
               "README supported platforms (no RV1126; RV1126B since 2.x)",
        socs=RKNPU1_SOCS, model_format_min=2),
    Incompatibility(
        key="rv1126-with-librknnrt", severity="block",
        what="{soc} has an RKNPU 1 NPU but the board's runtime is {library} (RKNPU2): it cannot drive this NPU",
        fix="install the legacy runtime librknn_runtime (rockchip-linux/rknpu drivers/linux-armhf) and "
            "rknn-toolkit-lite v1",
        source="rockchip-linux/rknpu README (RV1109/RV1126 use librknn_runtime); airockchip/rknn-toolkit2 README",
        socs=RKNPU1_SOCS, runtime_kind="librknnrt"),
)


@dataclass(frozen=True)
class Finding:
    """One row that applies (or could not be decided) on this board."""

    row: Incompatibility
    decided: bool  # False: a needed version was unknown, so only a warning
    message: str


def check(facts: StackFacts, rows: tuple[Incompatibility, ...] = KNOWN) -> list[Finding]:
    """Every row that applies or cannot be decided, blocking rows first."""
    found: list[Finding] = []
    for row in rows:
        applies, unknown = row.decide(facts)
        if applies:
            fix = row.fix.format(toolkit=dotted(facts.model_toolkit))
            found.append(Finding(row, True, f"{row.text(facts)}; fix: {fix} (known incompatibility "
                                            f"{row.key}; source: {row.source})"))
        elif applies is None:
            found.append(Finding(row, False, f"could not check known incompatibility {row.key}: "
                                             f"{', '.join(unknown)} unknown (source: {row.source.split(';')[0]})"))
    return sorted(found, key=lambda x: (not (x.decided and x.row.severity == "block")))


@dataclass(frozen=True)
class MeasuredLoad:
    """Measured here, not reported: whether a model built by one toolkit loads in a given runtime, and how
    to measure it again. `runtime` names exactly what loaded it (on this x86_64 host only the toolkits'
    own loader, `RKNN.load_rknn`, can be measured; a board's librknnrt needs the board)."""

    model_toolkit: str
    runtime: str
    loads: bool
    observed: str  # what the runtime said
    command: str  # the rkdet command that reproduces the row
    source: str = "measured here (rkdet issue 23, 2026-12-01: the tiny conv model, rk3588, x86_64 host)"


_PROBE = ("rkdet convert --config tiny.yaml --toolkit {model} && RKDET_TOOLKIT2_PYTHON=$(python -m "
          "rkdet.convert.toolkit_env ensure {loader}) rkdet import-rknn build/tiny-rk3588/model.rknn --inputs golden "
          "--channel-order rgb (the 'simulator:' line)")
_SAID = "load_rknn 0; init_runtime on the simulator refused ('not support inference on the simulator')"

MEASURED_LOADS: tuple[MeasuredLoad, ...] = tuple(
    MeasuredLoad(model, f"rknn-toolkit2 {loader} load_rknn (x86_64 host)", True, _SAID,
                 _PROBE.format(model=model, loader=loader))
    for model in ("2.3.2", "2.5.0") for loader in ("2.3.2", "2.5.0"))
