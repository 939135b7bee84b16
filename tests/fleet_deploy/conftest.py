"""Fixtures for `rkdet fleet deploy` end to end: several real emulated boards (sshd + sysfs tree) on
127.0.0.1, an Ansible inventory written for them, builds for rk3588 and rk3568 converted once.

Until the emulated fleet (`rkdet.emulator.fleet`) lands, boards are started here one by one; each has
its own key and host key, merged into one known_hosts (strict host keys, as on a real lab).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAST_INPUTS = 2


@pytest.fixture(scope="session", autouse=True)
def fleet_private_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """deploy's private resume records (XDG_STATE_HOME) go to a temp dir, not the host user's home."""
    state = tmp_path_factory.mktemp("xdg-state")
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(state)
    yield state
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old


@pytest.fixture(scope="session")
def fleet_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The default model converted for rk3588 and rk3568 in one `rkdet convert` (golden inputs cut to two
    pages, as deploy's fast_build does: same model, same fingerprint)."""
    work = tmp_path_factory.mktemp("fleet-builds")
    text = (REPO / "configs" / "yolov8.yaml").read_text()
    assert "platforms: [rk3588]" in text
    config = REPO / "configs" / f".fleet-test-{os.getpid()}.yaml"  # beside the original: its relative paths hold
    config.write_text(text.replace("platforms: [rk3588]", "platforms: [rk3588, rk3568]"))
    try:
        proc = subprocess.run([sys.executable, "-m", "rkdet.cli", "convert", "--config", str(config), "--out",
                               str(work), "--json"], capture_output=True, text=True, cwd=REPO, timeout=900,
                              env=dict(os.environ))
    finally:
        config.unlink()
    assert proc.returncode == 0, proc.stderr[-4000:]
    builds = {}
    for b in json.loads(proc.stdout)["builds"]:
        folder = Path(b["folder"])
        pages = sorted((folder / "golden" / "inputs").glob("*.npy"))
        for page in pages[FAST_INPUTS:]:
            page.unlink()
        builds[json.loads((folder / "manifest.json").read_text())["platform"]] = folder
    assert set(builds) == {"rk3588", "rk3568"}
    return builds


@pytest.fixture(scope="session")
def build_args(fleet_builds: dict[str, Path]) -> list[str]:
    return [a for folder in fleet_builds.values() for a in ("--build", str(folder))]


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest
