"""The verdict on a pulled result set: run-to-run and against the build's reference (`judge`).

Why its own module: deploy and a bisection judge a pulled run the same way `rkdet diff RUN BUILD`
does (the one reference rule, the one tolerance), and write the same reports into the run folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from rkdet.errors import EXIT_DIFFERENT, EXIT_OK, BoardError
from rkdet.records.build import BuildRecord
from rkdet.records.deploy_record import ContextsRecord
from rkdet.records.verdict import AnyVerdict, CellsRecord, VerdictRecord, VerdictSummary
from rkdet.records.run_info import RunInfo, read_run_info
from rkdet.tolerance import Tolerance


@dataclass(frozen=True)
class Judgement:
    """What the diff said: the verdict, exit codes, the reference, both verdicts (the typed records
    deploy.json keeps: rkdet/records/verdict.py) and lines."""

    verdict: str
    exit_code: int  # the deploy's: EXIT_OK or EXIT_DIFFERENT
    diff_exit: int
    reference: Path | None  # None: the build has no reference (imported .rknn)
    emulated: bool
    repeatable: VerdictRecord | VerdictSummary  # one set's verdict, or the summary over cells
    agrees: AnyVerdict | None  # one set's verdict, the summary over cells, or NotApplicable (no reference)
    lines: list[str]  # "repeatable: …", "agrees with the reference: …"
    run: RunInfo | None = None  # the (first cell's) run.json: the stack rkdet-run saw
    cells: CellsRecord | None = None  # several core masks: CellsJudgement.record() (rkdet/deploy/cells.py)
    contexts: ContextsRecord | None = None  # --contexts N: whether the threaded contexts agreed


def judge(result_local: Path, build: BuildRecord, tolerance: Tolerance, folder: Path, label: str,
          no_reference: str | None = None) -> Judgement:
    """Compare the pulled result set run-to-run and with the build's reference; reports into `folder`.
    The pulled cells.json and the first complete cell's run.json are selected and read here, once.
    `no_reference`: why this run has no reference although the build has one (`deploy --inputs`)."""
    from rkdet.deploy.cells import judge_result
    from rkdet.records.cell import read_cells

    cells = read_cells(result_local)  # None: a single result set
    first = result_local if cells is None else next(
        (result_local / c.name for c in cells if c.status == "complete" and (result_local / c.name / "run.json").is_file()),
        None)
    if first is None:
        raise BoardError(f"{label}: no cell of the run completed: "
                         + "; ".join(f"{c.name} {c.status} ({c.reason})" for c in (cells or [])))
    try:
        run = read_run_info(first / "run.json", error=BoardError)  # the one run.json reader
    except (OSError, BoardError) as exc:
        raise BoardError(f"{label}: the board's result run.json is unreadable ({exc}); "
                         "the run's results cannot be judged (a broken or hostile board?)") from None
    # the one reference rule `rkdet diff RUN BUILD` applies too; cells and threaded contexts folded in
    j = judge_result(result_local, build, tolerance, folder, cells, run, no_reference)
    return Judgement(verdict=j.verdict, exit_code=EXIT_OK if j.diff_exit == 0 else EXIT_DIFFERENT,
                     diff_exit=j.diff_exit, reference=j.reference, emulated=run.emulated is True,
                     repeatable=j.repeatable, agrees=j.agrees, lines=j.lines, run=run, cells=j.cells,
                     contexts=j.contexts)
