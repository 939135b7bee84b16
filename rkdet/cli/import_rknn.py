"""`rkdet import-rknn`: the click command over `rkdet.convert.imported` (a build folder from a foreign .rknn)."""

from __future__ import annotations

from pathlib import Path

import click

from rkdet.errors import InputError
from rkdet.textsafe import visible


def _triple(flag: str, text: str | None) -> tuple[float, float, float] | None:
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"--{flag} {text!r}: expected three numbers, e.g. 0,0,0") from None
    if len(values) == 1:
        values = values * 3
    if len(values) != 3:
        raise InputError(f"--{flag} {text!r}: expected one or three numbers")
    return values  # type: ignore[return-value]


@click.command("import-rknn")
@click.argument("model", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--inputs", "inputs", type=click.Path(path_type=Path), required=True,
              help="Folder of golden inputs: images (resized to the model's input) or uint8 NHWC .npy tensors "
                   "(your app's own preprocessed inputs, fed as they are).")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Build folder (default build/<stem>-<platform>).")
@click.option("--name", default=None, help="Build name (default: the file's stem).")
@click.option("--mean", default=None, metavar="A,B,C", help="Per-channel mean, when the model's metadata has none.")
@click.option("--std", default=None, metavar="A,B,C", help="Per-channel std, when the model's metadata has none.")
@click.option("--channel-order", type=click.Choice(["rgb", "bgr"]), default=None,
              help="Channel order images are fed in (an .rknn does not record it; required for images).")
@click.option("--resize", type=click.Choice(["letterbox", "pad-right-bottom", "stretch"]), default="letterbox",
              show_default=True, help="How images are fitted to the model's input (keep aspect centred, keep aspect "
              "at the top-left, or stretch).")
@click.option("--pad-value", type=click.IntRange(0, 255), default=114, show_default=True,
              help="The padding value your app uses (letterbox, pad-right-bottom; Ultralytics 114, many apps 0).")
@click.option("--interpolation", type=click.Choice(["linear", "nearest", "area"]), default="linear", show_default=True,
              help="The resize interpolation your app uses (OpenCV INTER_LINEAR / NEAREST / AREA).")
@click.option("--emulator-onnx", type=click.Path(path_type=Path, dir_okay=False, exists=True), default=None,
              help="TEST CONTROL: an ONNX the emulated runtime double computes in place of the NPU; never a reference.")
def import_command(model: Path, inputs: Path, out: Path | None, name: str | None, mean: str | None, std: str | None,
                   channel_order: str | None, resize: str, pad_value: int, interpolation: str,
                   emulator_onnx: Path | None) -> None:
    """Make a build folder from a .rknn built elsewhere (no ONNX): deploy, fleet deploy and history work on it.

    The "agrees with the reference" verdict is "not applicable" (no FP32 reference; the toolkit's simulator
    does not run a loaded .rknn); "repeatable" is judged as for any build. Exit codes: 0 written, 2 bad input
    (unreadable or encrypted model, unknown platform, missing preprocessing).
    """
    from rkdet.convert.imported import Given, import_rknn

    given = Given(_triple("mean", mean), _triple("std", std), channel_order, resize,  # type: ignore[arg-type]
                  pad_value, interpolation)  # type: ignore[arg-type]
    result = import_rknn(model, inputs, out, given, name=name, emulator_onnx=emulator_onnx,
                         progress=lambda m: click.echo(visible(m), err=True))
    info = result.info
    for kind, attrs in (("input", info.inputs), ("output", info.outputs)):
        for t in attrs:
            q = f"{t.qnt_method} scale {list(t.scale)} zero point {list(t.zero_point)}" if t.qnt_method else "not quantized"
            click.echo(visible(f"  {kind} {t.name}: {list(t.shape)} {t.dtype} ({t.layout or '?'}), {q}", 400), err=True)
    click.echo(visible(f"  custom string: {info.custom_string!r}", 400), err=True)
    for key, source in result.fed.sources.items():
        click.echo(visible(f"  {key}: {source}", 400), err=True)
    click.echo(f"  {visible(result.reference_line)}", err=True)
    click.echo(f"imported {visible(result.folder)}  fingerprint {result.fingerprint[:16]}  content "
               f"{result.info.content_fingerprint[:16]}")
