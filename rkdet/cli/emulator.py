"""`rkdet emulator start`: run an emulated board in the foreground until Ctrl-C."""

from __future__ import annotations

import contextlib
import re
import shlex
import signal
import threading
from pathlib import Path

import click

from rkdet.emulator import socs
from rkdet.emulator.sshd import VARIANTS, EmulatedBoard
from rkdet.emulator.socs import PROFILES, SocProfile
from rkdet.errors import InputError


def board_profile(soc: str, speed_bin: str | None, compaction: bool, thp: bool) -> SocProfile:
    """The profile variant the flags ask for (socs.py builds each one from its sources)."""
    if soc == "rk3588":
        return socs.rk3588(speed_bin=int(speed_bin or 2256) * 1000, compaction=compaction, thp=thp)
    if speed_bin is not None:
        raise InputError(f"emulator: --speed-bin is an RK3588 option ({soc} has one top OPP)")
    if soc == "rk3568":
        return socs.rk3568(compaction=compaction, thp=thp)
    if not (compaction and thp):
        raise InputError(f"emulator: {soc} has one image profile (--no-compaction/--no-thp: rk3588, rk3568)")
    return PROFILES[soc]


FAULT_TENSOR_ENV = "RKDET_EMU_FAULT_TENSOR"  # read by the emulated runtime (runtime_double/rknnlite/api)
_FAULT_TENSOR = re.compile(r"^\S+$")


def fault_tensor_value(text: str) -> str:
    """--fault-tensor NAME[:run=K], checked (exit 2 naming the form)."""
    name, sep, run = text.rpartition(":run=")
    if not _FAULT_TENSOR.match(text) or (sep and (not name or not run.isdigit())):
        raise InputError(f"--fault-tensor {text!r}: expected NAME or NAME:run=K (an ONNX tensor name, K >= 0)")
    return text


@click.group("emulator")
def emulator() -> None:
    """An emulated Rockchip board on 127.0.0.1 (real sshd, fake sysfs, emulated runtime)."""


@emulator.command("start")
@click.option("--soc", type=click.Choice(sorted(PROFILES)), default="rk3588", show_default=True)
@click.option("--dir", "workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep keys, config and log here (default: a temp dir removed on exit). Must be writable "
                   "by root only (refused otherwise: its keys open the board's sudo).")
@click.option("--variant", type=click.Choice(list(VARIANTS)), default="standard", show_default=True,
              help="standard; nosftp (no SFTP subsystem); busybox (busybox shell, no SFTP); sudo (passwordless sudo); "
                   "hostile (TEST CONTROL: a board that lies: crafted file listings and results, a stalling SFTP).")
@click.option("--sysfs", type=click.Choice(["auto", "fuse", "plain"]), default="auto", show_default=True,
              help="Emulated sysfs: FUSE with kernel semantics (auto falls back to plain files).")
@click.option("--speed-bin", type=click.Choice(["2256", "2304", "2352", "2400"]), default=None,
              help="RK3588 only: the big cores' top OPP in MHz, as the chip's speed bin sets it (default 2256).")
@click.option("--no-compaction", is_flag=True, help="An image without CONFIG_COMPACTION (no compaction_proactiveness).")
@click.option("--no-thp", is_flag=True, help="An image without transparent huge pages.")
@click.option("--fault-tensor", default=None, metavar="NAME[:run=K]",
              help="TEST CONTROL: the emulated runtime perturbs ONNX tensor NAME (one element, one int8 step of its "
                   "range) so the error propagates downstream; with :run=K only in measured run K of each input.")
@click.option("--test-compute", "test_compute", type=click.Choice(["int8", "fp32"]), default="int8", show_default=True,
              help="What the emulated runtime computes: int8, the build's INT8 emulation (the emulated NPU); fp32 "
                   "(TEST CONTROL), the prepared FP32 ONNX, bitwise comparable with the build's onnx-fp32 golden.")
@click.option("--test-librknnrt", "test_librknnrt", default=None, metavar="VERSION",
              help="TEST CONTROL: the board's librknnrt reports this version (e.g. 1.4.0), to see preflight's "
                   "known incompatibilities.")
@click.option("--test-rknpu-driver", "test_driver", default=None, metavar="VERSION",
              help="TEST CONTROL: the board's rknpu driver reports this version (e.g. 0.8.2).")
