"""One definition of a run id and a session id (rkdet/records/ids.py): what deploy and the fleet make fits it,
and a crafted id (path separators, '..', a newline, escape codes, over-long) is refused with one line at every
entry point that takes one: deploy.json's and the private record's reader (history, --resume, the pair's
session line read through them), the private record's path, the board layout of a run and of a session."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rkdet.deploy.deploy_state import private_record_path
from rkdet.deploy.layout import RemoteLayout
from rkdet.errors import InputError
from rkdet.records.deploy_record import DeployRecord, DeployStatus, read_deploy_record, read_private_record
from rkdet.records.ids import ID_PATTERN, check_run_id, is_run_id, new_run_id

GOOD = "20261206T210000Z-beef"
SESSION = {"id": "20261206T205959Z-cafe", "runs": [GOOD, "20261206T210000Z-f00d"], "backends": ["a", "b"],
           "index": 0, "pinned": True}
CRAFTED = {
    "slash": "a/b",
    "backslash": "a\\b",
    "dotdot": "..",
    "dotdot-path": "../../etc",
    "dot-start": ".hidden",
    "newline": "run\nid",
    "escape": "run\x1b[2J\u202e",
    "space": "run id",
    "empty": "",
    "over-long": "a" * 65,
}


def _one_line(err: pytest.ExceptionInfo[InputError]) -> str:
    text = str(err.value)
    assert "\n" not in text and "\x1b" not in text and "\u202e" not in text, text
    return text


def test_what_rkdet_makes_fits_the_one_definition() -> None:
    for made in (new_run_id(), new_run_id(random_bytes=3)):
        assert is_run_id(made) and check_run_id(made) == made
        assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]+", made)
    assert is_run_id("a" * 64) and not is_run_id(None) and not is_run_id(7)


def test_no_other_id_pattern_in_rkdet() -> None:
    """The three patterns that drifted apart are gone: no module but records/ids.py spells an id pattern."""
    root = Path(__file__).resolve().parents[2] / "rkdet"
    spelled = [str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "ids.py"
               and re.search(r"(_RUN_ID|run_id|session_id|given)\b.*(fullmatch|re\.compile)|0-9A-Za-z-\]", p.read_text())]
    assert spelled == [], spelled
    assert ID_PATTERN.pattern.startswith("[0-9A-Za-z]")


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_id_is_refused_in_one_line_everywhere(case: str, tmp_path: Path) -> None:
    bad = CRAFTED[case]
    with pytest.raises(InputError) as err:
        check_run_id(bad)
    assert "run id" in _one_line(err)
    with pytest.raises(InputError) as err:
        private_record_path(bad)
    _one_line(err)
    with pytest.raises(InputError) as err:
        RemoteLayout.for_run("/w", "ab" * 32, bad)
    _one_line(err)
    layout = RemoteLayout.for_run("/w", "ab" * 32, GOOD)
    for session, run in ((bad, GOOD), (SESSION["id"], bad)):
        with pytest.raises(InputError) as err:
            layout.in_session(session, run)
        _one_line(err)
    # read from files: deploy.json (run_id, session.id, session.runs) and the private resume record
    base = DeployRecord(run_id=GOOD, status=DeployStatus.COMPLETE).to_json()
    for field, doc in (("run_id", {**base, "run_id": bad}), ("id", {**base, "session": {**SESSION, "id": bad}}),
                       ("runs", {**base, "session": {**SESSION, "runs": [GOOD, bad]}})):
        path = tmp_path / f"deploy-{field}.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(InputError) as err:
            read_deploy_record(path)
        line = _one_line(err)
        assert str(path) in line and f"'{field}'" in line
    private = tmp_path / "private.json"
    private.write_text(json.dumps({"run_id": bad, "folder": str(tmp_path), "schema": "rkdet.deploy-private/1"}))
    with pytest.raises(InputError) as err:
        read_private_record(private)
    assert str(private) in _one_line(err)
