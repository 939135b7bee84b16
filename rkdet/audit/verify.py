"""`rkdet audit verify`: is the pulled chain intact, every build known, every canary equal to its baseline?

One list of findings (`Finding`: kind, where, message), read by the terminal line printer and the
report alike. What the chain can and cannot prove is in docs/AUDIT.md: a record lost, edited or
reordered, or a file removed from the middle, breaks a link; a board that rewrites the whole chain
does not, unless an anchor (the last record's hash of the previous pull) pins where it must continue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet.audit.chainlog import AuditFile, Line, read_log
from rkdet.onboard.audit_chain import GENESIS, file_name
from rkdet.textsafe import visible

_HEX64 = re.compile(r"^[0-9a-f]{64}$")

# the kinds of finding, each a named failure (exit 1), except the notes
EDITED, LOST, REORDERED, FILE_REMOVED, ANCHOR_MISSING, UNREADABLE = (
    "edited-record", "lost-records", "reordered-records", "file-removed", "anchor-missing", "unreadable-record")
UNKNOWN_BUILD, CANARY_FAILED, CANARY_BASELINE, SHADOW_DISAGREED, TORN = (
    "unknown-build", "canary-failure", "canary-baseline-changed", "shadow-disagreement", "torn-record")
NOTE_TRUNCATED_START, NOTE_TORN_TAIL, NOTE_LOST_WRITES = "rotated-away", "torn-tail", "disk-refused"
NOTES = frozenset({NOTE_TRUNCATED_START, NOTE_TORN_TAIL, NOTE_LOST_WRITES})
# the findings that mean the chain itself is broken (the others name what an intact chain recorded)
CHAIN_KINDS = frozenset({EDITED, LOST, REORDERED, FILE_REMOVED, ANCHOR_MISSING, UNREADABLE, TORN})
MAX_KEPT = 100  # findings kept (and printed) per kind; the rest are counted


@dataclass(frozen=True)
class Finding:
    kind: str
    where: str  # file:line
    message: str

    @property
    def failed(self) -> bool:
        return self.kind not in NOTES


@dataclass
class Verification:
    findings: list[Finding] = field(default_factory=list)
    records: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    last_hash: str | None = None  # the anchor for the next pull
    builds: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)
    found: dict[str, int] = field(default_factory=dict)  # findings per kind, also those beyond the kept ones

    @property
    def failed(self) -> bool:
        return any(f.failed for f in self.findings)

    @property
    def not_shown(self) -> int:
        return sum(self.found.values()) - len(self.findings)

    def add(self, kind: str, line: Line | str, message: str) -> None:
        """Count every finding; keep the first MAX_KEPT of each kind (a crafted log cannot flood the output)."""
        self.found[kind] = self.found.get(kind, 0) + 1
        if self.found[kind] > MAX_KEPT or (kind == UNKNOWN_BUILD and len(self.builds) > MAX_KEPT):
            return
        where = line if isinstance(line, str) else f"{line.file}:{line.lineno}"
        self.findings.append(Finding(kind, where, visible(message)))


def _seq(record: dict[str, Any]) -> int | None:
    seq = record.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else None


def verify(folder: Path, known_builds: set[str], anchor: str | None = None) -> Verification:
    """Check the chain of `folder` (InputError, exit 2, when it is not an audit log at all)."""
    files = read_log(folder)
    result = Verification()
    _check_links(files, result, anchor)
    _check_contents(files, result, known_builds)
    return result


def _check_links(files: list[AuditFile], result: Verification, anchor: str | None) -> None:
    prev_line: Line | None = None
    prev_seq: int | None = None
    anchored = anchor is None
    previous: AuditFile | None = None
    for af in files:
        if previous is not None and af.index != previous.index + 1:
            missing = ", ".join(file_name(i) for i in range(previous.index + 1, min(af.index, previous.index + 4)))
            result.add(FILE_REMOVED, af.name, f"{missing}{' …' if af.index - previous.index > 4 else ''} removed "
                       f"from the middle of the chain (between {previous.name} and {af.name})")
        if previous is not None and previous.torn_bytes:
            declared = (af.lines and af.lines[0].record or {}).get("torn_tail")
            if not (isinstance(declared, dict) and declared.get("bytes") == previous.torn_bytes):
                result.add(TORN, previous.name, f"{previous.torn_bytes} bytes after the last whole record, "
                           "and the next file does not declare them: a record was cut or appended")
            else:
                result.add(NOTE_TORN_TAIL, previous.name, f"{previous.torn_bytes} torn bytes (a power loss), declared")
        for line in af.lines:
            rec = line.record
            seq = _seq(rec) if rec is not None else None
            if rec is None or seq is None or not isinstance(rec.get("prev"), str):
                result.add(UNREADABLE, line, "not a record rkdet audit writes (edited or garbage)")
                prev_line, prev_seq = line, None
                continue
            result.records += 1
            if result.first_seq is None:
                result.first_seq = seq
                if rec["prev"] != GENESIS:
                    result.add(NOTE_TRUNCATED_START, line, f"the chain starts at seq {seq}: older files were rotated "
                               "away (retention) or not pulled")
            if anchor is not None and (line.hash == anchor or rec["prev"] == anchor):
                anchored = True
            if prev_line is not None and prev_seq is not None:
                if seq <= prev_seq:
                    result.add(REORDERED, line, f"seq {seq} after seq {prev_seq}: records reordered or replayed")
                elif seq > prev_seq + 1 and rec["prev"] != prev_line.hash:
                    result.add(LOST, line, f"records seq {prev_seq + 1}..{seq - 1} missing (deleted)")
                elif rec["prev"] != prev_line.hash:
                    result.add(EDITED, prev_line, f"record seq {prev_seq} was changed after it was written "
                               f"(seq {seq} chained another hash)")
            if isinstance(rec.get("lost_before"), int) and rec["lost_before"] > 0:
                result.add(NOTE_LOST_WRITES, line, f"{rec['lost_before']} records the board's disk refused")
            prev_line, prev_seq = line, seq
        previous = af
    if prev_line is not None:
        result.last_seq, result.last_hash = prev_seq, prev_line.hash
    if not anchored:
        result.add(ANCHOR_MISSING, files[0].name, f"the anchor {anchor[:16]}… of the previous pull is not in this "
                   "chain: records between the pulls were removed or the chain was rewritten")


def _check_contents(files: list[AuditFile], result: Verification, known_builds: set[str]) -> None:
    baselines: dict[tuple[str, str], tuple[Line, list[Any]]] = {}
    for af in files:
        for line in af.lines:
            rec = line.record
            if rec is None:
                continue
            kind = rec.get("kind")
            kind = kind if isinstance(kind, str) else "?"
            result.counts[kind] = result.counts.get(kind, 0) + 1
            build = rec.get("build")
            if build is not None:
                if not isinstance(build, str) or not _HEX64.match(build) or build not in known_builds:
                    if str(build) not in result.builds and len(result.builds) <= MAX_KEPT:
                        result.add(UNKNOWN_BUILD, line, f"build {str(build)[:16]} is none of the builds given "
                                   "(--build / --fingerprint): an unapproved model served")
                        result.builds.add(str(build))
                elif len(result.builds) <= MAX_KEPT:
                    result.builds.add(build)
            if kind == "canary":
                _check_canary(line, rec, result, baselines)
            elif kind == "shadow_disagreement":
                result.add(SHADOW_DISAGREED, line, f"the candidate decided {rec.get('shadow_decision')!r} where "
                           f"the served build decided {rec.get('served_decision')!r} (input "
                           f"{str(rec.get('input'))[:16]})")


def _check_canary(line: Line, rec: dict[str, Any], result: Verification,
                  baselines: dict[tuple[str, str], tuple[Line, list[Any]]]) -> None:
    if rec.get("ok") is not True:
        diff = rec.get("first_difference")
        where = ""
        if isinstance(diff, dict):
            where = (f": golden {diff.get('golden')} output {diff.get('output')} element {diff.get('index')} "
                     f"was {diff.get('got')!r}, baseline {diff.get('expected')!r}")
        result.add(CANARY_FAILED, line, f"canary outputs differ bitwise from the baseline{where}")
        return
    key = (str(rec.get("build")), str(rec.get("core_mask")))
    outputs = rec.get("outputs")
    if not isinstance(outputs, list):
        result.add(UNREADABLE, line, "a canary record without its output hashes")
        return
    first = baselines.setdefault(key, (line, outputs))
    if first[1] != outputs:  # a restart took a new first-run baseline that differs from the earlier one
        result.add(CANARY_BASELINE, line, f"canary outputs differ from the baseline of {first[0].file}:"
                   f"{first[0].lineno} for build {key[0][:16]} core mask {key[1]}")
