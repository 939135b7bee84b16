"""`rkdet layers`: the host per-layer analysis (rkdet/cli/layers_host.py), or with --board, the board bisection.

Exit codes with --board: 0 no departure, 1 departure located, 2 bad input, 3 board trouble, 4 toolkit failed.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import click

from rkdet.cli.options import CONNECTION, connection_options
from rkdet.cli.warn import say_warnings
from rkdet.link.connect import ConnectionOptions, open_connection
from rkdet.choices import CORE_MASKS
from rkdet.errors import EXIT_DIFFERENT, InputError
from rkdet.cli.layers_host import layers_command as host_layers
from rkdet.log import log_console
from rkdet.textsafe import literal

_BOARD_ONLY = ("against", "repeats", "core_mask", "cache", "workdir", "timeout", "no_pin")


def _board_optional(func: Callable[..., Any]) -> Callable[..., Any]:
    """deploy's SSH flags, with --board optional (without it, `layers` is the host analysis)."""
    func = connection_options(func)
    for param in getattr(func, "__click_params__", []):
        if param.name == "board":
            param.required = False
            param.help = "Bisect on this board (HOST[:PORT] or a Host alias): where it departs from --against."
    return func


@click.command("layers", help=(host_layers.help or "") + "\n\nWith --board H: bisection on the board (cut models "
               "run with rkdet-run) to the first tensor where it departs from --against; exit 0 no departure, "
               "1 located, 2 bad input, 3 board trouble.")
@_board_optional
@click.option("--against", default="simulator", show_default=True, metavar="simulator|run0|core-mask=M",
              help="With --board: compare with the reference (simulator; FP32 for the emulated CPU runtime), with the "
                   "board's own run 0 (bitwise), or with a run on core mask M.")
@click.option("--repeats", type=click.IntRange(min=1), default=None,
              help="With --board: runs of each model (default 1; run0: config run.repeats, at least 2).")
@click.option("--core-mask", type=click.Choice(CORE_MASKS), default=None, help="With --board: NPU cores (config run.core_mask).")
@click.option("--cache", type=click.Path(path_type=Path), default=None,
              help="With --board: cut-model cache (default ~/.cache/rkdet/cuts), keyed by build fingerprint and cut.")
@click.option("--workdir", default=None, help="With --board: remote work dir (default as for deploy).")
@click.option("--no-pin", is_flag=True, help="With --board: run without pinning clocks (default: the config's board.pin).")
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="With --board: seconds allowed for each run on the board.")
@click.pass_context
def layers_command(ctx: click.Context, **kw: Any) -> None:
    host_params = {p.name for p in host_layers.params}
    if kw["board"] is None:
        given = [f"--{n.replace('_', '-')}" for n in _BOARD_ONLY + CONNECTION
                 if n != "board" and ctx.get_parameter_source(n) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise InputError(f"rkdet layers: {', '.join(given)} only with --board H")
        ctx.invoke(host_layers, **{k: v for k, v in kw.items() if k in host_params})
        return
    code = run_bisection(**kw)
    if code:
        sys.exit(code)


def run_bisection(**kw: Any) -> int:
    from rkdet.backends.registry import default as default_backend
    from rkdet.bisection.on_board import BoardRunner
    from rkdet.bisection.cuts import CutBuilder, default_cache
    from rkdet.bisection.comparison import bisect_on_board, parse_against
    from rkdet.deploy.layout import scripts_dir
    from rkdet.boardinfo.remote_scripts import state_dir_for
    from rkdet.deploy.settings import RunOverrides, RunSettings, resolve_build
    from rkdet.deploy.stage import push_scripts
    from rkdet.convert.pipeline import check_writable
    from rkdet.layers.rebuild import from_build
    from rkdet.layers.report import bisection_json, render_bisection_html
    from rkdet.records.io import write_atomic

    build: Path | None = kw["build"]
    if build is None:
        raise InputError("rkdet layers --board: give the build folder (BUILD) whose board run differs")
    for flag in ("inputs_dir", "target"):
        if kw.get(flag) is not None:
            raise InputError(f"rkdet layers --board: --{flag.replace('_dir', '')} is for the host analysis")
    against = parse_against(kw["against"])
    src = from_build(build, kw["config_path"])
    for name in ("model.rknn", "model.io.json", "golden/inputs"):
        if not (build / name).exists():
            raise InputError(f"{build}: not a complete build folder: missing {name}")
    assert src.record is not None  # a build folder's source carries its record
    _, settings = resolve_build(None, src.record)  # the build's own settings, from the record loaded above
    repeats = kw["repeats"] or (max(2, settings.run.repeats) if against.kind == "run0" else 1)
    if against.kind == "run0" and repeats < 2:
        raise InputError("--against run0 needs --repeats 2 or more (run 0 and a run to compare with it)")
    core_mask = kw["core_mask"] or settings.run.core_mask
    out: Path = kw["out"] or build
    check_writable(out)
    console = log_console()

    def log(message: str) -> None:
        console.log(literal(message))

    builder = CutBuilder(src, kw["cache"] or default_cache(), log)
    flags = RunOverrides.from_options(kw)
    with tempfile.TemporaryDirectory(prefix="rkdet-bisect-") as tmp, \
            open_connection(ConnectionOptions.from_options(kw)) as conn:
        workdir = conn.abspath(flags.workdir) if flags.workdir else conn.default_workdir()
        # the cut models run on the NPU backend (rkdet.backends); work dir resolved here, never the config's
        run = RunSettings.from_config(settings, replace(flags, repeats=repeats, core_mask=core_mask,
                                                        backend=default_backend().name, workdir=workdir))
        if run.pin:
            push_scripts(conn, scripts_dir(workdir))
            run = replace(run, state_dir=state_dir_for(conn, workdir, run.sudo))
        runner = BoardRunner(conn, build, builder.manifest, Path(tmp), run)
        report = bisect_on_board(builder, runner, against, core_mask, settings.tolerances, log,
                                 source=build.name, board=conn.target.label)
    report.pinned = run.pin
    say_warnings(console, report.warnings)  # what a pull survived, as deploy says it
    text = bisection_json(report)
    try:
        write_atomic(str(out / "layers-board.json"), text)
        if kw["html_path"] is not None:
            write_atomic(str(kw["html_path"]), render_bisection_html(report))
    except OSError as exc:
        raise InputError(f"cannot write the report: {exc}") from None
    console.print(literal(f"{'pinned (restored after each run)' if report.pinned else 'not pinned'}; "
                          f"{report.board_runs} board run(s), {report.cut_builds} cut build(s), "
                          f"{report.cut_cache_hits} cut(s) from the cache (bound {report.bound} for {report.layers} "
                          f"cut points); report: {out / 'layers-board.json'}"))
    if report.first_departing:
        first, last = report.first_departing, report.last_agreeing or {}
        console.print(literal(f"departure located: the board departs from {report.against} first at "
                              f"{', '.join(first['tensors'])} (op {report.op_between}); last agreeing: "
                              f"{', '.join(last.get('tensors') or [])}", "red"))
    else:
        console.print(literal(f"no departure: the board agrees with {report.against} ({report.tolerance})", "green"))
    if kw["as_json"]:
        click.echo(text, nl=False)
    return EXIT_DIFFERENT if report.first_departing else 0


# The host analysis's own arguments and options, defined once in rkdet/cli/layers_host.py, come first.
layers_command.params[:0] = list(host_layers.params)
