"""docs/ARCHITECTURE.md's "may import" table, kept true by import-linter (contracts in pyproject.toml).

Why a test: a wrong import (a board module reaching into convert, the runner importing rkdet, a new
import loop) must fail CI, not wait for someone to reread the table.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(package_root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the rkdet package found under `package_root`, with that folder's pyproject.toml."""
    env = {**os.environ, "PYTHONPATH": str(package_root), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(package_root / "pyproject.toml")],
                          cwd=package_root, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_import_contracts_are_kept() -> None:
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    kept = re.search(r"Contracts: (\d+) kept, (\d+) broken", proc.stdout)
    assert kept and int(kept.group(1)) >= 10 and kept.group(2) == "0", proc.stdout[-2000:]
    assert not (REPO / ".import_linter_cache").exists() and not (REPO / ".grimp_cache").exists()


def test_an_injected_forbidden_import_or_loop_fails(tmp_path: Path) -> None:
    shutil.copytree(REPO / "rkdet", tmp_path / "rkdet", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    inject = {
        "onboard/run.py": "import rkdet.config  # injected: the on-board program importing rkdet",
        "diff/metrics.py": "from rkdet.link import ssh  # injected: diff reaching into the board\nimport rkdet.diff.compare  # injected: compare -> metrics -> compare",
    }
    for rel, line in inject.items():
        path = tmp_path / "rkdet" / rel
        path.write_text(path.read_text() + "\n" + line + "\n")
    proc = lint_imports(tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, out[-4000:] + proc.stderr[-2000:]
    assert "rkdet.diff.metrics -> rkdet.link.ssh" in out
    assert "rkdet.onboard.run -> rkdet.config" in out
    assert re.search(r"No import loops.*BROKEN", out), out[-4000:]
    # the real tree is untouched and still clean
    assert "injected" not in (REPO / "rkdet" / "onboard" / "run.py").read_text()
