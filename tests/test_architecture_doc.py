"""docs/ARCHITECTURE.md is the map: every room it names exists, every module lives in a room it names,
and every import between rooms is one its "may import" column allows. A moved module or a new import
that the map does not show fails here, so the map cannot drift from the code."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "ARCHITECTURE.md"
_TICKED = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Row:
    places: tuple[str, ...]  # dotted module prefixes, e.g. "rkdet.link", "rkdet.deploy.flow"
    allowed: frozenset[str]  # dotted rkdet prefixes this row may import
    faces: tuple[str, ...] = ()  # packages named by their `__init__.py`: that module only, not what is below it


def _dotted(path: str) -> str:
    return path.strip("/").removesuffix(".py").replace("/", ".")


def rooms_table(text: str) -> list[Row]:
    """The rows of the "## Rooms" table: | `place`[, `place`] | job | `may`, `import` |."""
    section = text.split("\n## Rooms", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`rkdet"):
            continue
        named = [p for p in _TICKED.findall(cells[0]) if p.startswith("rkdet")]
        places = tuple(_dotted(p) for p in named if not p.endswith("__init__.py"))
        faces = tuple(_dotted(p).removesuffix(".__init__") for p in named if p.endswith("__init__.py"))
        allowed = frozenset("rkdet." + name for name in _TICKED.findall(cells[-1]) if re.fullmatch(r"[a-z_.]+", name))
        rows.append(Row(places, allowed, faces))
    return rows


def _covers(prefix: str, module: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def row_of(rows: list[Row], module: str) -> tuple[Row, str] | None:
    """The row whose place is the longest prefix of `module` (or which names it as a package's face)."""
    face = next(((row, f) for row in rows for f in row.faces if f == module), None)
    if face is not None:
        return face
    best = max(((row, p) for row in rows for p in row.places if _covers(p, module)),
               key=lambda rp: len(rp[1]), default=None)
    return best


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    found = rooms_table(DOC.read_text())
    assert len(found) >= 15, "the Rooms table of docs/ARCHITECTURE.md was not found or is nearly empty"
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("rkdet", cache_dir=None)


def test_every_room_the_map_names_exists(rows: list[Row]) -> None:
    missing = [p for row in rows for p in (*row.places, *row.faces)
               if not ((REPO / (p.replace(".", "/") + ".py")).is_file() or (REPO / p.replace(".", "/")).is_dir())]
    assert not missing, f"docs/ARCHITECTURE.md names rooms that are gone: {missing}"
    named = [a for row in rows for a in row.allowed]
    gone = [a for a in named if not ((REPO / (a.replace(".", "/") + ".py")).is_file() or (REPO / a.replace(".", "/")).is_dir())]
    assert not gone, f"docs/ARCHITECTURE.md's 'may import' names rooms that are gone: {sorted(set(gone))}"


def test_every_module_lives_in_a_room_of_the_map(rows: list[Row], graph: grimp.ImportGraph) -> None:
    homeless = sorted(m for m in graph.modules if row_of(rows, m) is None)
    assert not homeless, f"modules in no room of docs/ARCHITECTURE.md: {homeless}"


def test_every_import_between_rooms_is_one_the_map_allows(rows: list[Row], graph: grimp.ImportGraph) -> None:
    broken = []
    for module in sorted(graph.modules):
        home = row_of(rows, module)
        if home is None:
            continue
        row, _ = home
        for imported in graph.find_modules_directly_imported_by(module):
            if not imported.startswith("rkdet.") or imported == "rkdet":
                continue
            there = row_of(rows, imported)
            if there is not None and there[0] is row:
                continue  # inside the room
            if not any(_covers(a, imported) for a in row.allowed):
                broken.append(f"{module} -> {imported}")
    assert not broken, "imports docs/ARCHITECTURE.md does not allow (add them to the row, or remove them):\n" + "\n".join(broken)


def test_the_check_itself_catches_a_missing_row_and_an_unlisted_import() -> None:
    text = ("# x\n## Rooms\n| place | job | may import |\n|---|---|---|\n"
            "| `rkdet/diff/` | diff | `errors`, `records.io` |\n| `rkdet/errors.py` | errors | — |\n"
            "| `rkdet/__init__.py` | face | — |\n## next\n")
    rows = rooms_table(text)
    assert [r.places for r in rows] == [("rkdet.diff",), ("rkdet.errors",), ()]
    assert row_of(rows, "rkdet") is not None and row_of(rows, "rkdet.link") is None  # a face covers itself only
    diff_row = row_of(rows, "rkdet.diff.compare")
    assert diff_row is not None and diff_row[0].allowed == {"rkdet.errors", "rkdet.records.io"}
    assert not any(_covers(a, "rkdet.records.manifest") for a in diff_row[0].allowed)
    assert row_of(rows, "rkdet.link.ssh") is None
