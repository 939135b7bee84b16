"""A measured accuracy table (`accuracy.json`, `rkdet accuracy`) as the history database keeps it: one row
per variant, so a person sees a model's accuracy over builds on the same labelled set (`rkdet history accuracy`).

Why its own record: a deploy run proves a build repeats its answers; accuracy says whether those answers
are right, and how that moved from one build to the next. The record is read by its one strict reader
(`rkdet.records.accuracy.read_accuracy`: bounded, the table's arithmetic checked, so a crafted file is one
line, exit 2, nothing recorded); a record without the labels' hash (schema rkdet.accuracy/1) is refused,
since rows are only comparable on the same labels.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from rkdet.errors import InputError
from rkdet.records.accuracy import read_accuracy


@dataclass(frozen=True)
class AccuracyEntry:
    """One variant of one measurement: which build, which labels, which metric, what value."""

    build: str  # the build fingerprint (64 hex)
    build_name: str  # the build folder's name
    position: int  # the row's place in its table (0: FP32)
    variant: str  # "FP32", "INT8 (emulation)", "board: rknnlite (emulated board)", ...
    metric: str  # "box mAP@0.5:0.95", "top-1", "mIoU", ...
    value: float  # 0..1
    labels_sha256: str  # rkdet.accuracy.labels.labels_digest: the key for "the same labelled set"
    labels: str  # the labels' name (no path)
    samples: int
    record_sha256: str  # sha256 of the record as read (canonical JSON): recording it twice adds nothing
    recorded_unix: float | None = None  # set by the database


def entries_of(path: Path) -> tuple[AccuracyEntry, ...]:
    """The rows of one accuracy.json, read strictly; one line naming the file otherwise."""
    record = read_accuracy(path)
    if record.labels_sha256 is None:
        raise InputError(f"{path}: records no labels' hash (schema rkdet.accuracy/1), so its rows cannot be compared "
                         "with other builds' on the same labels; re-run rkdet accuracy")
    canonical = json.dumps(record.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    digest = hashlib.sha256(canonical.encode("ascii")).hexdigest()
    return tuple(AccuracyEntry(record.fingerprint, record.build, i, row.variant, row.metric, row.value,
                               record.labels_sha256, record.labels, record.samples, digest)
                 for i, row in enumerate(record.rows))


def changes(entries: list[AccuracyEntry]) -> list[float | None]:
    """For each entry (ordered oldest first): its value minus the latest value before it of another build
    on the same labels, variant and metric (None when no other build was measured so before it)."""
    seen: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    out: list[float | None] = []
    for e in entries:
        earlier = seen.setdefault((e.labels_sha256, e.variant, e.metric), [])
        other = next((value for build, value in reversed(earlier) if build != e.build), None)
        out.append(None if other is None else e.value - other)
        earlier.append((e.build, e.value))
    return out
