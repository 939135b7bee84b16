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


# ---- decision tasks: a task name is compared only inside its registry (rkdet/decode/tasks/) ----------------

TASKS_REGISTRY = REPO / "rkdet" / "decode" / "tasks"
# The on-board program cannot import rkdet.decode (stdlib + numpy only, the "onboard" contract): it reads the
# self-check bundle's decision records as the wire format they are (tests/convert/test_selfcheck_bundle.py
# checks it against the classification task's bundle record).
TASK_NAME_EXEMPT = (REPO / "rkdet" / "onboard",)


def task_names() -> frozenset[str]:
    """Every decision task's name and record kind, from the registry itself."""
    from rkdet.decode.tasks import TASKS

    return frozenset({t.name for t in TASKS} | {t.record_kind for t in TASKS})


def task_name_comparisons(source: str, names: frozenset[str]) -> list[int]:
    """Lines where a comparison (==, !=, in, not in, is) has a task name as a string literal on either side,
    alone or inside a tuple, list or set literal."""
    import ast

    def literal_names(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(literal_names(e) for e in node.elts)
        return False

    return sorted({node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Compare)
                   and any(literal_names(operand) for operand in (node.left, *node.comparators))})


def test_no_task_name_is_compared_outside_the_task_registry() -> None:
    names = task_names()
    assert {"detection", "segmentation", "classification"} <= names
    found = []
    for path in sorted((REPO / "rkdet").rglob("*.py")):
        if path.is_relative_to(TASKS_REGISTRY) or any(path.is_relative_to(e) for e in TASK_NAME_EXEMPT):
            continue
        found += [f"{path.relative_to(REPO)}:{line}" for line in task_name_comparisons(path.read_text(), names)]
    assert not found, f"a task name compared outside rkdet/decode/tasks/ (ask the registry instead): {found}"


def test_the_task_name_check_finds_what_it_forbids() -> None:
    names = task_names()
    bad = ('if layout.task in ("detection", "segmentation"):\n    pass\n'
           'x = d.kind == "classification"\n'
           'y = "segmentation" != t\n'
           'z = layout.kind == "yolov8-seg" or {"detection"} == s\n')
    assert task_name_comparisons(bad, names) == [1, 3, 4, 5]
    fine = 'r = {"kind": "detection"}\nq = SAME_DECISION["segmentation"]\nw = kind == "none"\n'
    assert task_name_comparisons(fine, names) == []
