"""`rkdet accuracy BUILD --labels …`: the build's accuracy against ground truth, FP32 against the INT8
emulation, the simulator (--simulator), float16 builds and any board's pulled results, with MLPerf's
99 % / 99.9 % of FP32 lines (docs/ACCURACY.md).

Exit codes: 0 every row holds the --require line, 1 a row below it, 2 bad input (labels, build, results).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rkdet.errors import EXIT_DIFFERENT, InputError
from rkdet.log import log_console, output_console
from rkdet.textsafe import markup_escaped


@click.command("accuracy")
@click.argument("build", type=click.Path(path_type=Path))
@click.option("--labels", "labels_path", required=True, type=click.Path(path_type=Path),
              help="Ground truth: a COCO .json (detection), a folder per class or a file,class CSV (classification), "
                   "or a folder of PNG label maps (semantic segmentation).")
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
              help="Write the labelled images as fed (<name>.npy, uint8 NHWC) to this new folder: rkdet-run's --inputs "
                   "on a board, whose pulled result set --results then scores.")
@click.option("--require", type=click.Choice(["99", "99.9"]), default="99", show_default=True,
              help="The line (percent of FP32 accuracy) every row must hold for exit 0.")
@click.option("--out", type=click.Path(path_type=Path), help="Where accuracy.json goes (default: the build folder).")
@click.option("--json", "as_json", is_flag=True, help="Print accuracy.json on stdout.")
def accuracy_command(build: Path, labels_path: Path, images: Path | None, results: tuple[Path, ...],
                     variants: tuple[Path, ...], simulate: bool, float16: bool, config_path: Path | None,
                     save_inputs: Path | None,
                     require: str, out: Path | None, as_json: bool) -> None:
    """Accuracy against labels: FP32, the INT8 emulation and board results on the same inputs.

    Exit codes: 0 every row holds the --require line, 1 a row below it, 2 bad input.
    """
    import json

    from rkdet.accuracy.measure import measure
    from rkdet.accuracy.table import terminal_lines
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
    report = output_console(stderr=as_json)
    for line in terminal_lines(list(record.rows)):
        report.print(markup_escaped(line), highlight=False)
    for note in record.notes:
        report.print(f"note: {markup_escaped(note)}", highlight=False)
    report.print(f"wrote {markup_escaped(str(target))}", highlight=False)
    if as_json:
        click.echo(json.dumps(record.to_json(), indent=2, sort_keys=True))
    line = float(require) / 100
    if any(not ok for row in record.rows for at, ok in row.lines if abs(at - line) < 1e-9):
        sys.exit(EXIT_DIFFERENT)