def start(soc: str, workdir: Path | None, variant: str, sysfs: str, speed_bin: str | None, no_compaction: bool,
          no_thp: bool, fault_tensor: str | None, test_compute: str, test_librknnrt: str | None,
          test_driver: str | None) -> None:
    """Start the board, print how to reach it, and stop cleanly on Ctrl-C (or SIGTERM)."""
    for flag, value in (("--test-librknnrt", test_librknnrt), ("--test-rknpu-driver", test_driver)):
        if value is not None and not re.fullmatch(r"v?\d+\.\d+\.\d+", value):
            raise InputError(f"emulator: {flag} {value!r}: give a version like 1.4.0")
    profile = socs.with_stack(board_profile(soc, speed_bin, not no_compaction, not no_thp), test_librknnrt,
                              test_driver)
    profile = socs.with_compute(profile, test_compute) if test_compute != "int8" else profile
    env = {FAULT_TENSOR_ENV: fault_tensor_value(fault_tensor)} if fault_tensor is not None else None
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with EmulatedBoard(profile, workdir, variant, sysfs=sysfs, env=env) as board:
            image = f" [{profile.variant}]" if profile.variant else ""
            click.echo(f"emulated {soc}{image} board ({variant}) listening on {board.target} as user {board.user}")
            backend = board.sysfs.backend if board.sysfs is not None else "plain"
            click.echo(f"  emulated sysfs ({backend}): RKDET_ROOT={board.root}")
            if test_compute == "fp32":
                click.echo("  TEST CONTROL: the emulated runtime computes the FP32 ONNX, not the build's INT8 emulation")
            if fault_tensor is not None:
                click.echo(f"  TEST CONTROL: the emulated runtime perturbs tensor {fault_tensor} "
                           "(find it with: rkdet layers BUILD --config F --board ...)")
            click.echo(f"  ssh:    {shlex.join(board.ssh_argv())}")
            # Its login is not root: on a FUSE sysfs (kernel permissions) pinning clocks needs root, so a sudo
            # board goes through sudo and the others (no sudo at all) run unpinned, said in the results; the
            # sudo variant pins. Plain files are the login's own: pinning works without sudo.
            unpinned = not board.variant.sudo and backend == "fuse"
            sudo = " --sudo" if board.variant.sudo else " --no-pin" if unpinned else ""
            click.echo(f"  deploy: rkdet deploy --board {board.alias} --ssh-config "
                       f"{shlex.quote(str(board.ssh_config_file))}{sudo}")
            click.echo(f"     or: rkdet deploy --board {board.target} --user {board.user} "
                       f"--identity {shlex.quote(str(board.identity_file))} "
                       f"--known-hosts {shlex.quote(str(board.known_hosts_file))}{sudo}")
            click.echo("  (these deploy build/<name>-<platform> of ./configs/yolov8.yaml; elsewhere add "
                       "--build FOLDER, a folder made by `rkdet convert`)")
            if unpinned:
                click.echo(f"  (--no-pin: this board's login {board.user} has no sudo, and pinning clocks needs root; "
                           "to pin, start `rkdet emulator start --variant sudo`)")
            if board.variant.hostile:
                click.echo("  (TEST CONTROL: this board lies in its listings and results; deploy refuses what it cannot trust)")
            click.echo("press Ctrl-C to stop", err=True)
            try:
                while not stop.wait(0.5):
                    if not board.running:
                        raise click.ClickException(f"sshd exited; see {board.log_file}")
            except KeyboardInterrupt:
                pass
        click.echo("emulator stopped", err=True)
    finally:
        signal.signal(signal.SIGTERM, previous)


@emulator.command("fleet")
@click.option("--count", type=click.IntRange(1, 64), required=True, help="How many boards (1-64).")
@click.option("--socs", default="rk3588,rk3568,rv1126", show_default=True,
              help="SoCs assigned round-robin: board i gets the (i mod n)-th.")
