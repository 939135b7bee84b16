"""`rkdet history [list] | drift | accuracy | import`: the results database from the command line."""

from __future__ import annotations

import fnmatch
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from rkdet.errors import EXIT_DIFFERENT, InputError
from rkdet.history.accuracy import AccuracyEntry
from rkdet.history.drift import Drift, find_drift, verdict_against_baseline
from rkdet.history.ingest import RunRecord
from rkdet.history.serving import ServingPull
from rkdet.textsafe import markup_escaped
from rkdet.log import output_console

RESULTS_OPTION = click.option("--results", type=click.Path(path_type=Path, file_okay=False), default=None,
                              help="Results folder holding rkdet.db (default: results).")


def _results(given: Path | None) -> Path:
    """--results of the subcommand, else of `rkdet history` itself, else ./results."""
    if given is not None:
        return given
    parent = click.get_current_context().parent
    return (parent.params.get("results") if parent is not None else None) or Path("results")


def _when(t: float | None) -> str:
    return "unknown" if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _short(digest: str | None) -> str:
    """A hash cut to 12 digits for the terminal; other text (a note) as is."""
    if digest is None:
        return "none"
    return digest[:12] if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest) else digest


def _unknown(value: str | None) -> str:
    return "unknown" if value is None else value


def _filtered(results: Path, board: str | None, build: str | None) -> list[RunRecord]:
    from rkdet.history.db import connect, load_runs

    if build is not None and len(build) < 4:
        raise InputError("--build: give at least 4 hex digits of the build fingerprint")
    conn = connect(results, create=False)
    try:
        runs = load_runs(conn)
    finally:
        conn.close()

    def keep(r: RunRecord) -> bool:
        names = (r.board.key, r.board.label, r.board.serial or "", r.board.machine_id or "")
        return ((board is None or any(fnmatch.fnmatchcase(n, board) for n in names))
                and (build is None or r.build.startswith(build.lower())))
    return [r for r in runs if keep(r)]


def _filtered_serving(results: Path, board: str | None, build: str | None) -> list[ServingPull]:
    """The verified serving pulls (`rkdet audit verify --results`) of the same board and build filters."""
    from rkdet.history.db import connect, load_serving

    conn = connect(results, create=False)
    try:
        pulls = load_serving(conn)
    finally:
        conn.close()
    return [p for p in pulls if (board is None or fnmatch.fnmatchcase(p.board, board))
            and (build is None or any(b.startswith(build.lower()) for b in p.builds))]


def _serving_json(p: ServingPull) -> dict[str, Any]:
    return {"board": p.board, "folder": p.folder, "builds": list(p.builds), "records": p.records,
            "first_seq": p.first_seq, "last_seq": p.last_seq, "canary_passed": p.canary_passed,
            "canary_failed": p.canary_failed, "shadow_disagreements": p.shadow_disagreements, "chain": p.chain,
            "failed": p.failed, "findings": dict(p.findings), "last_hash": p.last_hash,
            "verified_unix": p.verified_unix}


def _run_json(r: RunRecord, verdict: str | None = None) -> dict[str, Any]:
    doc = {"folder": r.folder, "result_set": r.result_set or None, "run_id": r.run_id, "board": r.board.key, "label": r.board.label, "soc": r.board.soc,
           "serial": r.board.serial, "machine_id": r.board.machine_id, "identified_by": r.board.identified_by,
           "build": r.build, "core_mask": r.core_mask, "backend": r.backend, "started_unix": r.started_unix,
           "status": r.status, "accepted": r.accepted, "deterministic": r.deterministic, "emulated": r.emulated,
           "kernel": r.state.kernel, "driver": r.state.driver, "runtime": r.state.runtime,
           "board_model": r.state.model, "clocks": dict(r.state.clocks), "inferences": r.inferences,
           "inputs": len({o.input for o in r.outputs}), "session": r.session}
    if verdict is not None:
        doc["vs_baseline"] = verdict
    return doc


