"""Crafted inputs for the trust tests (issue 21): a minimal build folder and the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOOD_FP = "ab" * 32


def rkdet(args: Sequence[str], timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real `rkdet` CLI (the timeout only keeps a regression from hanging the suite)."""
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=timeout, env=dict(os.environ))


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The one `rkdet: ...` line; no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "internal error" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def fake_build(folder: Path, manifest: object | None = None, raw: bytes | None = None) -> Path:
    """A build folder with the files a board run checks for and the given manifest (or raw bytes)."""
    (folder / "golden" / "inputs").mkdir(parents=True, exist_ok=True)
    (folder / "model.rknn").write_bytes(b"RKNN\0\0\0\0not a model")
    (folder / "model.io.json").write_text("{}")
    (folder / "config.resolved.json").write_text(json.dumps({"run": {}, "board": {}, "tolerances": {}}))
    if raw is not None:
        (folder / "manifest.json").write_bytes(raw)
    elif manifest is not None:
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def manifest(**changes: object) -> dict:
    doc: dict = {"fingerprint": GOOD_FP, "platform": "rk3588", "inputs": {}, "rknn": {"header": {}}}
    doc.update(changes)
    return doc


def tree(root: Path) -> set[str]:
    """Every path under `root` (to show nothing was written)."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*")} if root.exists() else set()
