"""Set-up's CPU torch step (rkdet/convert/cpu_torch.py, run by .ci/setup and per-version toolkit environments):
the lock's very wheel, from PyTorch's CPU index or RKDET_TORCH_INDEX; when neither serves it, one line naming
both, never pip's raw report. Offline: the sources here are a folder and a closed loopback port."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rkdet.convert.cpu_torch import TORCH_CPU_INDEX, TORCH_INDEX_ENV, locked_torch

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements" / "host.lock.txt"
SCRIPT = REPO / "rkdet" / "convert" / "cpu_torch.py"


def test_the_step_installs_the_wheel_the_lock_names() -> None:
    version, hashes = locked_torch(LOCK)
    entry = re.search(r"^torch==(\S+) \\\n\s+--hash=sha256:([0-9a-f]{64})", LOCK.read_text(), re.MULTILINE)
    assert entry is not None and (version, hashes) == (entry.group(1), [entry.group(2)])
    setup = (REPO / ".ci" / "setup").read_text()
    torch_step = setup.index("rkdet/convert/cpu_torch.py .venv/bin/python requirements/host.lock.txt")
    assert torch_step < setup.index("--require-hashes -r requirements/host.lock.txt")  # before the lock


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    """A venv with pip and no torch (the step's target on a fresh machine)."""
    folder = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True, timeout=300)
    return folder / "bin" / "python"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("source", ["wrong-wheel", "unreachable"])
def test_a_source_without_the_wheel_is_one_line_naming_the_index_and_the_override(bare_venv: Path, tmp_path: Path,
                                                                                 source: str) -> None:
    version, _ = locked_torch(LOCK)
    if source == "wrong-wheel":  # a folder serving another file under the wheel's name (as the CUDA build is)
        where = tmp_path / "wheels"
        where.mkdir()
        (where / f"torch-{version}-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"not the CPU wheel")
        index = str(where)
    else:
        index = f"http://127.0.0.1:{_closed_port()}/whl/cpu"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update({TORCH_INDEX_ENV: index, "PIP_CONFIG_FILE": os.devnull, "PIP_RETRIES": "0", "PIP_TIMEOUT": "5"})
    done = subprocess.run([sys.executable, str(SCRIPT), str(bare_venv), str(LOCK), str(tmp_path / "pip.log")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"rkdet set-up: torch {version}+cpu") and f"from {index}:" in lines[0]
    assert TORCH_CPU_INDEX in lines[0] and TORCH_INDEX_ENV in lines[0] and str(tmp_path / "pip.log") in lines[0]
    log = (tmp_path / "pip.log").read_text()
    if source == "wrong-wheel":  # pip's hash report went to the log, not to the user
        assert "do not match the hashes" in log.lower() and "Expected sha256" not in done.stderr
    probe = subprocess.run([str(bare_venv), "-c", "import torch"], capture_output=True, timeout=60)
    assert probe.returncode != 0  # nothing half-installed
