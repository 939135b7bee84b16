"""Session-wide fixture: the shipped default model converted once, shared by every test that needs it.

Converting takes ~10 s on 2 cores, so the convert, diff and deploy tests all read this one build
(read-only: tests that need to change a build copy it first), made once per run even when the suite
runs in pytest-xdist workers (`shared_across_workers`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]


def shared_across_workers(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Path]) -> Path:
    """`make(folder)` once per test run, even with pytest-xdist's workers (each a process with its own
    session): the first worker to get here builds under a file lock in the run's shared temp folder,
    the others wait for it and read the same result (a path, recorded beside it). Read-only for tests."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above each worker's own
    shared = base / f"shared-{name}"
    with FileLock(str(shared) + ".lock"):
        done = shared / "result.txt"
        if done.is_file():
            return Path(done.read_text())
        shutil.rmtree(shared, ignore_errors=True)  # a worker that died mid-build
        shared.mkdir(parents=True)
        result = make(shared)
        done.write_text(str(result))
        return result


def convert_default(out: Path, *extra: str) -> Path:
    """`rkdet convert --config configs/yolov8.yaml [extra]` into `out`; the build folder."""
    proc = subprocess.run([sys.executable, "-m", "rkdet.cli", "convert", "--config", str(REPO / "configs" / "yolov8.yaml"),
                           *extra, "--out", str(out), "--json"], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ), timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return Path(json.loads(proc.stdout)["builds"][0]["folder"])


@pytest.fixture(scope="session")
def default_build(tmp_path_factory) -> Path:
    """`rkdet convert --config configs/yolov8.yaml`: the build folder of the default model for rk3588."""
    return shared_across_workers(tmp_path_factory, "default-build", convert_default)


def trim_golden(build: Path, keep: int) -> Path:
    """Keep only the first `keep` golden input pages of a build copy, in golden/inputs AND in its manifest's
    `inputs.golden` (deploy pushes exactly the inputs the manifest names, rkdet.records.build_files)."""
    pages = sorted((build / "golden" / "inputs").glob("*.npy"))
    assert len(pages) > keep
    for page in pages[keep:]:
        page.unlink()
    kept = {p.stem for p in pages[:keep]}
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["inputs"]["golden"] = [g for g in manifest["inputs"]["golden"]
                                    if Path(g.get("file") or "").stem in kept or g.get("name") in kept]
    assert len(manifest["inputs"]["golden"]) == keep
    (build / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return build
