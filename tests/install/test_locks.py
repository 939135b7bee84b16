"""Every lock pins every package by version and sha256, so two machines get the same files.

Why: a lock of bare `==` pins let a fresh machine resolve torch 2.13.0 to its 5 GB CUDA build where the
CPU wheel was not at hand, and the build's fingerprint moved with it. `.ci/setup` installs each lock
with `--require-hashes`; `.ci/hash-lock` writes the hashes. This test fails when a lock gains a
package without one (pip would refuse the whole lock at set-up).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCKS = sorted((REPO / "requirements").glob("*.lock.txt"))
SETUP = (REPO / ".ci" / "setup").read_text()


def _requirements(path: Path) -> list[str]:
    text = re.sub(r"\\\n", " ", path.read_text())
    return [line.split(" #")[0].strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_every_package_is_pinned_by_version_and_hash(lock: Path) -> None:
    reqs = _requirements(lock)
    assert reqs, lock
    for req in reqs:
        assert re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[^\s]+ ", req), f"{lock.name}: not an exact pin: {req}"
        assert re.search(r"--hash=sha256:[0-9a-f]{64}\b", req), f"{lock.name}: no sha256 for {req.split()[0]}"


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_setup_installs_every_lock_with_require_hashes(lock: Path) -> None:
    uses = [line for line in SETUP.splitlines() if f"requirements/{lock.name}" in line and "pip install" in line]
    assert uses, f".ci/setup never installs {lock.name}"
    assert all("--require-hashes" in line for line in uses), uses


def _names(path: Path) -> set[str]:
    return {re.sub(r"[-_.]+", "-", req.split("==")[0]).lower() for req in _requirements(path)}


def test_the_host_lock_holds_every_dependency_of_its_packages() -> None:
    """With --require-hashes pip refuses a dependency the lock does not pin (tzdata, needed by
    python-dateutil 4, was found this way on a fresh machine): read from the installed packages'
    own metadata, so no index is asked."""
    from importlib import metadata

    from packaging.requirements import Requirement

    lock = _names(REPO / "requirements" / "host.lock.txt")
    missing = set()
    for name in sorted(lock):
        for text in metadata.distribution(name).requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if re.sub(r"[-_.]+", "-", req.name).lower() not in lock:
                missing.add(f"{req.name} (needed by {name})")
    assert not missing, f"requirements/host.lock.txt lacks: {sorted(missing)}"
