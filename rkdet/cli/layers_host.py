"""`rkdet layers`: which layer of a build loses the precision (toolkit simulator vs float, per layer).

Exit codes: 0 every layer within fidelity.min_layer_cosine, 1 a loss located, 2 bad input (a build
folder missing what it needs, a bad config), 4 the toolkit failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rkdet.config import PLATFORMS
from rkdet.errors import EXIT_DIFFERENT, InputError
from rkdet.log import log_console
from rkdet.textsafe import markup_escaped

# Each analysed input costs one accuracy_analysis (~35-60 s for the default model on one loaded core, see
# bench/results/layers.md); a layer's loss shows on any input that exercises it, and the worst input counts.
DEFAULT_MAX_INPUTS = 2


@click.command("layers")
@click.argument("build", required=False, type=click.Path(path_type=Path))
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="Analyse a config's build without a build folder (e.g. one that failed the fidelity gate); with "
                   "BUILD: where the model and images it names are (a published build records names only).")
@click.option("--target", type=click.Choice(PLATFORMS, case_sensitive=False),
              help="With --config: the platform (default: the config's first).")
@click.option("--inputs", "inputs_dir", type=click.Path(path_type=Path),
              help="Analyse these images instead of the golden inputs.")
@click.option("--max-inputs", default=DEFAULT_MAX_INPUTS, show_default=True, type=click.IntRange(0, None),
              help="Analyse N inputs (0: all): the golden inputs whose outputs stray furthest from FP32 first "
                   "(--inputs: the first N by name); each costs one full per-layer analysis.")
@click.option("--top", default=5, show_default=True, type=click.IntRange(1, 1000),
              help="How many worst layers by single error to report.")
@click.option("--out", type=click.Path(path_type=Path),
              help="Folder for layers.json and toolkit-layers.log (default: the build folder, or . with --config).")
@click.option("--json", "as_json", is_flag=True, help="Print layers.json on stdout.")
@click.option("--html", "html_path", type=click.Path(path_type=Path), help="Write the HTML report here.")
def layers_command(build: Path | None, config_path: Path | None, target: str | None, inputs_dir: Path | None,
                   max_inputs: int, top: int, out: Path | None, as_json: bool, html_path: Path | None) -> None:
    """Compare every layer of the quantized build (simulator) with the float model; name the first loss.

    Exit codes: 0 all layers within fidelity.min_layer_cosine, 1 a loss located, 2 bad input, 4 toolkit failed.
    """
    from rkdet.convert.pipeline import check_writable
    from rkdet.layers.rebuild import from_build, from_config, rebuild_and_analyse
    from rkdet.layers.report import build_report, onnx_label, render_html, to_json
    from rkdet.records.io import write_atomic

    if build is None and config_path is None:
        raise InputError("rkdet layers: give a build folder (with --config FILE for where its images are) or --config FILE")
    src = from_build(build, config_path) if build is not None else from_config(config_path, target)  # type: ignore[arg-type]
    out = out or (build if build is not None else Path("."))
    check_writable(out)  # before the long rebuild: layers.json and toolkit-layers.log go there
    console = log_console()
    with console.status("layers") as status:
        rebuilt = rebuild_and_analyse(src, inputs_dir, lambda m: (status.update(m), console.log(m)),
                                      log_to=out / "toolkit-layers.log", max_inputs=max_inputs)
    named = build if build is not None else config_path
    assert named is not None
    report = build_report(rebuilt.analyses, rebuilt.model.onnx_bytes, src.cfg.fidelity.min_layer_cosine, top,
                          source=named.name, toolkit=rebuilt.toolkit,
                          fingerprint=rebuilt.fingerprint, build_fingerprint=rebuilt.build_fingerprint,
                          timings=rebuilt.timings, output_cosine=rebuilt.output_cosine)
    text = to_json(report)
    try:
        write_atomic(str(out / "layers.json"), text)
        if html_path is not None:
            write_atomic(str(html_path), render_html(report))
    except OSError as exc:
        raise InputError(f"cannot write the report: {exc}") from None
    match = report.fingerprint_match
    console.print("rebuilt from the config (no build folder to compare fingerprints with)" if match is None else
                  f"rebuilt fingerprint {report.fingerprint[:16]} equals the build's" if match else
                  f"[yellow]warning[/]: rebuilt fingerprint {report.fingerprint[:16]} differs from the build's "
                  f"{(report.build_fingerprint or '')[:16]}: the layers are those of the rebuild")
    for x in report.worst_single:
        console.print(f"worst single: layer {x.index} {markup_escaped(x.rknn_name)} ({markup_escaped(onnx_label(x))}) "
                      f"single cosine {x.single.cosine:.5f}")
    if report.first_loss:
        x = report.first_loss
        console.print(f"[red]loss located[/]: layer {x.index} {markup_escaped(x.rknn_name)} = {markup_escaped(onnx_label(x))}: "
                      f"entire cosine {x.entire.cosine:.5f} < fidelity.min_layer_cosine {report.min_layer_cosine}")
    else:
        console.print(f"[green]all {len(report.layers)} layers within[/] fidelity.min_layer_cosine "
                      f"{report.min_layer_cosine}")
    if as_json:
        click.echo(text, nl=False)
    if report.first_loss:
        sys.exit(EXIT_DIFFERENT)
