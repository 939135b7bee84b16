"""`rkdet convert`: the click command (parse, call the pipeline, print a summary)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape

from rkdet.config import PLATFORMS, load_config
from rkdet.errors import FidelityGateError
from rkdet.log import log_console


@click.command("convert")
@click.option("--config", "config_path", type=click.Path(path_type=Path), default="configs/yolov8.yaml",
              show_default=True, help="YAML config file.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("build"), show_default=True,
              help="Folder that receives <name>-<platform>/ build folders.")
@click.option("--target", "targets", multiple=True, type=click.Choice(PLATFORMS, case_sensitive=False),
              help="Build only this platform (repeatable); default: target.platforms from the config.")
@click.option("--verify", is_flag=True, help="Rebuild and report byte identity and fingerprint identity separately.")
@click.option("--keep-failed", is_flag=True, help="Keep a failed build's folder (with toolkit.log) as <name>.failed.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout.")
def convert_command(config_path: Path, out: Path, targets: tuple[str, ...], verify: bool, keep_failed: bool,
                    as_json: bool) -> None:
    """Convert ONNX to RKNN with static INT8 calibration, golden data and a manifest.

    Exit codes: 0 ok, 2 bad input or config, 4 conversion failed.
    """
    from rkdet.convert.pipeline import convert

    console = log_console()
    cfg = load_config(config_path)
    try:
        with console.status("converting") as status:
            results = convert(cfg, out, [t.lower() for t in targets] or None, verify=verify, keep_failed=keep_failed,
                              progress=lambda msg: (status.update(msg), console.log(msg)))
    except FidelityGateError as err:  # point at the tool that locates the loss
        raise FidelityGateError(f"{err}; to see which layer loses it: rkdet layers --config {config_path}") from None
    summary = []
    for r in results:
        for w in r.warnings:  # one line each (no wrapping), model-supplied names never read as markup
            console.print(f"[yellow]warning[/]: {escape(w)}", soft_wrap=True, highlight=False)
        if r.fidelity_line:
            console.print(r.fidelity_line, markup=False, highlight=False, soft_wrap=True)
        entry = {"platform": r.platform, "fidelity": r.fidelity_line, "folder": str(r.folder), "fingerprint": r.fingerprint,
                 "rknn_sha256": r.rknn_sha256, "warnings": r.warnings}
        if r.verify is not None:
            entry["verify"] = r.verify
        summary.append(entry)
        line = f"[green]built[/] {r.folder}  fingerprint {r.fingerprint[:16]}"
        if r.verify is not None:
            line += (f"  verify: bytes {'identical' if r.verify['rknn_bytes_identical'] else 'DIFFER'},"
                     f" fingerprint {'identical' if r.verify['fingerprint_identical'] else 'DIFFERS'}")
        console.print(line)
    if as_json:
        click.echo(json.dumps({"schema": "rkdet.convert/1", "builds": summary}, indent=2, sort_keys=True))


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
