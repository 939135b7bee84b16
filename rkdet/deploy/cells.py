"""Judge a run's cells (one result set per core mask) and threaded contexts on the host.

rkdet-run with several core masks writes `result/core-<mask>/` per mask and `result/cells.json`
(docs/FORMATS.md "Cells"); with `--contexts N` a result set also holds `contexts.json`. The board's
word is used only for what the host cannot see (which masks were skipped or failed, and why); whether
cells agree is recomputed here from the pulled outputs: each cell against the first cell that ran,
bitwise (rknn-toolkit2 #228: core 0 against cores 0_1_2). The two named verdicts then cover every cell:

* repeatable: every cell repeats itself run to run, every cell is bit-identical to the others, and
  every threaded context agrees with its sequential run (#474);
* agrees with the reference: every cell agrees with the build's reference (by the tolerance).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkdet import socs
from rkdet.diff.api import Comparison, compare
from rkdet.errors import BoardError
from rkdet.records.build import BuildRecord
from rkdet.records.cell import Cell
from rkdet.records.deploy_record import ContextsRecord
from rkdet.records.verdict import (NOT_APPLICABLE, AnyVerdict, CellsRecord, CellVerdict, NotApplicable, VerdictRecord,
                                   VerdictSummary)
from rkdet.records.io import MAX_RUN_RECORD, read_json_object
from rkdet.records.run_info import RunInfo
from rkdet.tolerance import Tolerance

def _read_json(path: Path, what: str) -> dict[str, Any] | None:
    """The board's record through the one bounded reader (rkdet.records.io); a refusal is a board problem."""
    if not path.is_file():
        return None
    try:
        return read_json_object(path, limit=MAX_RUN_RECORD, error=BoardError)
    except FileNotFoundError:
        return None
    except BoardError as exc:
        raise BoardError(f"{what}: {exc} (a broken or hostile board?)") from None


@dataclass
class ContextsCheck:
    contexts: int
    agree: bool
    first: dict[str, Any] | None  # the first difference: context, input, output


def read_contexts(result_set: Path) -> ContextsCheck | None:
    doc = _read_json(result_set / "contexts.json", "the board's contexts check")
    if doc is None:
        return None
    diffs = doc.get("differences") or []
    first = diffs[0] if diffs and isinstance(diffs[0], dict) else None
    return ContextsCheck(int(doc.get("contexts") or 0), doc.get("agree") is True and not diffs, first)


def fold_contexts(comparison: Comparison, result_set: Path) -> ContextsCheck | None:
    """A result set with contexts.json: threaded contexts that disagree make it not repeatable."""
    check = read_contexts(result_set)
    if check is None or check.agree:
        return check
    rep = comparison.repeatable
    rep.ok = False
    f = check.first or {}
    why = (f"context {f.get('context')} of {check.contexts} (threads) differs from the sequential run: input "
           f"{f.get('input')} output {f.get('output')}")
    rep.reason = f"{rep.reason}; {why}" if rep.reason else why
    comparison.exit_code = 1
    comparison.verdict = f"DIFFERENT: not repeatable: {why}"
    return check


