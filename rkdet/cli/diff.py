"""`rkdet diff`: parse flags, run the comparison, print/write reports, exit 0 same / 1 different / 2 trouble."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rkdet.choices import DECODERS
from rkdet.tolerance import Tolerance
from rkdet.errors import InputError



def _config_tolerance(path: Path | None) -> Tolerance:
    """The `tolerances` section of a config file, through the config loader (absent: bitwise)."""
    if path is None:
        return Tolerance()
    from rkdet.config import load_tolerances

    return load_tolerances(path)


@click.command("diff")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path), required=False)
@click.option("--tolerance", "tolerances", multiple=True, metavar="[OUTPUT:]KEY=VALUE",
              help="max_abs, max_ulp, max_lsb, min_cosine or max_rel_l2, for every output or (OUTPUT:KEY=VALUE) "
                   "for that output only; repeatable; overrides --config. Default: bitwise.")
@click.option("--config", "config", type=click.Path(path_type=Path, dir_okay=False),
              help="YAML config whose `tolerances` section declares the tolerance (and `decision`, the app's rules).")
@click.option("--decoder", type=click.Choice(DECODERS), default="auto", show_default=True,
              help="How to judge decisions: auto-detect from output shapes, or force one.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report (rkdet.diff/3) instead of the table.")
@click.option("--json-out", type=click.Path(path_type=Path),
              help="Write the JSON report here (a file, replaced atomically; or /dev/stdout, a FIFO).")
@click.option("--html", "html_out", type=click.Path(path_type=Path),
              help="Write the HTML report here (a file, replaced atomically; or /dev/stdout, a FIFO).")
def diff_command(a: Path, b: Path | None, tolerances: tuple[str, ...], config: Path | None, decoder: str,
                 as_json: bool, json_out: Path | None, html_out: Path | None) -> None:
    """Compare result sets: A alone (run-to-run) or A against reference B.

    A and B: result-set folders, build folders (their golden/simulator set), or .npy/.npz files.
    Exit 0 same within tolerance, 1 different, 2 trouble (unreadable or mismatched input).
    """
    from rkdet.diff.api import compare
    from rkdet.diff.report import json_text, write_html, write_json

    for out in (json_out, html_out):
        if out is not None and out.is_dir():  # before the comparison, not after it
            raise InputError(f"{out}: is a directory; give a file path for the report")
    tolerance = Tolerance.from_pairs(tolerances, _config_tolerance(config))
    declared = None
    if config is not None:
        from rkdet.config import load_decision

        section = load_decision(config)
        declared = section.outputs if section is not None else None
    comparison = compare(a, b, tolerance, decoder, declared=declared)
    if json_out:
        write_json(comparison, json_out)
    if html_out:
        write_html(comparison, html_out)
    if as_json:
        click.echo(json_text(comparison), nl=False)
    else:
        from rkdet.diff.terminal import render_terminal

        render_terminal(comparison)
        _say_session(a, b)
    sys.exit(comparison.exit_code)


def _say_session(a: Path, b: Path | None) -> None:
    """When A and B are two runs of one pinned session (deploy --backends, a fleet board's cells; their
    deploy.json `session`), one line says so: the two ran under one pin, whatever the diff found."""
    from rkdet.diff.backend_pair import shared_session
    from rkdet.log import output_console
    from rkdet.textsafe import literal

    def run_folder(path: Path) -> Path | None:
        for folder in (path, path.parent if path.name == "result" else None):
            if folder is not None and (folder / "deploy.json").is_file() and (folder / "result").is_dir():
                return folder
        return None

    ra, rb = run_folder(a), run_folder(b) if b is not None else None
    if ra is None or rb is None or ra == rb:
        return
    session = shared_session(ra, rb)
    if session is not None:
        output_console().print(literal(f"A and B ran in {session.text()}"), soft_wrap=True)
