"""`rkdet compare-builds A B`: parse, compare, print, write reports; exit 0 same / 1 different / 2 trouble."""

from __future__ import annotations

from pathlib import Path

import click

from rkdet.choices import COMPARE_DECODERS
from rkdet.errors import InputError
from rkdet.textsafe import visible


@click.command("compare-builds")
@click.argument("a", type=click.Path(path_type=Path, file_okay=False))
@click.argument("b", type=click.Path(path_type=Path, file_okay=False))
@click.option("--decoder", type=click.Choice(COMPARE_DECODERS), default="auto", show_default=True,
              help="How to judge decisions (as rkdet diff).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report (rkdet.compare-builds/1).")
@click.option("--json-out", type=click.Path(path_type=Path), help="Write the JSON report here.")
@click.option("--html", "html_out", type=click.Path(path_type=Path),
              help="Write the HTML report here (each reference's diff report beside it).")
def compare_builds_command(a: Path, b: Path, decoder: str, as_json: bool, json_out: Path | None,
                           html_out: Path | None) -> None:
    """Compare two build folders: model content section by section, then their golden outputs.

    For a toolkit upgrade: the same config built by two toolkits (rkdet convert --toolkit 2.3.2,2.5.0).
    Exit 0 same (content fingerprint and outputs bit-identical), 1 different, 2 trouble.
    """
    from rkdet.buildcompare.report import compare_builds, json_text, write_html
    from rkdet.diff.report import write_report_file

    for out in (json_out, html_out):
        if out is not None and out.is_dir():
            raise InputError(f"{out}: is a directory; give a file path for the report")
    c = compare_builds(a, b, decoder)
    if json_out:
        write_report_file(json_out, json_text(c))
    if html_out:
        write_html(c, html_out)
    if as_json:
        click.echo(json_text(c), nl=False)
    else:
        for line in c.lines():
            click.echo(visible(line))
        by: dict[str, list] = {}
        for ch in c.content.changes:
            by.setdefault(ch.category, []).append(ch)
        for category, items in by.items():  # a summary per category; every change is in the JSON/HTML report
            shown = "; ".join(f"{ch.name}: {ch.detail}" for ch in items[:3])
            more = f"; … {len(items) - 3} more" if len(items) > 3 else ""
            click.echo(visible(f"  {category} ({len(items)}): {shown}{more}", 400))
    raise SystemExit(c.exit_code)