@dataclass
class CellsJudgement:
    """Every cell judged; `lines()` gives deploy's two verdict lines."""

    cells: list[Cell]
    comparisons: dict[str, Comparison] = field(default_factory=dict)  # cell -> against the reference
    across: dict[str, Comparison] = field(default_factory=dict)  # cell -> against the first cell, bitwise
    contexts: dict[str, ContextsCheck] = field(default_factory=dict)
    first: str | None = None

    @property
    def ran(self) -> list[Cell]:
        return [c for c in self.cells if c.name in self.comparisons]

    @property
    def skipped(self) -> list[Cell]:
        return [c for c in self.cells if c.status == "skipped"]

    @property
    def failed(self) -> list[Cell]:
        return [c for c in self.cells if c.status not in ("skipped",) and c.name not in self.comparisons]

    @property
    def repeatable(self) -> bool:
        return (bool(self.ran) and all(self.comparisons[c.name].repeatable.ok for c in self.ran)
                and all(x.agrees is not None and x.agrees.ok for x in self.across.values()))

    @property
    def agrees(self) -> bool | None:
        verdicts = [self.comparisons[c.name].agrees for c in self.ran]
        return None if not verdicts or any(v is None for v in verdicts) else all(v.ok for v in verdicts if v)

    @property
    def exit_code(self) -> int:
        return 0 if self.repeatable and self.agrees is not False and not self.failed else 1

    def lines(self) -> list[str]:
        names = ", ".join(c.name for c in self.ran)
        skipped = "; ".join(f"{c.name} skipped ({c.reason})" for c in self.skipped)
        failed = "; ".join(f"{c.name} failed ({c.reason})" for c in self.failed)
        tail = "".join(f"; {x}" for x in (skipped, failed) if x)
        if self.repeatable:
            ctx = [f"{n}: {x.contexts} contexts agree" for n, x in self.contexts.items()]
            rep = (f"repeatable: YES [bitwise]: {len(self.ran)} cell(s) ({names}) each bit-identical run to run "
                   f"and to each other{'; ' + ', '.join(ctx) if ctx else ''}{tail}")
        else:
            bad = next((f"{c.name}: {self.comparisons[c.name].repeatable.reason}" for c in self.ran
                        if not self.comparisons[c.name].repeatable.ok), None)
            if bad is None:
                cell, comp = next((n, x) for n, x in self.across.items() if x.agrees is None or not x.agrees.ok)
                bad = f"{cell} differs from {self.first}: {comp.verdict}"
            rep = f"repeatable: NO [bitwise]: {bad}{tail}"
        out = [rep]
        agrees = [self.comparisons[c.name].agrees for c in self.ran]
        if agrees and all(a is not None for a in agrees):
            worst = next((a for a in agrees if a is not None and not a.ok), agrees[0])
            per = ", ".join(f"{c.name} {'YES' if a is not None and a.ok else 'NO'}" for c, a in zip(self.ran, agrees))
            assert worst is not None
            out.append(f"{worst.line()} [cells: {per}]")
        return out

    def record(self) -> CellsRecord:
        """Every cell with its own two verdicts, as deploy.json keeps them (rkdet/records/verdict.py)."""
        def one(c: Cell) -> CellVerdict:
            comp, across = self.comparisons.get(c.name), self.across.get(c.name)
            return CellVerdict(cell=c.name, core_mask=c.core_mask, status=c.status, reason=c.reason,
                               verdict=comp.verdict if comp else None,
                               repeatable=comp.repeatable.record() if comp else None,
                               agrees=comp.agrees.record() if comp and comp.agrees else None,
                               same_as_first=across.agrees.ok if across and across.agrees else None)
        return CellsRecord(cells=tuple(one(c) for c in self.cells), first=self.first, repeatable=self.repeatable,
                           agrees=self.agrees)


def judge_cells(result: Path, cells: list[Cell], reference: Path | None, tolerance: Tolerance,
                builds: Sequence[BuildRecord] = ()) -> CellsJudgement:
    """Compare every complete cell with the reference and with the first complete cell (bitwise);
    `builds`: the build the reference belongs to, already loaded."""
    judged = CellsJudgement(cells)
    for cell in cells:
        folder = result / cell.name
        if cell.status != "complete" or not (folder / "run.json").is_file():
            continue
        comp = compare(folder, reference, tolerance, builds=builds)
        judged.contexts.update({cell.name: x for x in [fold_contexts(comp, folder)] if x is not None})
        judged.comparisons[cell.name] = comp
        if judged.first is None:
            judged.first = cell.name
        else:
            judged.across[cell.name] = compare(folder, result / judged.first, Tolerance())
    return judged


