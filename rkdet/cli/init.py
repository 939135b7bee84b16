"""`rkdet init`: the click command (`rkdet convert` is rkdet/cli/convert.py: it also drives `--search`)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("init")
@click.option("--onnx", "onnx_path", type=click.Path(path_type=Path), required=True, help="The ONNX model to read.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Config file to write (default: <model name>.yaml here).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
def init_command(onnx_path: Path, out: Path | None, force: bool) -> None:
    """Write a commented config for your own ONNX model; guesses are marked `# CHECK`.

    Also creates the folders `calibration/` and `golden/` beside it, for you to fill.
    Exit codes: 0 written, 2 bad input.
    """
    from rkdet.convert.init import write_config

    out = out or Path(f"{onnx_path.stem}.yaml")
    written, facts = write_config(onnx_path, out, force)
    checks = sum("# CHECK" in line for line in written.read_text(encoding="utf-8").splitlines())
    click.echo(f"wrote {written}: {facts.kind} ({facts.kind_detail}); prepare {facts.prepare}; input "
               f"{facts.shape}; {checks} line(s) marked # CHECK. Next: add images to {written.parent / 'calibration'} "
               f"and {written.parent / 'golden'}, then `rkdet convert --config {written}`")
