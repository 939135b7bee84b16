"""`rkdet accuracy BUILD --labels …`: the build's accuracy against ground truth, FP32 against the INT8
emulation, the simulator (--simulator), float16 builds and any board's pulled results, with MLPerf's
99 % / 99.9 % of FP32 lines (docs/ACCURACY.md). `rkdet accuracy ACCURACY_JSON`: a record already
measured, read as input from anyone, shown again (terminal, `--html`).

Exit codes: 0 every row holds the --require line, 1 a row below it, 2 bad input (labels, build, results,
a damaged or crafted accuracy.json).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rkdet.errors import EXIT_DIFFERENT, InputError
from rkdet.log import log_console, output_console
from rkdet.textsafe import markup_escaped

@click.command("accuracy")
@click.argument("build", metavar="BUILD|ACCURACY_JSON", type=click.Path(path_type=Path))
@click.option("--labels", "labels_path", type=click.Path(path_type=Path),
              help="Ground truth (needed with BUILD): a COCO .json (detection), a folder per class or a file,class CSV "
                   "(classification), or a folder of PNG label maps (semantic segmentation).")
@click.option("--images", type=click.Path(path_type=Path),
              help="The labelled images (default: beside the labels file; class folders hold their own).")
@click.option("--results", "results", multiple=True, type=click.Path(path_type=Path),
              help="A board's pulled result set for the labelled images (repeatable): one row each.")
@click.option("--variant", "variants", multiple=True, type=click.Path(path_type=Path),
              help="Another build of the same model (e.g. float16: quantize.enabled false), repeatable: its rows too.")
@click.option("--simulator", "simulate", is_flag=True,
              help="Also the toolkit's simulator: rebuilds the build in the hermetic toolkit worker (as rkdet layers "
                   "does) and simulates the labelled images; its fingerprint is checked against the build's.")
@click.option("--float16", is_flag=True,
              help="Also a float16 build made from BUILD's config (quantization off) in the hermetic toolkit worker, "
                   "the labelled images simulated (no build folder is written; --variant takes one you have).")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="With --simulator or --float16: the config that built BUILD, for where its model and images are "
                   "(a published build records names only).")
@click.option("--save-inputs", type=click.Path(path_type=Path),
              help="Write the labelled images as fed (<name>.npy, uint8 NHWC) to this new folder: `rkdet deploy "
                   "--inputs` (or rkdet-run's --inputs) on a board, whose pulled result set --results then scores.")
@click.option("--require", type=click.Choice(["99", "99.9"]), default="99", show_default=True,
              help="The line (percent of FP32 accuracy) every row must hold for exit 0.")
@click.option("--out", type=click.Path(path_type=Path), help="Where accuracy.json goes (default: the build folder).")
@click.option("--html", "html_path", type=click.Path(path_type=Path),
              help="Also write the table as one offline HTML page here (from BUILD's new record, or ACCURACY_JSON).")
@click.option("--json", "as_json", is_flag=True, help="Print accuracy.json on stdout.")
def accuracy_command(build: Path, labels_path: Path | None, images: Path | None, results: tuple[Path, ...],
                     variants: tuple[Path, ...], simulate: bool, float16: bool, config_path: Path | None,
                     save_inputs: Path | None, require: str, out: Path | None, html_path: Path | None,
                     as_json: bool) -> None:
    """Accuracy against labels: FP32, the INT8 emulation and board results on the same inputs; or an
    accuracy.json measured before, shown again (ACCURACY_JSON, with --html for the page).

    Exit codes: 0 every row holds the --require line, 1 a row below it, 2 bad input (a damaged or crafted
    accuracy.json included).
    """
    from rkdet.records.accuracy import AccuracyRecord, read_accuracy
    from rkdet.records.io import check_may_write

    if html_path is not None:
        check_may_write(html_path, "--html")  # before the work: a path we cannot write is one line now
    if build.is_file():  # a record measured before: nothing is computed or written but --html
        given = [name for name, value in (("--labels", labels_path), ("--images", images), ("--results", results),
                                          ("--variant", variants), ("--simulator", simulate), ("--float16", float16),
                                          ("--config", config_path), ("--save-inputs", save_inputs), ("--out", out))
                 if value]
        if given:
            raise InputError(f"{build}: an accuracy.json is shown as recorded; {given[0]} measures a build: pass "
                             "the build folder instead")
        record: AccuracyRecord = read_accuracy(build)
        target = None
    else:
        if labels_path is None:
            raise InputError(f"{build}: measuring a build needs its ground truth: pass --labels (docs/ACCURACY.md)")
        record, target = _measure(build, labels_path, images, results, variants, simulate, float16, config_path,
                                  save_inputs, out)
    _present(record, target, html_path, as_json, float(require) / 100)


def _measure(build: Path, labels_path: Path, images: Path | None, results: tuple[Path, ...],
             variants: tuple[Path, ...], simulate: bool, float16: bool, config_path: Path | None,
             save_inputs: Path | None, out: Path | None):  # type: ignore[no-untyped-def]
    """Measure BUILD against the labels and write accuracy.json (atomically); (the record, where it went)."""
    from rkdet.accuracy.measure import measure
    from rkdet.records.accuracy import FILE, write_accuracy
    from rkdet.records.build import load_build
    from rkdet.records.io import check_may_write

    record_build = load_build(build, complete=False)
    others = tuple(load_build(v, complete=False) for v in variants)
    target = (out if out is not None else build) / FILE
    created = not target.parent.exists()
    check_may_write(target, "accuracy.json")  # before the work: a folder we cannot write is one line now
    console = log_console()
    try:
        record = measure(record_build, labels_path, images, tuple(results), lambda m: console.log(markup_escaped(m)),
                         others=others, simulate=simulate, config=config_path,
                         toolkit_logs=target.parent if simulate or float16 else None, save_inputs=save_inputs,
                         float16=float16)
    except BaseException:
        if created and target.parent.is_dir() and not any(target.parent.iterdir()):
            target.parent.rmdir()  # the --out folder made for this run: nothing is left behind a refusal
        raise
    try:
        write_accuracy(target, record)
    except OSError as exc:
        raise InputError(f"{target}: cannot write ({exc.strerror}); choose another folder with --out") from None
    return record, target


def _present(record, target: Path | None, html_path: Path | None, as_json: bool,  # type: ignore[no-untyped-def]
             line: float) -> None:
    """The table on the report console, the HTML page, the JSON; exit 1 when a row is below `line`."""
    import json

    from rkdet.accuracy.html import render_accuracy_html
    from rkdet.accuracy.table import terminal_lines
    from rkdet.records.io import write_atomic

    report = output_console(stderr=as_json)
    for text in terminal_lines(list(record.rows)):
        report.print(markup_escaped(text), highlight=False)
    for note in record.notes:
        report.print(f"note: {markup_escaped(note)}", highlight=False)
    if target is not None:
        report.print(f"wrote {markup_escaped(str(target))}", highlight=False)
    if html_path is not None:
        try:
            write_atomic(str(html_path), render_accuracy_html(record, line))
        except OSError as exc:
            raise InputError(f"--html {html_path}: cannot write ({exc.strerror}); choose another path") from None
        report.print(f"wrote {markup_escaped(str(html_path))}", highlight=False)
    if as_json:
        click.echo(json.dumps(record.to_json(), indent=2, sort_keys=True))
    if any(not ok for row in record.rows for at, ok in row.lines if abs(at - line) < 1e-9):
        sys.exit(EXIT_DIFFERENT)