@dataclass
class RunJudgement:
    """A pulled run judged (one result set, or one per cell): what deploy records and prints."""

    verdict: str
    diff_exit: int  # 0 same, 1 different
    reference: Path | None  # None: the build has none (an imported .rknn; `agrees` says why)
    repeatable: VerdictRecord | VerdictSummary  # one set's Verdict.record(), or the summary over cells
    agrees: AnyVerdict | None  # None: no B (never for deploy); NotApplicable: the build has no reference
    lines: list[str]  # "repeatable: …", "agrees with the reference: …"
    cells: CellsRecord | None = None  # CellsJudgement.record() for a multi-mask run
    contexts: ContextsRecord | None = None  # a single set with --contexts: whether the contexts agreed


def judge_result(result: Path, build: BuildRecord, tolerance: Tolerance, folder: Path, cells: list[Cell] | None,
                 first_run: RunInfo, no_reference: str | None = None) -> RunJudgement:
    """Judge a pulled result (a set, or `cells`: its cells.json) against the build's reference (the one
    rule of `rkdet diff RUN BUILD`, for `first_run`: the first complete cell's run.json, read once by the
    caller); reports into `folder` (a multi-mask run: the first cell's there, every cell's in
    `folder/cells/<cell>/`). `no_reference`: why the run has none although the build has (`deploy --inputs`)."""
    from rkdet.diff.report import write_reports
    from rkdet.diff.resultset import reference_set

    no_reference = no_reference or build.info.no_reference  # an imported .rknn: nothing to agree with, said so
    reference = Path(reference_set(build.folder, first_run)) if no_reference is None else None
    if cells is None:
        comparison = compare(result, reference, tolerance, builds=(build,))
        check = fold_contexts(comparison, result)
        write_reports(comparison, folder)
        lines = [v.line() for v in (comparison.repeatable, comparison.agrees) if v is not None]
        if no_reference is not None:
            lines.append(not_applicable_line(no_reference))
        return RunJudgement(comparison.verdict, comparison.exit_code, reference, comparison.repeatable.record(),
                            comparison.agrees.record() if comparison.agrees is not None else not_applicable(no_reference),
                            lines, contexts=None if check is None else ContextsRecord(contexts=check.contexts, agree=check.agree))
    judged = judge_cells(result, cells, reference, tolerance, builds=(build,))
    for n, (name, comparison) in enumerate(judged.comparisons.items()):
        if n == 0:
            write_reports(comparison, folder)
        (folder / "cells" / name).mkdir(parents=True, exist_ok=True)
        write_reports(comparison, folder / "cells" / name)
    lines = judged.lines() + ([not_applicable_line(no_reference)] if no_reference is not None else [])
    ok = judged.exit_code == 0
    if not judged.repeatable:
        failing = f"not repeatable: {lines[0].split(': ', 2)[-1]}"
    elif judged.agrees is False:
        failing = f"disagrees with the reference: {lines[-1]}"
    else:
        failing = "a cell did not complete: " + "; ".join(f"{c.name} ({c.reason})" for c in judged.failed)
    names = ", ".join(c.name for c in judged.ran)
    verdict = f"SAME ({tolerance.describe()}) across {len(judged.ran)} cell(s) ({names})" if ok else f"DIFFERENT: {failing}"
    rep = VerdictSummary(ok=judged.repeatable, cells=tuple(c.name for c in judged.ran))
    agrees = not_applicable(no_reference) if judged.agrees is None else VerdictSummary(ok=judged.agrees)
    return RunJudgement(verdict, 0 if ok else 1, reference, rep, agrees, lines, cells=judged.record())


def not_applicable(reason: str | None) -> NotApplicable | None:
    """The agrees verdict of a build without a reference (typed as such, never a pass): ok None."""
    return None if reason is None else NotApplicable(reason)


def not_applicable_line(reason: str) -> str:
    return f"agrees with the reference: {NOT_APPLICABLE.upper()} ({reason})"


def cell_args(core_mask: str, soc: str | None, contexts: int) -> list[str]:
    """rkdet-run's cell flags: the SoC's NPU core count with several masks (masks it lacks are skipped and
    said in cells.json), and `--contexts N`."""
    args = ["--npu-cores", str(socs.npu_cores(soc))] if "," in core_mask else []
    return args + (["--contexts", str(contexts)] if contexts > 1 else [])
