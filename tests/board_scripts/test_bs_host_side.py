"""rkdet.boardinfo.scripts: output parsing, remote command quoting, setting names, error mapping."""

from __future__ import annotations

import shlex

import pytest

from rkdet.boardinfo.scripts import (
    PinReport, board_command, check_board_env, parse_pin, parse_records, parse_restore,
    run_script_locally, script_path,
)
from rkdet.records.probe import parse_probe
from rkdet.errors import BoardError, InputError


def test_parse_records_skips_foreign_lines_and_a_cut_off_last_line() -> None:
    text = ('{"record":"state","script":"pin","status":"saved"}\n'
            "child says hello\n"
            '{"not":"a record"}\n'
            "{broken json\n"
            '{"record":"result","script":"pin","status":"ok","exit":0}\n'
            '{"record":"knob","script":"restore","knob":"x","stat')  # killed mid-write
    recs = parse_records(text.encode())
    assert [r["record"] for r in recs] == ["state", "result"]
    assert parse_pin(recs).ok and parse_restore(recs).status == "incomplete"


def test_missing_result_is_incomplete_and_raises_board_error() -> None:
    rep = parse_pin([{"record": "state", "script": "pin", "status": "saved"}])
    assert rep.status == "incomplete" and rep.state == "saved" and not rep.ok
    with pytest.raises(BoardError, match="rock5: pin.sh: pin.sh ended without a result"):
        rep.raise_for_status("rock5")


@pytest.mark.parametrize("code, error", [(2, InputError), (3, BoardError), (1, BoardError)])
def test_raise_for_status_maps_exit_codes(code: int, error: type) -> None:
    rep = parse_pin([{"record": "result", "script": "pin", "status": "error", "exit": code, "reason": "why"}])
    assert isinstance(rep, PinReport)
    with pytest.raises(error, match="^board-1: pin.sh: why$") as info:
        rep.raise_for_status("board-1")
    assert info.value.exit_code == (2 if code == 2 else 3)


def test_board_command_quotes_everything() -> None:
    nasty = ["python3", "-c", "print('$(reboot)'); print(\"`id`\")", "a b", ";rm -rf /"]
    cmd = board_command("run-pinned", "/home/rk det/scripts/", {"RKDET_NPU_FREQ": 594000000, "RKDET_THP": None}, nasty)
    argv = shlex.split(cmd)
    assert argv == ["env", "RKDET_NPU_FREQ=594000000", "sh", "/home/rk det/scripts/run-pinned.sh", "--", *nasty]
    assert board_command("probe", "/opt/rkdet") == "sh /opt/rkdet/probe.sh"


def test_unknown_names_are_refused() -> None:
    with pytest.raises(InputError, match="RKDET_NPU_FRQ"):
        check_board_env({"RKDET_NPU_FRQ": "1"})
    with pytest.raises(InputError, match="unknown board script 'reboot'"):
        board_command("reboot", "/x")
    with pytest.raises(InputError, match="unknown board script"):
        script_path("lib")
    with pytest.raises(InputError, match="RKDET_GPU_FREQS"):
        run_script_locally("pin", "/nonexistent", "/nonexistent", env={"RKDET_GPU_FREQS": "max"})


def test_probe_report_defaults_when_empty() -> None:
    rep = parse_probe([])
    assert rep.status == "incomplete" and rep.devfreq_of("npu") is None and rep.missing == {}
