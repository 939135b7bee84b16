"""`rkdet convert --search`: run the search, write search.json and `<config>.searched.yaml`, print the table.

Exit 0 when a variant passes every gate (its build installed as `<out>/<name>-<platform>`), 4 when none does.
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
from rkdet.records.io import check_may_write
from rkdet.runner import write_atomic
from rkdet.search.run import Outcome, SearchResult, search
from rkdet.search.searched import render, searched_path
from rkdet.search.space import parse_space
from rkdet.textsafe import markup_escaped

SEARCH_JSON = "search.json"


def _closeness(o: Outcome) -> str:
    c = o.closest
    if c is None:
        return (o.message or "")[:90] if o.status == "error" else "n/a"
    op = "<=" if c.gate == "saturation" else ">="
    return f"{c.gate} {c.subject} {c.value:.5g} {op} {c.threshold:.4g} (margin {c.margin:+.3g})"


def _table(result: SearchResult) -> Table:
    table = Table(title="rkdet convert --search", show_lines=False)
    for col in ("#", "stage", "changes", "result", "closest gate (value vs threshold)", "fingerprint"):
        table.add_column(col, overflow="fold")
    colour = {"pass": "green", "fail": "red", "error": "yellow"}
    for o in result.outcomes:
        table.add_row(str(o.variant.index), o.variant.stage, markup_escaped(o.variant.label()),
                      f"[{colour[o.status]}]{o.status}[/]", markup_escaped(_closeness(o)), (o.fingerprint or "-")[:16])
    return table


def _why(o: Outcome) -> str:
    c = o.closest
    gate = f"; closest gate {c.gate} {c.subject} {c.value:.5g} vs {c.threshold:.4g}" if c and c.value is not None else ""
    return f"variant {o.variant.index} ({o.variant.stage}) passes every fidelity gate{gate}"


def run_search(cfg: RkdetConfig, config_path: Path, out: Path, targets: list[str], search_all: bool,
               specs: tuple[str, ...], as_json: bool, console: Console) -> None:
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
        result = search(cfg, platform, out, space, search_all, lambda m: (status.update(m), console.log(m)))
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
    doc = result.as_dict(str(searched) if searched else None)
    check_may_write(out / SEARCH_JSON, "search record")
    write_atomic(str(out / SEARCH_JSON), json.dumps(doc, indent=2, sort_keys=True) + "\n")
    console.print(_table(result))
    if as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    if first is None:
        raise ConversionError(f"{platform}: no variant of the search space passes every fidelity gate ({len(result.outcomes)} "
                              f"tried; the table and {out / SEARCH_JSON} say how close each came)")
    console.print(f"[green]passes[/]: variant {first.variant.index}: {markup_escaped(first.variant.label())}; "
                  f"built {result.build}  fingerprint {(first.fingerprint or '')[:16]}")
    console.print(f"wrote {markup_escaped(str(searched))} (your config plus exactly the changed keys) and "
                  f"{markup_escaped(str(out / SEARCH_JSON))}")