@click.group("history", invoke_without_command=True)
@RESULTS_OPTION
@click.option("--board", default=None, help="Only this board: its key, results label or serial (globs work).")
@click.option("--build", default=None, help="Only this build: a fingerprint prefix (>= 4 hex digits).")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON (schema rkdet.history.runs/1).")
@click.pass_context
def history_group(ctx: click.Context, results: Path | None, board: str | None, build: str | None, as_json: bool) -> None:
    """Recorded runs, oldest first per board, build and cell, each against its baseline; then serving.

    The first accepted run of a (board, build, cell) is its baseline; later runs are compared by
    output hash. Serving: every verified pull of a board's audit log (`rkdet audit verify --results`).
    Subcommands: `drift` (which boards moved, since when, what changed), `accuracy` (accuracy against labels
    over builds), `import`.
    """
    if ctx.invoked_subcommand is not None:
        return
    results = results or Path("results")
    runs = _filtered(results, board, build)
    serving = _filtered_serving(results, board, build)
    verdicts = verdict_against_baseline(runs)
    if as_json:
        click.echo(json.dumps({"schema": "rkdet.history.runs/1", "runs": [_run_json(r, verdicts[r.key]) for r in runs],
                               "serving": [_serving_json(p) for p in serving]}, indent=2, sort_keys=True))
        return
    table = Table(title=f"{len(runs)} run{'s' if len(runs) != 1 else ''} in {markup_escaped(results)}", title_justify="left")
    for col in ("started (UTC)", "board", "soc", "build", "cell", "run", "vs baseline", "kernel", "librknnrt"):
        table.add_column(col, overflow="fold")
    for r in runs:
        mark = verdicts[r.key]
        if not r.accepted and mark != "differs":
            mark += " (not accepted: " + ("incomplete" if r.status != "complete" else "not deterministic") + ")"
        table.add_row(_when(r.started_unix), markup_escaped(r.board.label), markup_escaped(_unknown(r.board.soc)), r.build[:16],
                      markup_escaped(r.cell), markup_escaped(r.run_id + (f" (session {r.session})" if r.session else "")),
                      mark, markup_escaped(_unknown(r.state.kernel)),
                      markup_escaped(_unknown(r.state.runtime)))
    output_console().print(table)
    if serving:
        output_console().print(_serving_table(serving))


def _serving_table(pulls: list[ServingPull]) -> Table:
    """Serving beside the runs: one row per verified pull of a board's audit log."""
    table = Table(title=f"{len(pulls)} serving pull{'s' if len(pulls) != 1 else ''} (rkdet audit verify)",
                  title_justify="left")
    for col in ("verified (UTC)", "board", "builds", "records", "seq", "canary ok/failed", "shadow disagreed",
                "chain", "verdict", "last hash"):
        table.add_column(col, overflow="fold")
    for p in pulls:
        seq = "-" if p.first_seq is None else f"{p.first_seq}..{p.last_seq}"
        failed = ", ".join(f"{markup_escaped(k)} {n}" for k, n in p.findings)
        table.add_row(_when(p.verified_unix), markup_escaped(p.board), " ".join(b[:16] for b in p.builds) or "none",
                      str(p.records), seq, f"{p.canary_passed}/{p.canary_failed}", str(p.shadow_disagreements),
                      p.chain, f"FAILED ({failed})" if p.failed else "ok", _short(p.last_hash))
    return table


def _drift_json(d: Drift) -> dict[str, Any]:
    return {"board": d.board, "label": d.label, "build": d.build, "cell": d.cell,
            "baseline": _run_json(d.baseline), "since": _run_json(d.since), "previous": _run_json(d.previous),
            "changes": [{"what": c.what, "before": c.before, "after": c.after} for c in d.changes],
            "outputs": [{"input": o.input, "output": o.output, "baseline": o.baseline, "now": o.now}
                        for o in d.outputs],
            "differing_runs": d.differing_runs, "later_runs": d.later_runs, "latest_matches": d.latest_matches}


