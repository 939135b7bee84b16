"""The stable entry points other parts of rkdet call (deploy, the CLI)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from rkdet.diff.compare import Comparison, run_comparison
from rkdet.diff.resultset import declared_decisions, open_source
from rkdet.tolerance import Tolerance

if TYPE_CHECKING:
    from rkdet.records.build import BuildRecord

__all__ = ["Comparison", "Tolerance", "compare", "declared_decisions"]


def compare(a_path: str | Path, b_path: str | Path | None = None, tolerance: Tolerance | None = None,
            decoder: str = "auto", builds: Sequence[BuildRecord] = (),
            declared: Mapping[str, Any] | None = None) -> Comparison:
    """Compare result set `a_path` run-to-run, and against `b_path`'s run 0 per input when given.

    Either path may be a result-set folder, a deploy run folder (its result/), a build folder (B's: the
    golden set rkdet.diff.resultset.reference_set picks for A's run.json, the rule deploy uses; a note
    says which), a golden/ folder, or a single .npy/.npz. Raises rkdet.errors.InputError (exit 2)
    for unreadable or mismatched input (a build folder whose manifest is missing, unreadable, not a regular
    file or invalid among them); otherwise `.exit_code` is 0 (same within tolerance) or 1. `builds`: build
    folders the caller already loaded (rkdet.records.build), not read again. `declared`: the config's
    `decision.outputs`, the app's rule per output, judged instead of a recognised layout (absent: a build's own).
    """
    a = open_source(a_path, "A", builds=builds)
    b = open_source(b_path, "B", against=a.run_info, builds=builds) if b_path is not None else None
    return run_comparison(a, b, tolerance or Tolerance(), decoder, declared)
