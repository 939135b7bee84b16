"""A board's odd answers (probe records, snapshots.jsonl) end as one line naming board and entry (issue 9 item 6),
and board-sourced text reaches the terminal literally (item 4). Host-side parsers only: no board needed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from rkdet.deploy.collect import clock_changes
from rkdet.boardinfo.remote_scripts import parse_probe_of
from rkdet.diff.correlate import correlate
from rkdet.errors import EXIT_BOARD, BoardError
from rkdet.snapshots import SnapshotError, parse_snapshot, read_snapshots
from rkdet.textsafe import literal

BOARD = "me@board:22"
GOOD_SHOT = ('{"at": "before", "run": null, "cpu": {"policy0": {"cur_khz": 1800000, "governor": "performance"}}, '
             '"devfreq": {"fdab0000.npu": {"cur_hz": 1000000000, "governor": "userspace"}}, "thermal": {"soc": 40000}}')


def _probe(**fields: object) -> list[dict]:
    return [{"record": "soc", "script": "probe", "soc": "rk3588", "compatible": ["rockchip,rk3588"]},
            {"record": "result", "script": "probe", "status": "ok", "exit": 0},
            {"script": "probe", **fields}]


@pytest.mark.parametrize(("record", "field"), [
    ({"record": "cpu_policy"}, "name"),
    ({"record": "cpu_policy", "name": "policy0", "cpus": 4}, "cpus"),
    ({"record": "devfreq", "name": "npu", "frequencies_hz": ["fast"]}, "frequencies_hz"),
    ({"record": "thermal", "millicelsius": 4}, "type"),
    ({"record": "missing"}, "what"),
    ({"record": "disk", "free_kb": "lots"}, "free_kb"),
    ({"record": "runtime", "version": 2}, "version"),
])
def test_malformed_probe_records_are_exit_3_naming_board_record_and_field(record: dict, field: str) -> None:
    records = _probe(**record)
    if record["record"] in ("disk", "runtime"):  # the first record of a kind is the one read
        records = [records[-1], *records[:-1]]
    with pytest.raises(BoardError) as err:
        parse_probe_of(BOARD, records)
    message = str(err.value)
    assert err.value.exit_code == EXIT_BOARD and message.startswith(BOARD)
    assert repr(record["record"]) in message and repr(field) in message


def test_a_well_formed_probe_still_parses() -> None:
    report = parse_probe_of(BOARD, _probe(record="disk", free_kb=1234))
    assert report.soc == "rk3588" and report.work_dir_free_kb == 1234 and report.compatible == ("rockchip,rk3588",)


@pytest.mark.parametrize(("line", "why"), [
    ("not json", "line 2"),
    ('{"at": "periodic", "run": 1, "cpu": [1, 2]}', "'cpu' is list"),
    ('{"at": "periodic", "run": 1, "devfreq": {"npu": 5}}', "entry 'npu'"),
    ('{"at": "periodic", "run": "one"}', "'run'"),
    ('{"at": "periodic", "run": 1, "thermal": {"soc": Infinity}}', "not a number"),
    ('{"at": "later", "run": 1}', "'at'"),
    ('[1, 2]', "not an object"),
    ('{"at": "periodic", "run": 1, "cpu": {"p0": {"cur_khz": true}}}', "not an integer"),
])
def test_malformed_snapshots_are_exit_3_naming_board_and_line(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "snapshots.jsonl"
    path.write_text(GOOD_SHOT + "\n" + line + "\n")
    with pytest.raises(BoardError) as err:
        clock_changes(path, BOARD)
    message = str(err.value)
    assert message.startswith(BOARD) and "snapshots.jsonl" in message and "line 2" in message and why in message
    assert "\n" not in message


def test_clock_changes_and_correlate_read_snapshots_the_same_way(tmp_path: Path) -> None:
    moved = GOOD_SHOT.replace('"before", "run": null', '"periodic", "run": 2').replace("1000000000", "300000000")
    path = tmp_path / "snapshots.jsonl"
    path.write_text(GOOD_SHOT + "\n" + moved + "\n" + '{"at": "after"')  # a cut-off last line is skipped
    [warning] = clock_changes(path, BOARD)
    assert "devfreq/fdab0000.npu" in warning and "1000000000 -> 300000000 Hz by run 2" in warning
    shots = read_snapshots(path)
    assert [s.at for s in shots] == ["before", "periodic"] and shots[1].devfreq["fdab0000.npu"].cur == 300000000
    import json

    raw = [json.loads(GOOD_SHOT), json.loads(moved), {"at": "periodic", "run": 1, "cpu": [1]}]
    findings = correlate({3, 4}, 6, raw)  # the malformed third record is no evidence, and no crash
    assert any("fdab0000.npu frequency" in f for f in findings), findings
    with pytest.raises(SnapshotError):
        parse_snapshot(raw[2])


def test_board_text_is_printed_literally_as_deploy_prints_it() -> None:
    """deploy prints board-sourced warnings as Text.assemble(("warning", "yellow"), ": ", literal(w))."""
    hostile = "[green]SAME[/green]\x1b[2J\x1b]0;title\x07 [/] \u202eevil\nnext"
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system="truecolor", width=200, highlight=False).print(
        Text.assemble(("warning", "yellow"), ": ", literal(hostile)))
    shown = out.getvalue()
    assert ": [green]SAME[/green]\\x1b[2J\\x1b]0;title\\x07 [/] \\u202eevil\\nnext" in shown, repr(shown)
    assert shown.count("\x1b[") == 2  # only rich's own yellow on/off: none of the board's sequences
    assert shown.count("\n") == 1
