"""No untyped dict crosses a module boundary for stage-file data (issue 20, "what done looks like").

An AST scan of rkdet/: a public function's parameter or return, or a dataclass field, whose name says it
carries a stage file's data (a manifest, a run.json, ...) must be typed by its record in rkdet/records/,
never `dict`, `Dict`, `dict[str, Any]`, `Mapping[str, Any]` or `Any`. `PATTERNS` names each
record's carriers.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "rkdet"

# THE list: names (of a parameter, a dataclass field, or a function for its return) that carry the data
# of a stage file, each with the record that types it. Matched against the whole name.
PATTERNS: dict[str, str] = {
    r"(build_)?manifest(_doc)?": "rkdet.records.manifest.Manifest",
    r"(src_|first_)?run_(info|json|doc|record)|first_run(_json)?|against": "rkdet.records.run_info.RunInfo",
    r"deploy(_json|_record|_doc|_state)?|facts|(run_)?settings|transfer|pulled|board_lock":
        "rkdet.records.deploy_record.DeployRecord (and its sub-records)",
    r"probe(_report|_json|_doc)?|board_json|report": "rkdet.records.probe.ProbeReport",
    r"cells?(_json|_doc)?": "rkdet.records.cell.Cell",
}
# The board-side program (stdlib + numpy, no records) and the records themselves (their readers take the
# parsed JSON by definition) are not host boundaries.
EXEMPT = ("onboard/", "emulator/runtime_double/", "records/")
_UNTYPED = re.compile(r"^(dict|Dict|Mapping|MutableMapping|Any|object)(\[str, *Any\])?( *\| *None)?$|"
                      r"^Optional\[(dict|Dict|Mapping)(\[str, *Any\])?\]$")
_NAME = re.compile("|".join(f"(?:{p})" for p in PATTERNS))


def _untyped(annotation: ast.expr | None) -> bool:
    return annotation is not None and bool(_UNTYPED.match(ast.unparse(annotation).replace("typing.", "")))


def _is_dataclass(cls: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in cls.decorator_list)


def offences(source: str, where: str) -> list[str]:
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if _NAME.fullmatch(arg.arg) and _untyped(arg.annotation):
                    found.append(f"{where}:{node.lineno} {node.name}({arg.arg}: {ast.unparse(arg.annotation)})")
            if _NAME.fullmatch(re.sub(r"^(read|load|get|build|first)_", "", node.name)) and _untyped(node.returns):
                found.append(f"{where}:{node.lineno} {node.name}() -> {ast.unparse(node.returns)}")
        if isinstance(node, ast.ClassDef) and _is_dataclass(node):
            for stmt in node.body:
                if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                        and _NAME.fullmatch(stmt.target.id) and _untyped(stmt.annotation)):
                    found.append(f"{where}:{stmt.lineno} {node.name}.{stmt.target.id}: {ast.unparse(stmt.annotation)}")
    return found


def test_no_stage_file_data_crosses_a_module_boundary_as_a_dict() -> None:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(EXEMPT) and not any(e in rel for e in EXEMPT if e.endswith("/")):
            found += offences(path.read_text(encoding="utf-8"), rel)
    assert not found, "typed records, not dicts (rkdet/records/):\n" + "\n".join(found)


def test_the_scan_catches_each_untyped_form() -> None:
    """The scan itself: every spelling of an untyped boundary is caught, a typed one is not."""
    source = '''
from dataclasses import dataclass
def a(manifest: dict) -> None: ...
def b(run_info: dict[str, Any]) -> None: ...
def c(x, *, manifest: Optional[Dict[str, Any]] = None): ...
def read_manifest(path) -> dict[str, Any]: ...
def d(against: Mapping[str, Any] | None): ...
@dataclass
class J:
    run_json: dict[str, Any] | None = None
    manifest: Any = None
def ok(manifest: Manifest, run_info: RunInfo | None, other: dict[str, Any]) -> dict: ...
def _private(manifest: dict) -> None: ...
'''
    found = offences(source, "x.py")
    assert [f.split(" ", 1)[1].split("(")[0].split(":")[0].split(" ")[0] for f in found] == [
        "a", "b", "c", "read_manifest", "d", "J.run_json", "J.manifest"], found
