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


# --- backends: a backend is a descriptor (rkdet/backends/), never a string compared in place ---------------

import ast  # noqa: E402

from dataclasses import fields  # noqa: E402

from rkdet.backends.registry import REGISTRY  # noqa: E402
from rkdet.records.run_info import RunInfo  # noqa: E402
from rkdet.onboard.backend_table import BACKENDS  # noqa: E402

#: the only places that may compare a backend's name: the registry's descriptors and the on-board table
BACKEND_HOMES = ("rkdet/backends/", "rkdet/onboard/backend_table.py")


def backend_name_comparisons(source: str, names: tuple[str, ...] = BACKENDS) -> list[int]:
    """Lines where a backend name is compared as a string literal (`== "rknnlite"`, `!= ...`,
    `in ("rknnlite", ...)`, `match` cases): what only the registry may do."""
    def literal_names(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(isinstance(e, ast.Constant) and e.value in names for e in node.elts)
        return False

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(literal_names(n) for n in [node.left, *node.comparators]):
            found.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and literal_names(node.value):
            found.append(node.lineno)
    return found


def test_no_backend_name_is_compared_outside_the_registry() -> None:
    broken = []
    for path in sorted((REPO / "rkdet").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(BACKEND_HOMES):
            continue
        broken += [f"{rel}:{line}" for line in backend_name_comparisons(path.read_text(encoding="utf-8"))]
    assert not broken, "a backend name compared outside rkdet/backends/ (ask the descriptor instead):\n" + "\n".join(broken)


def test_the_backend_check_catches_each_form_of_comparison() -> None:
    assert backend_name_comparisons('if backend == "rknnlite": pass') == [1]
    assert backend_name_comparisons('x = "onnxruntime" != name') == [1]
    assert backend_name_comparisons('ok = b in ("rknnlite", "onnxruntime")') == [1]
    assert backend_name_comparisons('match b:\n    case "rknnlite": pass') == [2]
    assert backend_name_comparisons('make(backend="rknnlite"); d = {"rknnlite": 1}') == []  # naming, not comparing


def test_every_board_backend_has_one_descriptor() -> None:
    assert tuple(REGISTRY) == BACKENDS
    for name, desc in REGISTRY.items():
        assert desc.name == name and desc.model_file.startswith("model.")
        assert desc.reference(emulated=False) in ("simulator", "onnx-fp32")
        assert set(desc.run_json) <= {f.name for f in fields(RunInfo)}, desc.run_json


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
