"""A verified pull of a board's serving audit log, as the history database keeps it (the `serving` table).

Why a record of its own: a deploy run proves a build before it serves; a serving pull shows it kept its
answers while it served (docs/AUDIT.md). `rkdet audit verify|report --results` builds one from its
verification (the CLI glues the audit room and this one: neither imports the other), `rkdet history`
lists them beside the runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServingPull:
    """One verified pull: which board, which builds served, how many records, and what verify found."""

    board: str  # the label given (--board-label) or the pulled folder's name
    folder: str  # the pulled folder as given to verify
    builds: tuple[str, ...]  # the build fingerprints the records name, sorted
    records: int
    first_seq: int | None
    last_seq: int | None
    canary_passed: int
    canary_failed: int
    shadow_disagreements: int
    chain: str  # "intact" | "broken" (a record lost, edited, reordered, unreadable, a file removed, the anchor gone)
    failed: bool  # any failed finding (a broken chain, an unknown build, a canary failure, a disagreement)
    findings: tuple[tuple[str, int], ...]  # (kind, count) of every finding, notes included, sorted
    last_hash: str | None  # the anchor for the next pull
    verified_unix: float
