"""`rkdet convert --search`: run the search, write search.json and `<config>.searched.yaml`, print the table.

Exit 0 when a variant passes every gate (its build installed as `<out>/<name>-<platform>`), 4 when none does
(or the budget ran out first: the table says how close each came and how much was left untried).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from rkdet.config import RkdetConfig
from rkdet.convert.pipeline import check_writable
from rkdet.errors import ConversionError, InputError
from rkdet.records.io import check_may_write, write_atomic
from rkdet.search.budget import Budget, format_duration
from rkdet.search.run import Outcome, SearchResult, search
from rkdet.search.searched import render, searched_path
from rkdet.search.space import parse_space
from rkdet.textsafe import markup_escaped

SEARCH_JSON = "search.json"


def _closeness(o: Outcome) -> str:
    c = o.closest
    if o.no_effect is not None:
        return f"no effect: the same fidelity as variant {o.no_effect}, to the last bit"
    if c is None:
        return (o.message or "")[:90] if o.status == "error" else "n/a"
    op = "<=" if c.gate == "saturation" else ">="
    return f"{c.gate} {c.subject} {c.value:.5g} {op} {c.threshold:.4g} (margin {c.margin:+.3g})"


def _table(result: SearchResult) -> Table:
    table = Table(title="rkdet convert --search", show_lines=False)
    for col in ("#", "stage", "changes", "result", "build time", "closest gate (value vs threshold)", "fingerprint"):
        table.add_column(col, overflow="fold")
    colour = {"pass": "green", "fail": "red", "error": "yellow", "stopped": "magenta"}
    for o in result.outcomes:
        took = format_duration(o.build_seconds) if o.build_seconds is not None else "-"
        table.add_row(str(o.variant.index), o.variant.stage, markup_escaped(o.variant.label()),
                      f"[{colour[o.status]}]{o.status}[/]", took,
                      markup_escaped(_closeness(o) if o.status != "stopped" else (o.message or "")[:90]),
                      (o.fingerprint or "-")[:16])
    for u in result.untried:
        est = f"~{format_duration(u.estimated_seconds)}" if u.estimated_seconds is not None else "?"
        table.add_row(str(u.variant.index), u.variant.stage, markup_escaped(u.variant.label()), "[dim]untried[/]", est,
                      markup_escaped(u.reason), "-")
    return table


def _untried_note(result: SearchResult) -> str:
    """How much the budget left untried, in variants and estimated time."""
    if not result.out_of_budget:
        return ""
    known = [u.estimated_seconds for u in result.untried if u.estimated_seconds is not None]
    more = f", about {format_duration(sum(known))} more by the measured costs" if known else ""
    stopped = sum(o.status == "stopped" for o in result.outcomes)
    return (f"; the budget ({format_duration(result.budget_seconds)}, --search-budget) ran out: "
            f"{len(result.untried)} variant(s) untried{more}"
            + (f", {stopped} build stopped at the deadline" if stopped else ""))


def _remedies(result: SearchResult) -> str:
    """What to try next, the fastest measured first; an accumulating loss leads with the labelled float build."""
    parts = []
    as_given = next((o.options for o in result.outcomes if not o.variant.changes), {})
    if result.loss is not None and result.loss.accumulates and not as_given.get("force_fp16"):
        parts.append(f"{result.loss.sentence()}: a float build addresses it (quantize.force_fp16: true, float16, "
                     f"not INT8; slower on the NPU)")
    by_alg: dict[str, list[float]] = {}
    for o in result.outcomes:
        if o.build_seconds is not None and o.variant.stage in ("config", "quantize"):
            by_alg.setdefault(str(o.options.get("algorithm")), []).append(o.build_seconds)
    if len(by_alg) > 1:
        ranked = sorted(by_alg.items(), key=lambda kv: max(kv[1]))
        parts.append("measured build time per algorithm: " + ", ".join(
            f"{alg} {format_duration(max(times))}" for alg, times in ranked) + f" (slowest: {ranked[-1][0]})")
    return ("; " + "; ".join(parts)) if parts else ""


def _why(o: Outcome) -> str:
    c = o.closest
    gate = f"; closest gate {c.gate} {c.subject} {c.value:.5g} vs {c.threshold:.4g}" if c and c.value is not None else ""
    kind = f" ({o.variant.label()})" if o.variant.stage == "float" else ""
    return f"variant {o.variant.index} ({o.variant.stage}){kind} passes every fidelity gate{gate}"


def no_pass_error(result: SearchResult, out: Path) -> ConversionError:
    """Exit 4: nothing passed (or the budget ran out first): how many tried, what was left, what to try next."""
    return ConversionError(f"{result.platform}: no variant of the search space passes every fidelity gate "
                           f"({len(result.outcomes)} tried in {format_duration(result.elapsed_seconds)}"
                           f"{_untried_note(result)}; the table and {out / SEARCH_JSON} say how close each came)"
                           f"{_remedies(result)}")


def table(result: SearchResult) -> Table:
    """The how-close table (every variant tried, then the untried ones)."""
    return _table(result)


def run_search(cfg: RkdetConfig, config_path: Path, out: Path, targets: list[str], search_all: bool,
               specs: tuple[str, ...], as_json: bool, console: Console, budget: Budget) -> None:
    space = parse_space(specs)
    platforms = targets or cfg.target.platforms
    if len(platforms) != 1:
        raise InputError(f"--search searches one platform; the config names {', '.join(platforms)}: pass --target")
    platform = platforms[0]
    check_writable(out)
    searched_file = searched_path(config_path)
    for path, what in ((searched_file, "searched config"), (out / SEARCH_JSON, "search record")):
        check_may_write(path, what)  # before the long search: a symlink, FIFO or unwritable folder is refused now
    with console.status("searching") as status:
        current = [""]

        def step(message: str) -> None:  # a search step: logged, and the status line's head
            current[0] = message
            status.update(message)
            console.log(message)

        def toolkit(line: str) -> None:  # the toolkit's own progress/ETA: the status line only
            status.update(f"{current[0]} | {line}")

        result = search(cfg, platform, out, space, search_all, step, budget, toolkit)
    first = result.passed
    searched = None
    if first is not None:
        searched = searched_path(config_path)
        header = (f"{config_path.name} as searched by `rkdet convert --search` for {platform}: the keys marked "
                  f"below changed.\n{_why(first)}; build fingerprint {first.fingerprint}.\n"
                  f"`rkdet convert --config {searched.name}` rebuilds that variant (same fingerprint); "
                  f"every variant tried is in {out / SEARCH_JSON}.")
        check_may_write(searched, "searched config")  # again: the search took minutes
        try:
            write_atomic(str(searched), render(config_path, first.variant.changes, _why(first), header))
        except OSError as exc:
            raise InputError(f"{searched}: cannot write the searched config ({exc.strerror or exc})") from None
    doc = result.to_json(str(searched) if searched else None)
    check_may_write(out / SEARCH_JSON, "search record")
    write_atomic(str(out / SEARCH_JSON), json.dumps(doc, indent=2, sort_keys=True) + "\n")
    console.print(_table(result))
    if as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    if first is None:
        raise no_pass_error(result, out)
    if first.options.get("force_fp16"):
        console.print("[yellow]note[/]: the passing variant is a FLOAT16 build (quantize.force_fp16: true), not INT8: "
                      "it runs on the NPU's float path, slower; deploy and compare it like any other")
    console.print(f"[green]passes[/]: variant {first.variant.index}: {markup_escaped(first.variant.label())}; "
                  f"built {result.build}  fingerprint {(first.fingerprint or '')[:16]}")
    console.print(f"wrote {markup_escaped(str(searched))} (your config plus exactly the changed keys) and "
                  f"{markup_escaped(str(out / SEARCH_JSON))}")
