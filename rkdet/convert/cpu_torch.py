"""The CPU build of torch that requirements/host.lock.txt pins, installed from PyTorch's CPU index.

Why its own step: the public index serves torch's CUDA build under the same version, so `pip install
--require-hashes -r host.lock.txt` on a fresh machine stops in pip's hash report. This installs the
lock's very wheel (same version, same sha256) from https://download.pytorch.org/whl/cpu first, or from
`RKDET_TORCH_INDEX` (a mirror of that index, or a folder holding the wheel). Without the override the CPU
index is added to pip's own sources (its configuration may name a mirror or a wheel folder), and the
lock's sha256 picks the CPU wheel among them. The lock's step then finds torch installed. Failing, it says so in one line naming the index and the override, never pip's report.

Stdlib only, and runnable as a file (`python rkdet/convert/cpu_torch.py PYTHON LOCK`): .ci/setup runs it
before anything of rkdet's is installed; rkdet/convert/toolkit_env.py imports it for a toolkit's venv.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_INDEX_ENV = "RKDET_TORCH_INDEX"


class TorchInstallError(Exception):
    """One line for the user: which torch, from where, and the override."""


def locked_torch(lock: Path) -> tuple[str, list[str]]:
    """(version, [sha256, ...]) of the lock's `torch==V \\ --hash=sha256:H` entry."""
    text = lock.read_text(encoding="utf-8")
    found = re.search(r"^torch==(\S+)((?:\s*\\\s*\n\s*--hash=sha256:[0-9a-f]{64})+)", text, re.MULTILINE)
    if found is None:
        raise TorchInstallError(f"{lock}: no hash-pinned torch==VERSION entry; run .ci/hash-lock {lock}")
    return found.group(1), re.findall(r"sha256:([0-9a-f]{64})", found.group(2))


def installed_version(python: str) -> str | None:
    probe = "import importlib.metadata as m\ntry: print(m.version('torch'))\nexcept m.PackageNotFoundError: pass"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    return done.stdout.strip() or None


def install_cpu_torch(python: str, lock: Path, log: Path | None = None) -> str:
    """Install the lock's CPU torch into `python`'s environment unless it is there; return what was done."""
    version, hashes = locked_torch(lock)
    if installed_version(python) == f"{version}+cpu":
        return f"torch {version}+cpu already installed"
    chosen = os.environ.get(TORCH_INDEX_ENV, "").strip()
    folder = chosen[len("file://"):] if chosen.startswith("file://") else chosen
    if not chosen:  # the CPU index beside pip's own sources (a mirror or wheel folder pip is configured with);
        source, where = TORCH_CPU_INDEX, ["--extra-index-url", TORCH_CPU_INDEX]  # the hash picks the CPU wheel
    elif os.path.isdir(folder):
        source, where = chosen, ["--no-index", "--find-links", folder]
    else:
        source, where = chosen, ["--index-url", chosen]
    with tempfile.TemporaryDirectory(prefix="rkdet-torch-") as tmp:
        req = Path(tmp) / "torch.txt"
        req.write_text(f"torch=={version} " + " ".join(f"--hash=sha256:{h}" for h in hashes) + "\n")
        done = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                               "--require-hashes", *where, "-r", str(req)],
                              capture_output=True, text=True, timeout=3600, check=False)
    if log is not None:
        log.write_text(done.stdout + done.stderr)
    if done.returncode != 0 or installed_version(python) != f"{version}+cpu":
        raise TorchInstallError(
            f"torch {version}+cpu (the lock's CPU wheel, sha256 {hashes[0][:12]}...) could not be installed from "
            f"{source}: set {TORCH_INDEX_ENV} to a mirror of {TORCH_CPU_INDEX} or to a folder holding "
            f"torch-{version}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl, then re-run"
            + (f" (pip's output: {log})" if log is not None else ""))
    origin = source if chosen else f"{source} or pip's own sources"
    return f"torch {version}+cpu installed from {origin}"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python rkdet/convert/cpu_torch.py PYTHON LOCK [LOG]", file=sys.stderr)
        return 2
    try:
        print(install_cpu_torch(argv[0], Path(argv[1]), Path(argv[2]) if len(argv) == 3 else None))
    except TorchInstallError as exc:
        print(f"rkdet set-up: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