@click.option("--inventory", "inventory", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the Ansible YAML inventory here (default: inventory.yaml in the fleet's temp dir).")
@click.option("--variant", "variants", multiple=True, metavar="INDEX=KIND",
              help="Board INDEX (0-based) is of KIND (repeatable; default sudo): a login variant "
                   "(standard, sudo, busybox, nosftp, hostile) or a TEST CONTROL kind (sudo login): runtime-drift (another "
                   "librknnrt, one output element differs), core-drift (core mask 0_1_2 differs from core 0; "
                   "rk3588), drop (the link goes once a runner starts), hot (thermal caps while a runner runs; rk3588).")
@click.option("--sysfs", type=click.Choice(["auto", "fuse", "plain"]), default="auto", show_default=True,
              help="The boards' emulated sysfs (hot needs FUSE).")
@click.option("--drop-after", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="TEST CONTROL: seconds between a runner starting on a drop board and its link going.")
@click.option("--labgrid", "with_labgrid", is_flag=True,
              help="Also run a labgrid coordinator and exporter on 127.0.0.1 with one place per board "
                   "(tags soc=..., kind=...; labgrid from $RKDET_LABGRID_PYTHON, see .ci/setup).")
def fleet(count: int, socs: str, inventory: Path | None, variants: tuple[str, ...], sysfs: str, drop_after: float,
          with_labgrid: bool) -> None:
    """Start COUNT emulated boards, write their inventory, and stop them all on Ctrl-C (or SIGTERM)."""
    from rkdet.emulator.fleet import EmulatedFleet, parse_socs, parse_variants

    kinds = parse_variants(variants, count)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with contextlib.ExitStack() as stack:
            fl = stack.enter_context(EmulatedFleet(count, parse_socs(socs), kinds, inventory=inventory, sysfs=sysfs,
                                                   drop_after_s=drop_after))
            for fb in fl.boards:
                test = " (TEST CONTROL)" if fb.test_control else ""
                click.echo(f"{fb.name}: {fb.board.target} user {fb.board.user}, {fb.kind}{test}")
            click.echo(f"inventory:   {fl.inventory_path}")
            click.echo(f"known_hosts: {fl.known_hosts_file}")
            click.echo(f"  list:   rkdet fleet hosts --inventory {shlex.quote(str(fl.inventory_path))}")
            if with_labgrid:
                from rkdet.emulator.fleet_labgrid import FleetLab

                lab = stack.enter_context(FleetLab(fl))
                click.echo(f"labgrid coordinator: {lab.address} ({len(fl.boards)} places: "
                           f"{', '.join(lab.places)})")
                click.echo(f"  list:   rkdet fleet hosts --labgrid {lab.address} --tags soc={fl.boards[0].soc}")
            click.echo("press Ctrl-C to stop", err=True)
            shown = 0
            try:
                while not stop.wait(0.5):
                    if fl.watch_error is not None:
                        raise click.ClickException(f"emulated fleet watcher failed: {fl.watch_error}")
                    events = list(fl.events)
                    for ev in events[shown:]:  # what the TEST CONTROL kinds did, as it happens
                        detail = f" ({ev.detail})" if ev.detail else ""
                        click.echo(f"{fl.boards[ev.index].name}: {ev.what}, runtime pid {ev.pid}{detail}", err=True)
                    shown = len(events)
                    for fb in fl.crashed():
                        raise click.ClickException(f"{fb.name}: sshd exited; see {fb.board.log_file}")
            except KeyboardInterrupt:
                pass
        click.echo("emulated fleet stopped", err=True)
    finally:
        signal.signal(signal.SIGTERM, previous)


@emulator.command("cleanup")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
def cleanup(dry_run: bool) -> None:
    """Remove what older rkdet versions left on this machine (one-off).

    Before boards got their own namespaces, the emulator created the host users rkdetboard,
    rkdetsudo and rkdetbb (GECOS "rkdet emulated board login"; removed with their homes and groups),
    /usr/local/lib/rkdet-emulator/sh, /run/lock/rkdet-emulator.lock and
    /etc/sudoers.d/rkdet-emulator-<port> rules. A user that still runs processes (an older emulator in
    use) is kept and said so; a rule whose port still listens is kept.
    """
    from rkdet.emulator import users

    users.require_root()
    items = users.legacy_leftovers()
    if not items:
        click.echo("nothing left by older rkdet emulators")
        return
    for item in items:
        if not item.removable:
            click.echo(f"kept     {item.what}: {item.reason}")
        elif dry_run:
            click.echo(f"would remove {item.what}")
        else:
            users.remove_legacy(item)
            click.echo(f"removed  {item.what}")
