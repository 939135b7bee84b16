"""The run records in rkdet/records: deploy.json (`DeployRecord` and its status machine), board.json
(`ProbeReport`) and cells.json (`Cell`): one writer and one bounded, strict reader each, every refusal
one line naming the file and the field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rkdet.boardinfo.scripts import run_script_locally
from rkdet.deploy.deploy_state import DeployState, load_record, private_record_path
from rkdet.deploy.settings import RunSettings
from rkdet.emulator.fake_tree import build_fake_tree
from rkdet.emulator.socs import profile
from rkdet.errors import BoardError, InputError
from rkdet.records.cell import Cell, read_cells, write_cells
from rkdet.records.deploy_record import (ALLOWED, SessionRecord, BoardLockRecord, ContextsRecord, DeployRecord, DeployStatus,
                                         PublishedSettings, PulledRecord, TransferRecord, TransitionError,
                                         read_deploy_record, write_deploy_record)
from rkdet.records.io import MAX_RUN_RECORD
from rkdet.records.probe import parse_probe, read_probe, write_probe
from rkdet.records.verdict import CellsRecord, CellVerdict, NotApplicable, VerdictRecord, VerdictSummary

RUN_ID = "20261202T010203Z-beef"


def _full() -> DeployRecord:
    """A record with every part a completed multi-fact deploy writes."""
    return DeployRecord(
        run_id=RUN_ID, status=DeployStatus.COMPLETE, board="host_22", build="../../../build/m-rk3588",
        fingerprint="ab" * 32, platform="rk3588", job_env={"RKDET_PIN_STRICT": "0"},
        settings=PublishedSettings(repeats=3, warmup=1, core_mask="0,0_1_2", backend="rknnlite", cpu_affinity=(4, 5),
                                   pin=True, pin_env={"RKDET_NPU_FREQ": "max"}, tolerances={"max_abs": 0.0},
                                   fault_injected=False, emulated_npu_lsb_k=None),
        tolerances={"max_abs": 0.0, "min_cosine": None}, emulated=True, warnings=("cpu: governor kept",),
        transfer=TransferRecord(bytes_sent=10, files_sent=2, files_skipped=1, method="sftp", seconds=0.25),
        job_pid=4242, board_lock=BoardLockRecord(method="flock", waited_s=0.0, took_over_stale=False),
        job_exit=0, restored=True, pulled=PulledRecord(bytes=99, files=4), verdict="SAME (bitwise)", diff_exit=0,
        reference="../../../build/m-rk3588/golden", repeatable=VerdictSummary(ok=True, cells=("core-0",)),
        agrees=VerdictSummary(ok=True), stack={"kernel": "5.10.160", "librknnrt": None},
        cells=CellsRecord(cells=(CellVerdict(cell="core-0", core_mask="0", status="complete", reason=None,
                                             verdict="SAME (bitwise)", repeatable=_verdict(True), agrees=_verdict(False),
                                             same_as_first=None),),
                          first="core-0", repeatable=True, agrees=False),
        contexts=ContextsRecord(contexts=2, agree=True),
        session=SessionRecord(id="20261202T010203Z-cafe", runs=(RUN_ID, "20261202T010203Z-f00d"),
                              backends=("rknnlite", "rknn_c"), index=0, pinned=True))


def _verdict(ok: bool) -> VerdictRecord:
    return VerdictRecord(ok=ok, reference="simulator", tolerance="max_lsb=1", outputs_differing=1,
                         outputs_outside=0 if ok else 1, decisions_changed=None, decisions_judged=False, max_abs=0.5,
                         max_ulp=3, max_lsb=1.0, min_cosine=0.999, reason="" if ok else "input p output x outside",
                         caveat=None)


def test_round_trip_through_the_one_writer_and_reader(tmp_path: Path) -> None:
    record = _full()
    path = tmp_path / "deploy.json"
    write_deploy_record(path, record)
    assert read_deploy_record(path) == record
    on_disk = json.loads(path.read_text())
    assert on_disk == record.to_json() and on_disk["status"] == "complete" and on_disk["transfer"]["seconds"] == 0.25
    assert on_disk["settings"]["cpu_affinity"] == [4, 5] and on_disk["warnings"] == ["cpu: governor kept"]


def test_facts_not_recorded_yet_are_absent_and_a_step_writes_its_facts_together() -> None:
    new = DeployRecord(run_id=RUN_ID, fingerprint="ab" * 32).advanced(DeployStatus.PREFLIGHT)
    assert new.to_json() == {"run_id": RUN_ID, "schema": "rkdet.deploy/2", "status": "preflight",
                             "fingerprint": "ab" * 32}
    # the pull writes job_exit/restored with it (null when unknown), the judge its facts (null included)
    pulled = new.with_facts(pulled=PulledRecord(bytes=1, files=1)).to_json()
    assert pulled["job_exit"] is None and pulled["restored"] is None and "verdict" not in pulled
    judged = new.with_facts(verdict="SAME", diff_exit=0).to_json()
    assert {k: judged[k] for k in ("reference", "agrees", "cells", "contexts", "stack")} == dict.fromkeys(
        ("reference", "agrees", "cells", "contexts", "stack"))
    assert "job_pid" not in judged and "error" not in judged


@pytest.mark.parametrize("change, field", [
    ({"job_pid": "4242"}, "'job_pid' is '4242', not an integer"),
    ({"status": "finished"}, "'status' is 'finished', not one of preflight"),
    ({"emulated": 1}, "'emulated' is 1, not true or false"),
    ({"warnings": ["ok", 3]}, "'warnings' is [\"ok\", 3], not a list of strings"),
    ({"transfer": {"bytes_sent": 1, "files_sent": 1, "files_skipped": 0, "method": "sftp", "seconds": "fast"}},
     "transfer: field 'seconds' is 'fast', not a number"),
    ({"settings": {"core_mask": 7}}, "settings: field 'core_mask' is 7, not text"),
    ({"job_env": {"RKDET_X": 1}}, "'job_env' is {\"RKDET_X\": 1}, not an object of strings"),
    ({"surprise": True}, "field 'surprise' is not one rkdet writes"),
    ({"run_id": None}, "field 'run_id' is null, not a run id"),
    ({"session": {"id": "s", "runs": ["a"], "backends": ["rknnlite"], "index": 3, "pinned": True}},
     "session: field 'index' is not a place in 'runs'"),
    ({"session": {"id": "s", "runs": "a", "backends": ["rknnlite"], "index": 0, "pinned": True}},
     "session: field 'runs' is 'a', not a list of run ids"),
    ({"session": {"id": "s", "runs": ["a", "b"], "backends": ["rknnlite"], "index": 0, "pinned": True}},
     "session: field 'index' is not a place in 'runs'"),
])
def test_the_reader_refuses_a_wrong_field_in_one_line_naming_file_and_field(tmp_path: Path, change: dict,
                                                                            field: str) -> None:
    path = tmp_path / "deploy.json"
    doc = {**_full().to_json(), **change}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as err:
        read_deploy_record(path)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: ")
    assert field in line


def test_the_reader_refuses_a_missing_field_an_oversize_file_and_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "deploy.json"
    path.write_text(json.dumps({"status": "complete"}))
    with pytest.raises(InputError, match=r"deploy.json: field 'run_id' is missing"):
        read_deploy_record(path)
    path.write_text(json.dumps({"run_id": RUN_ID, "warnings": ["x" * (MAX_RUN_RECORD + 10)]}))
    with pytest.raises(InputError, match=r"deploy.json: larger than 4 MiB"):
        read_deploy_record(path)
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match=r"deploy.json: expected a JSON object"):
        read_deploy_record(path)
    with pytest.raises(BoardError, match="'job_pid'"):  # a board's record: the caller's error class
        path.write_text(json.dumps({"run_id": RUN_ID, "job_pid": True}))
        read_deploy_record(path, error=BoardError)


def test_a_record_built_with_a_wrong_type_is_refused_too() -> None:
    with pytest.raises(InputError, match="field 'job_exit' is '0', not an integer"):
        DeployRecord(run_id=RUN_ID, job_exit="0")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        DeployRecord(run_id=RUN_ID).with_facts(no_such_fact=1)


ALL = [None, *DeployStatus]


@pytest.mark.parametrize("before", ALL, ids=lambda s: s.value if s else "new")
def test_the_status_machine_allows_exactly_its_moves(before: DeployStatus | None) -> None:
    record = DeployRecord(run_id=RUN_ID, status=before)
    for after in DeployStatus:
        if after in ALLOWED[before]:
            assert record.advanced(after).status is after
        else:
            with pytest.raises(TransitionError, match=f"-> {after.value} is not allowed"):
                record.advanced(after)
    with pytest.raises(TransitionError):
        record.with_facts(status=DeployStatus.COMPLETE)


def test_the_machine_is_the_deploy_flow_s() -> None:
    """The moves deploy makes: preflight, running, the pulled results (complete) and the judge failing
    afterwards; a connection lost and resumed twice; failed is final."""
    r = DeployRecord(run_id=RUN_ID)
    for step in (DeployStatus.PREFLIGHT, DeployStatus.RUNNING, DeployStatus.COMPLETE, DeployStatus.FAILED):
        r = r.advanced(step)
    d = DeployRecord(run_id=RUN_ID)
    for step in (DeployStatus.PREFLIGHT, DeployStatus.RUNNING, DeployStatus.DISCONNECTED, DeployStatus.DISCONNECTED,
                 DeployStatus.INTERRUPTED):
        d = d.advanced(step)
    assert ALLOWED[DeployStatus.FAILED] == frozenset()
    assert all(s in ALLOWED for s in DeployStatus)


def test_published_settings_are_run_settings_without_the_private_fields() -> None:
    run = {f.name for f in dataclasses.fields(RunSettings)}
    published = {f.name for f in dataclasses.fields(PublishedSettings)}
    assert published == (run - {"workdir", "state_dir", "fault", "inputs"}) | {"fault_injected", "emulated_npu_lsb_k"}


def test_deploy_state_publishes_without_names_and_keeps_resume_data_private(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = tmp_path / "results" / "host_22" / "abababababababab" / RUN_ID
    folder.mkdir(parents=True)
    build = tmp_path / "build" / "m-rk3588"
    state = DeployState(folder, "alice@host:22", "host_22", "alice")
    state.start(DeployRecord(run_id=RUN_ID, board="alice@host:22", build=str(build), fingerprint="ab" * 32,
                             remote={"workdir": "/home/alice/rk"}, job_env={"RKDET_WORK_DIR": "/home/alice/rk",
                                                                            "RKDET_PIN_STRICT": "0"},
                             run_settings={"repeats": 2}))
    state.advance(DeployStatus.PREFLIGHT)
    state.advance(DeployStatus.RUNNING, error=None, warnings=("alice@host:22 said hello in /home/alice/rk",))
    text = (folder / "deploy.json").read_text()
    assert "alice" not in text and read_deploy_record(folder / "deploy.json").board == "host_22"
    published = read_deploy_record(folder / "deploy.json")
    assert published.warnings == ("host_22 said hello in <workdir>",) and published.remote is None
    assert published.build == "../../../../build/m-rk3588" and published.job_env == {"RKDET_PIN_STRICT": "0"}
    private = private_record_path(RUN_ID)
    assert private.stat().st_mode & 0o777 == 0o600
    resumed = load_record(folder)  # what --resume reads: the published record with its private part
    assert (resumed.board, resumed.build, resumed.run_settings) == ("alice@host:22", str(build), {"repeats": 2})
    state.advance(DeployStatus.COMPLETE)
    assert not private.exists()


def _probe_records(tmp_path: Path) -> list[dict]:
    root = tmp_path / "tree"
    build_fake_tree(profile("rk3588"), root)
    code, records = run_script_locally("probe", root, tmp_path / "state")
    assert code == 0, records
    return records


def test_board_json_round_trips_and_its_reader_names_file_and_field(tmp_path: Path) -> None:
    report = parse_probe(_probe_records(tmp_path))
    path = tmp_path / "board.json"
    write_probe(path, report)
    again = read_probe(path)
    assert again == report and again.soc == "rk3588" and json.loads(path.read_text())["schema"] == "rkdet.board/1"
    path.write_text(json.dumps({"records": [{"record": "soc", "script": "probe", "soc": 7}]}))
    with pytest.raises(InputError, match=r"board.json: malformed probe record .*field 'soc' is '7', not a string"):
        read_probe(path)
    path.write_text(json.dumps({"records": {"soc": "rk3588"}}))
    with pytest.raises(InputError, match=r"board.json: records must be a list"):
        read_probe(path)
    path.write_bytes(b" " * (MAX_RUN_RECORD + 1))
    with pytest.raises(BoardError, match=r"board.json: larger than 4 MiB"):
        read_probe(path, error=BoardError)


def test_cells_json_round_trips_and_a_crafted_cell_is_refused(tmp_path: Path) -> None:
    cells = [Cell("core-0", "0", "complete", None, 0),
             Cell("core-0_1_2", "0_1_2", "skipped", "the SoC has 1 NPU core(s)", None)]
    write_cells(tmp_path, cells, agree=None)
    assert read_cells(tmp_path) == cells
    assert json.loads((tmp_path / "cells.json").read_text())["schema"] == "rkdet.cells/1"
    assert read_cells(tmp_path / "nowhere") is None  # a single result set
    (tmp_path / "cells.json").write_text(json.dumps({"cells": [{"cell": "../../etc", "core_mask": "0"}]}))
    with pytest.raises(BoardError, match="unexpected cell '../../etc'"):
        read_cells(tmp_path)
    (tmp_path / "cells.json").write_text(json.dumps({"cells": "all"}))
    with pytest.raises(InputError, match=r"cells.json: field 'cells' is not a list"):
        read_cells(tmp_path, error=InputError)
    (tmp_path / "cells.json").write_bytes(b" " * (MAX_RUN_RECORD + 1))
    with pytest.raises(BoardError, match="larger than 4 MiB"):
        read_cells(tmp_path)