@history_group.command("drift")
@RESULTS_OPTION
@click.option("--board", default=None, help="Only this board: its key, results label or serial (globs work).")
@click.option("--build", default=None, help="Only this build: a fingerprint prefix (>= 4 hex digits).")
@click.option("--json", "as_json", is_flag=True, help="Print the drift as JSON (schema rkdet.history.drift/1).")
def drift_command(results: Path | None, board: str | None, build: str | None, as_json: bool) -> None:
    """Name every board whose outputs moved from its baseline: since when, and what changed on it.

    Exit 0 when no board drifted, 1 when one did.
    """
    results = _results(results)
    runs = _filtered(results, board, build)
    drifts = find_drift(runs)
    if as_json:
        click.echo(json.dumps({"schema": "rkdet.history.drift/1", "runs": len(runs),
                               "drift": [_drift_json(d) for d in drifts]}, indent=2, sort_keys=True))
    else:
        console = output_console(soft_wrap=True, highlight=False)
        for d in drifts:
            console.print(f"[bold]DRIFT[/bold] {markup_escaped(d.label)} ({markup_escaped(_unknown(d.baseline.board.soc))}) "
                          f"build {d.build[:16]} cell {markup_escaped(d.cell)}: outputs differ from baseline "
                          f"{markup_escaped(d.baseline.run_id)} ({_when(d.baseline.started_unix)}) since run "
                          f"{markup_escaped(d.since.run_id)} ({_when(d.since.started_unix)}); "
                          f"{d.differing_runs} of {d.later_runs} later runs differ"
                          f"{', the latest matches again' if d.latest_matches else ''}")
            what = "; ".join(f"{markup_escaped(c.what)}: {markup_escaped(_unknown(c.before))} -> {markup_escaped(_unknown(c.after))}"
                             for c in d.changes) or "nothing recorded changed on the board"
            console.print(f"  changed at that run: {what}")
            first = d.outputs[0] if d.outputs else None
            if first is not None:
                console.print(f"  outputs: {len(d.outputs)} differ; first: input {markup_escaped(first.input)} output "
                              f"{markup_escaped(first.output)} {_short(first.baseline)} -> {markup_escaped(_short(first.now))}")
        boards = len({r.board.key for r in runs})
        console.print(f"{len(drifts)} drifted (board, build, cell) of {boards} board{'s' if boards != 1 else ''}, "
                      f"{len(runs)} runs" if drifts else f"no drift: {len(runs)} runs of {boards} "
                      f"board{'s' if boards != 1 else ''} match their baselines (or are baselines)")
    if drifts:
        raise SystemExit(EXIT_DIFFERENT)


def _accuracy_json(e: AccuracyEntry, change: float | None) -> dict[str, Any]:
    return {"build": e.build, "build_name": e.build_name, "position": e.position, "variant": e.variant,
            "metric": e.metric, "value": e.value, "change_vs_previous_build": change, "labels_sha256": e.labels_sha256,
            "labels": e.labels, "samples": e.samples, "record_sha256": e.record_sha256,
            "recorded_unix": e.recorded_unix}


