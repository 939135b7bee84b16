"""Classify the toolkit's own `E RKNN` / `W RKNN` log lines, so none of them is lost in toolkit.log.

Why: rknn-toolkit2's compiler (librknnc) reports real problems only as log lines and still returns 0:
a tensor wider than a 13-bit NPU register field logs `REGTASK: The bit width of field value exceeds the
limit` (once per register task) and the build "succeeds"; the simulator does not model the register, so
its outputs look perfect while the NPU may compute garbage. So every line is classified from the table
below (what it means, what to do); an error-class line fails the build (exit 4) unless the user accepts
it by pattern (`toolkit.accept_errors`, recorded in the manifest). Unknown `E RKNN` lines count as errors,
unknown `W RKNN` lines as warnings.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from rkdet.errors import ConversionError

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LINE = re.compile(r"^(?P<level>[EW]) RKNN:\s*(?:\[[0-9:.]+\]\s*)?(?P<text>.*)$")


@dataclass(frozen=True)
class KnownMessage:
    """One row of the table: a message the toolkit logs, its class, what it means and what to do."""

    key: str
    pattern: str  # regex searched in the line text (timestamp stripped)
    severity: str  # "error" | "warning"
    meaning: str
    fix: str


KNOWN_MESSAGES: tuple[KnownMessage, ...] = (
    KnownMessage(
        "regtask-overflow", r"REGTASK: The bit width of field value exceeds the limit", "error",
        "a tensor dimension does not fit a 13-bit NPU register field (limit 0x1fff = 8191); the simulator does "
        "not model the register, the NPU may compute that layer wrongly",
        "cut the head before the wide tail (model.prepare: yolov8-split-head for a stock YOLOv8 export, whose "
        "[1,4+nc,8400] tail overflows at 640) or export the model at a smaller input size"),
    KnownMessage(
        "unknown-op-target", r"Unkown op target", "warning",
        "the compiler logs it while placing reshape-like ops itself (seen with a GlobalAveragePool/Flatten "
        "classifier tail); the build and the simulator run complete",
        "nothing to change; {gate} and `rkdet deploy` checks the board"),
)
_UNKNOWN_ERROR = KnownMessage(
    "unknown-error", "", "error", "an error the toolkit logged that rkdet does not know",
    "read toolkit.log (rerun with --keep-failed); if the golden and board results are right, accept it with "
    "toolkit.accept_errors")
_UNKNOWN_WARNING = KnownMessage("unknown-warning", "", "warning", "a warning the toolkit logged that rkdet does "
                                "not know", "read toolkit.log")


@dataclass(frozen=True)
class MessageGroup:
    """All lines of one kind: the table row, how many lines, the first one verbatim."""

    key: str
    severity: str
    count: int
    first_line: str
    meaning: str
    fix: str
    accepted_by: str | None = None  # the toolkit.accept_errors pattern that accepted it


@dataclass
class LogReport:
    """The classified log: error groups (accepted or not) and warning groups."""

    errors: list[MessageGroup] = field(default_factory=list)
    warnings: list[MessageGroup] = field(default_factory=list)
    accept_errors: list[str] = field(default_factory=list)

    @property
    def unaccepted(self) -> list[MessageGroup]:
        return [g for g in self.errors if g.accepted_by is None]

    def to_json(self) -> dict:
        return {"errors": [asdict(g) for g in self.errors], "warnings": [asdict(g) for g in self.warnings],
                "accept_errors": list(self.accept_errors)}

    def summary(self) -> str | None:
        """One line for the terminal, or None when the log is clean."""
        parts = [f"{g.key} x{g.count}" + (" (accepted)" if g.accepted_by else "") for g in self.errors]
        parts += [f"{g.key} x{g.count}" for g in self.warnings]
        if not parts:
            return None
        return "toolkit.log: " + ", ".join(parts) + " (meaning and fix in manifest.json toolkit_log)"


def _classify_line(level: str, text: str) -> KnownMessage:
    for known in KNOWN_MESSAGES:
        if re.search(known.pattern, text):
            return known
    return _UNKNOWN_ERROR if level == "E" else _UNKNOWN_WARNING


def _group_key(known: KnownMessage, text: str) -> str:
    # Unknown messages are grouped by their text without numbers, known ones by their table key.
    return known.key if known.pattern else f"{known.key}:{re.sub(r'0x[0-9a-fA-F]+|[0-9]+', '#', text)[:120]}"


# What checks the build in place of the toolkit's word: a fix names the gate this model has.
GATE_DECISION = "the decision gate compares the simulator's decisions with ONNX FP32"
GATE_NUMERIC = ("the numeric gates compare the simulator with ONNX FP32 (cosine where FP32 carries signal, "
                "saturation; no decision gate: rkdet decodes no layout of this model)")


def classify(log: str, accept_errors: list[str] | tuple[str, ...] = (), decisions: bool = True) -> LogReport:
    """Every `E RKNN`/`W RKNN` line of `log`, grouped by kind, with accepted errors marked. `decisions`:
    the model has a decision gate (a layout rkdet decodes); a fix then names it, else the numeric gates."""
    gate_text = GATE_DECISION if decisions else GATE_NUMERIC
    groups: dict[str, MessageGroup] = {}
    for raw in log.splitlines():
        m = _LINE.match(_ANSI.sub("", raw).strip())
        if not m:
            continue
        level, text = m.group("level"), m.group("text").strip()
        known = _classify_line(level, text)
        key = _group_key(known, text)
        if key in groups:
            g = groups[key]
            groups[key] = MessageGroup(g.key, g.severity, g.count + 1, g.first_line, g.meaning, g.fix, g.accepted_by)
            continue
        accepted = next((p for p in accept_errors if re.search(p, text)), None) if known.severity == "error" else None
        groups[key] = MessageGroup(known.key, known.severity, 1, f"{level} RKNN: {text}", known.meaning,
                                   known.fix.replace("{gate}", gate_text), accepted)
    report = LogReport(accept_errors=list(accept_errors))
    for g in groups.values():
        (report.errors if g.severity == "error" else report.warnings).append(g)
    return report


def gate(report: LogReport, platform: str) -> None:
    """Fail (exit 4) on the first error-class line that no `toolkit.accept_errors` pattern accepts."""
    bad = report.unaccepted
    if not bad:
        return
    first = bad[0]
    more = sum(g.count for g in bad) - 1
    raise ConversionError(
        f"{platform}: the toolkit logged an error{f' (+{more} more)' if more else ''}: {first.first_line[:160]!r}: "
        f"{first.meaning}; fix: {first.fix} (or, after checking on a board, accept it with "
        f"toolkit.accept_errors: [{accept_pattern(first.first_line)!r}])")


def accept_pattern(line: str) -> str:
    """The pattern to suggest for accepting a line: its text up to the first colon, regex-escaped."""
    text = line.split(":", 1)[-1].strip()
    return re.escape(text.split(":", 1)[0].strip()[:60])
