"""Fixtures for `rkdet fleet deploy` end to end: several real emulated boards (sshd + sysfs tree) on
127.0.0.1, an Ansible inventory written for them, builds for rk3588 and rk3568 converted once.

Until the emulated fleet (`rkdet.emulator.fleet`) is there, boards are started here one by one; each has
its own key and host key, merged into one known_hosts (strict host keys, as on a real lab).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from shared_build import convert_default, shared_across_workers, trim_golden

REPO = Path(__file__).resolve().parents[2]
FAST_INPUTS = 2


def _trimmed_copy(build: Path, dest: Path) -> Path:
    """A copy of `build` whose golden/inputs holds only its first pages (same model, same fingerprint)."""
    shutil.copytree(build, dest)
    return trim_golden(dest, FAST_INPUTS)


@pytest.fixture(scope="session")
def fleet_builds(default_build: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Builds for both NPU families of the mixed fleet: the session's default rk3588 build (shared with
    the other suites, converted once) and the default model converted for rk3568 here; both with two
    golden pages, as deploy's fast_build."""
    def make(work: Path) -> Path:
        rk3568 = convert_default(work / "convert", "--target", "rk3568")
        _trimmed_copy(default_build, work / "rk3588" / default_build.name)
        _trimmed_copy(rk3568, work / "rk3568" / rk3568.name)
        return work

    work = shared_across_workers(tmp_path_factory, "fleet-builds", make)  # once per run, xdist or not
    builds = {platform: next((work / platform).iterdir()) for platform in ("rk3588", "rk3568")}
    for platform, folder in builds.items():
        assert json.loads((folder / "manifest.json").read_text())["platform"] == platform
    return builds


@pytest.fixture(scope="session")
def build_args(fleet_builds: dict[str, Path]) -> list[str]:
    return [a for folder in fleet_builds.values() for a in ("--build", str(folder))]
