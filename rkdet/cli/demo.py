"""`rkdet demo`: the whole pipeline on the shipped default model and an emulated board, in one command.

Why it exists: anyone can rehearse convert -> deploy -> verdict without hardware, and see the board
left exactly as it was. It converts (unless an up-to-date build exists), starts an emulated board
(real sshd; FUSE sysfs with kernel semantics where this machine allows, else plain files), deploys
with the config's run settings, prints the verdict, and compares the board's knobs before and after.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console

from rkdet.config import DEFAULT_CONFIG, deploy_settings, load_config
from rkdet.errors import EXIT_BOARD, EXIT_OK, BoardError, InputError
from rkdet.log import log_console
from rkdet.textsafe import literal


def knob_view(probe) -> dict:
    """What pin changes and restore must bring back (not clocks/temperatures that move on their own)."""
    return {
        "cpu": {p.name: [p.governor, p.min_khz, p.max_khz] for p in probe.cpu_policies},
        "devfreq": {d.name: [d.governor, d.min_hz, d.max_hz] for d in probe.devfreq},
        "compaction_proactiveness": probe.compaction_proactiveness,
        "thp": probe.thp,
        "pinned_state": probe.pinned_state,
    }


def _build_folder(config_path: Path, out: Path, console: Console) -> Path:
    from rkdet.convert.pipeline import convert

    cfg = load_config(config_path)
    console.log(f"converting {cfg.model.onnx.name} for {cfg.target.platforms[0]}")
    result = convert(cfg, out, [cfg.target.platforms[0]], progress=console.log)[0]
    console.log(f"built {result.folder} (fingerprint {result.fingerprint[:16]})")
    return result.folder


def demo_config(config_path: Path | None, data: Path | None) -> Path:
    """The demo's config. The shipped model and pages stay in the source repository (their own licenses),
    so an installed rkdet finds them in --data DIR, the current folder, or the checkout it runs from."""
    if config_path is not None:
        return config_path
    checkout = Path(__file__).resolve().parents[2]  # rkdet/cli/demo.py -> the source checkout
    for folder in ([data] if data is not None else [Path.cwd(), checkout]):
        if (folder / DEFAULT_CONFIG).is_file():
            return folder / DEFAULT_CONFIG
    where = f"--data {data}" if data is not None else f"{Path.cwd()}"
    raise InputError(f"demo data not found ({where} has no {DEFAULT_CONFIG}): the demo's model and pages are not "
                     "installed with rkdet; pass --data DIR with a checkout of rkdet's source repository")


@click.command("demo")
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
              help=f"Config file (default: {DEFAULT_CONFIG} under --data).")
@click.option("--data", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Folder with the demo's configs/, models/ and calibration_data/ (a checkout of rkdet's "
                   "repository; default: the current folder, else the checkout rkdet runs from).")
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build"), show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--soc", default=None, help="Emulated SoC (default: the config's first platform).")
@click.option("--sysfs", type=click.Choice(["auto", "fuse", "plain"]), default="auto", show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=None, help="Override run.repeats.")
@click.option("--compute", type=click.Choice(["int8", "fp32"]), default="int8", show_default=True,
              help="What the emulated runtime computes: int8, the build's INT8 emulation (the emulated NPU), "
                   "judged against the simulator with the config's tolerance (on the default model's golden "
                   "pages bit-identical to it, docs/EMULATOR.md); fp32 (TEST CONTROL), the prepared FP32 ONNX, "
                   "judged bitwise against the build's onnx-fp32 golden.")
def demo_command(config_path: Path | None, data: Path | None, build_dir: Path, out: Path, soc: str | None, sysfs: str,
                 repeats: int | None, compute: str) -> None:
    """Convert the default model, deploy it to an emulated board, print the verdict.

    Exit codes as `rkdet deploy`: 0 deterministic and within tolerance, 1 divergence, 2 bad input, 3 board
    problem (including a board not left exactly as it was).
    """
    from rkdet.link.connect import ConnectionOptions, open_connection
    from rkdet.deploy.flow import Deployment
    from rkdet.deploy.layout import scripts_dir
    from rkdet.boardinfo.remote_scripts import probe_board
    from rkdet.deploy.settings import RunOverrides, RunSettings
    from rkdet.deploy.stage import push_scripts
    from rkdet.emulator.sshd import EmulatedBoard

    console = log_console()
    config_path = demo_config(config_path, data)
    cfg = load_config(config_path)
    build = _build_folder(config_path, build_dir, console)
    soc = soc or cfg.target.platforms[0]
    settings = RunSettings.from_config(deploy_settings(cfg, config_path), RunOverrides(repeats=repeats))
    # Like a real board, the emulated sysfs lets only root write its knobs: log in as a normal user and
    # pin through `sudo -n`, as a non-root deploy to a real board does.
    from rkdet.emulator.socs import profile, with_compute

    try:
        board_profile = with_compute(profile(soc), compute)  # an image setting: holds under sudo
    except KeyError:
        raise InputError(f"--soc {soc}: no emulated board for it") from None
    with EmulatedBoard(board_profile, variant="sudo", sysfs=sysfs) as board:
        backend = board.sysfs.backend if board.sysfs is not None else "plain"
        console.log(f"emulated {soc} board on {board.target} (sysfs: {backend}); its runtime computes "
                    + ("the build's INT8 emulation (the emulated NPU)" if compute == "int8"
                       else "the FP32 ONNX (TEST CONTROL; without --compute fp32 it computes the emulated NPU)"))
        with open_connection(ConnectionOptions(board.target, board.user, identity=board.identity_file,
                                               known_hosts=board.known_hosts_file,
                                               ssh_config=Path("/dev/null"))) as conn:
            workdir = conn.default_workdir()
            push_scripts(conn, scripts_dir(workdir))
            state_env = {"RKDET_STATE_DIR": f"{workdir}/state"}
            settings = replace(settings, sudo=True, state_dir=state_env["RKDET_STATE_DIR"])
            before = knob_view(probe_board(conn, scripts_dir(workdir), state_env, True))
            outcome = Deployment(conn, build, out, settings, log=console.log, progress=console.is_terminal).run()
            after = knob_view(probe_board(conn, scripts_dir(workdir), state_env, True))
    for warning in outcome.warnings:
        console.print(f"[yellow]warning[/]: {warning}")
    console.print("[magenta]EMULATED[/]: outputs come from the rkdet emulator (onnxruntime on CPU), not an NPU")
    for line in outcome.verdict_lines:  # repeatable, agrees with the reference
        console.print(literal(line, "green" if ": YES " in line else "red"), soft_wrap=True)
    console.print(f"[{'green' if outcome.exit_code == EXIT_OK else 'red'}]{outcome.verdict}[/]")
    same = before == after
    console.print(f"board knobs before == after: {'yes' if same else 'NO'}; report: {outcome.folder / 'report.html'}")
    if not same:
        (outcome.folder / "knobs.json").write_text(json.dumps({"before": before, "after": after}, indent=2))
        raise BoardError(f"emulated board not left as it was (see {outcome.folder / 'knobs.json'})",
                         exit_code=EXIT_BOARD)
    raise SystemExit(outcome.exit_code)
