"""`rkdet runner build --sdk DIR`: rkdet-run-c (the rknn_c backend's runner) built against your SDK's header."""

from __future__ import annotations

from pathlib import Path

import click

from rkdet.backends.capi_build import ARCHES, build_runner, default_cache


@click.group("runner")
def runner_group() -> None:
    """Native runners that deploy pushes for backends without Python (rknn_c)."""


@runner_group.command("build")
@click.option("--sdk", "sdk", type=click.Path(path_type=Path), required=True,
              help="Your Rockchip SDK folder (holds rknn_api.h and librknnrt.so); rkdet ships neither.")
@click.option("--arch", type=click.Choice(tuple(ARCHES)), default="aarch64", show_default=True,
              help="Board architecture: aarch64 (RK3568/RK3588), armhf (RV1126/RV1109).")
@click.option("--cache", type=click.Path(path_type=Path), default=None,
              help="Where built runners are kept (default $RKDET_RUNNER_CACHE or ~/.cache/rkdet/runners).")
def build_command(sdk: Path, arch: str, cache: Path | None) -> None:
    """Cross-compile rkdet-run-c against SDK's rknn_api.h (cached by the header's sha256 and the arch).

    Exit 0 built (or already built), 2 no usable SDK, 3 the cross compiler failed or is missing."""
    built = build_runner(sdk, arch, cache or default_cache())
    click.echo(f"rkdet-run-c for {built.arch}: {built.path} (rknn_api.h sha256 {built.header_sha256[:16]})")
