"""The verdict on a pulled result set: run-to-run and against the build's reference (`judge`).

Why its own module: deploy and a bisection judge a pulled run the same way `rkdet diff RUN BUILD`
does (the one reference rule, the one tolerance), and write the same reports into the run folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rkdet.errors import EXIT_DIFFERENT, EXIT_OK, BoardError
from rkdet.tolerance import Tolerance


@dataclass(frozen=True)
class Judgement:
    """What the diff said: the verdict, exit codes, the reference, both verdicts as dicts and lines."""

    verdict: str
    exit_code: int  # the deploy's: EXIT_OK or EXIT_DIFFERENT
    diff_exit: int
    reference: Path
    emulated: bool
    repeatable: dict[str, Any]
    agrees: dict[str, Any] | None
    lines: list[str]  # "repeatable: …", "agrees with the reference: …"


def judge(result_local: Path, build: Path, tolerance: Tolerance, folder: Path, label: str) -> Judgement:
    """Compare the pulled result set run-to-run and with the build's reference; reports into `folder`."""
    from rkdet.diff.api import compare
    from rkdet.diff.report import write_reports
    from rkdet.diff.resultset import reference_set

    try:
        run = json.loads((result_local / "run.json").read_text())
        if not isinstance(run, dict):
            raise ValueError(f"a JSON {type(run).__name__}, not an object")
    except (OSError, ValueError, RecursionError) as exc:
        raise BoardError(f"{label}: the board's result run.json is unreadable ({exc}); "
                         "the run's results cannot be judged (a broken or hostile board?)") from None
    reference = reference_set(build, run)  # the one rule `rkdet diff RUN BUILD` applies too
    comparison = compare(result_local, reference, tolerance)
    write_reports(comparison, folder)
    return Judgement(verdict=comparison.verdict, exit_code=EXIT_OK if comparison.exit_code == 0 else EXIT_DIFFERENT,
                     diff_exit=comparison.exit_code, reference=Path(reference), emulated=run.get("emulated") is True,
                     repeatable=comparison.repeatable.as_dict(),
                     agrees=comparison.agrees.as_dict() if comparison.agrees is not None else None,
                     lines=[v.line() for v in (comparison.repeatable, comparison.agrees) if v is not None])