@history_group.command("accuracy")
@RESULTS_OPTION
@click.option("--build", default=None, help="Only this build: a fingerprint prefix (>= 4 hex digits).")
@click.option("--labels", "labels", default=None, help="Only this labelled set: a labels' hash prefix (>= 4 hex digits).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON (schema rkdet.history.accuracy/1).")
def accuracy_history(results: Path | None, build: str | None, labels: str | None, as_json: bool) -> None:
    """Accuracy against labels over builds: one row per variant of every recorded accuracy.json (`rkdet
    history import --accuracy FILE`), grouped by labelled set, variant and metric, oldest first, each with its
    change against the previous build measured on the same labels."""
    from rkdet.history.accuracy import changes
    from rkdet.history.db import connect, load_accuracy

    for flag, value in (("--build", build), ("--labels", labels)):
        if value is not None and (len(value) < 4 or any(c not in "0123456789abcdef" for c in value.lower())):
            raise InputError(f"{flag}: give at least 4 hex digits of the {flag[2:]} hash")
    results = _results(results)
    conn = connect(results, create=False)
    try:
        entries = load_accuracy(conn)
    finally:
        conn.close()
    entries.sort(key=lambda e: (e.labels_sha256, e.position != 0, e.variant, e.metric, e.recorded_unix or 0.0))
    moved = changes(entries)
    kept = [(e, c) for e, c in zip(entries, moved)
            if (build is None or e.build.startswith(build.lower())) and (labels is None or e.labels_sha256.startswith(labels.lower()))]
    if as_json:
        click.echo(json.dumps({"schema": "rkdet.history.accuracy/1", "accuracy": [_accuracy_json(e, c) for e, c in kept]},
                              indent=2, sort_keys=True))
        return
    table = Table(title=f"{len(kept)} accuracy row{'s' if len(kept) != 1 else ''} in {markup_escaped(results)} "
                  "(rkdet accuracy, by labelled set and variant, oldest first)", title_justify="left")
    for col in ("labels", "variant", "metric", "build", "recorded (UTC)", "value", "vs previous build"):
        table.add_column(col, overflow="fold")
    for e, c in kept:
        table.add_row(f"{markup_escaped(e.labels)} {e.labels_sha256[:12]}", markup_escaped(e.variant),
                      markup_escaped(e.metric), f"{markup_escaped(e.build_name)} {e.build[:16]}",
                      _when(e.recorded_unix), f"{100 * e.value:.2f}%", "first build" if c is None else f"{100 * c:+.2f} points")
    output_console().print(table)


@history_group.command("import")
@RESULTS_OPTION
@click.option("--accuracy", "accuracy_files", multiple=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Also record this accuracy.json (rkdet accuracy), one row per variant (repeatable; a damaged or "
                   "crafted record: one line, exit 2, nothing recorded).")
def import_command(results: Path | None, accuracy_files: tuple[Path, ...]) -> None:
    """Index every completed run folder under RESULTS into RESULTS/rkdet.db (importing twice adds nothing),
    and each --accuracy record."""
    from rkdet.history.accuracy import entries_of
    from rkdet.history.db import connect, record_accuracy, record_runs, recorded_runs
    from rkdet.history.ingest import deploy_status, read_runs, run_folders

    results = _results(results)
    if not results.is_dir():
        raise InputError(f"{results}: no such results folder")
    tables = [entries_of(path) for path in accuracy_files]  # every record checked before anything is written
    conn = connect(results)
    added = known = skipped = 0
    try:
        for folder in run_folders(results):  # one transaction per run: an error keeps the runs before it
            there = recorded_runs(conn, folder.relative_to(results).as_posix())
            if there:
                known += there
                continue
            if deploy_status(folder) != "complete":
                skipped += 1
                continue
            try:
                fresh = record_runs(conn, read_runs(results, folder))
            except sqlite3.OperationalError as err:  # locked past the busy timeout, disk full
                raise InputError(f"{results / 'rkdet.db'}: {err} while recording {folder}; rerun "
                                 "`rkdet history import` (it adds only what is missing)") from None
            added += fresh
        rows = sum(record_accuracy(conn, entries) for entries in tables)
    finally:
        conn.close()
    if accuracy_files:
        click.echo(f"recorded {rows} accuracy row{'s' if rows != 1 else ''} of {len(accuracy_files)} accuracy.json "
                   f"({sum(map(len, tables)) - rows} already there)")
    click.echo(f"imported {added} run{'s' if added != 1 else ''} into {results / 'rkdet.db'} ({known} already there, "
               f"{skipped} not completed)")
