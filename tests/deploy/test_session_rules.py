"""The rules of one pinned session for several runs (rkdet.deploy.session) that need no board: the one job's
command line (run-pinned.sh around run-steps.sh, each runner its count of words, unpinned: run-steps alone),
each run's board folders under the session's, the settings the steps must share and the one environment."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from rkdet.boardinfo.scripts import script_path
from rkdet.deploy.layout import RemoteLayout
from rkdet.deploy.pinned_run import output_to, runner_argv, steps_argv
from rkdet.deploy.session import SHARED_SETTINGS, check_shared, merged_env
from rkdet.deploy.settings import RunSettings
from rkdet.errors import InputError

FP = "ab" * 32


def test_the_session_job_is_one_run_pinned_around_every_runner() -> None:
    layouts = [RemoteLayout.for_run("/w", FP, run, name).in_session("S-1", run)
               for run, name in (("r-a", "rknnlite"), ("r-b", "rknn_c"))]
    assert layouts[0].pidfile == layouts[1].pidfile == "/w/runs/S-1/job.pid"
    assert layouts[0].logfile == layouts[1].logfile == "/w/runs/S-1/job.log"
    assert (layouts[0].result, layouts[1].result) == ("/w/runs/S-1/r-a/result", "/w/runs/S-1/r-b/result")
    assert layouts[0].session_dir == "/w/runs/S-1"
    runners = [runner_argv(x, RunSettings(backend=n, pin=False)) for x, n in zip(layouts, ("rknnlite", "rknn_c"))]
    for x, runner in zip(layouts, runners):  # each runner's output to its own file, never the session's job.log
        assert x.runner_log == f"{x.run_dir}/runner.log" and runner[:5] == output_to(x.runner_log, [])
    argv = steps_argv("/w/scripts", True, runners)
    assert argv[:5] == ["sh", "/w/scripts/run-pinned.sh", "--", "sh", "/w/scripts/run-steps.sh"]
    assert argv.count("/w/scripts/run-pinned.sh") == 1  # one pin, one restore
    assert argv[5] == str(len(runners[0])) and argv[6:6 + len(runners[0])] == runners[0]
    rest = argv[6 + len(runners[0]):]
    assert rest == [str(len(runners[1])), *runners[1]]
    assert steps_argv("/w/scripts", False, runners)[:2] == ["sh", "/w/scripts/run-steps.sh"]  # --no-pin


def test_run_steps_runs_exactly_the_words_it_was_given(tmp_path) -> None:
    """Arguments with spaces, quotes, `--`, digits and an empty one pass through run-steps.sh untouched (no
    eval, no word splitting), each step exactly its own words."""
    odd = ["printf", "%s|", "a b", "--", "'$(touch X)'", "3", ""]
    argv = steps_argv("/unused", False, [odd, ["printf", "%s|", "second"]])
    argv[1] = str(script_path("run-steps"))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "a b|--|'$(touch X)'|3||" in done.stdout and "second|" in done.stdout
    assert not (tmp_path / "X").exists()


def test_steps_share_the_job_s_settings_and_environment() -> None:
    lite, c_api = RunSettings(backend="rknnlite"), RunSettings(backend="rknn_c", runner_settings={"want_float": "0"})
    check_shared([lite, c_api])  # backend, runner settings, core mask, timeout: each step's own
    for name in SHARED_SETTINGS:
        value = {"pin": False, "pin_env": {"RKDET_NPU_FREQ": "max"}, "sudo": True, "workdir": "/x",
                 "state_dir": "/s", "lock_timeout": 9, "fault": "{}", "keep": True}[name]
        with pytest.raises(InputError, match=f"under one {name}; they differ"):
            check_shared([lite, replace(c_api, **{name: value})])
    assert merged_env([("rknnlite", {"A": "1", "B": "2"}), ("rknn_c", {"A": "1", "C": "3"})]) == \
        {"A": "1", "B": "2", "C": "3"}
    with pytest.raises(InputError, match="rknnlite and rknn_c need different A on the board"):
        merged_env([("rknnlite", {"A": "1"}), ("rknn_c", {"A": "2"})])


def test_resume_refuses_a_session_s_step_and_names_the_rerun(tmp_path) -> None:
    """--resume's check on the picked run folder (no board): a plain run passes, a step of a two-backend session is
    one line naming the folder, its step and backend, the session and `--backends A,B`; a fleet board's session of
    one step names `--backend A`; a folder without deploy.json is one line naming it."""
    from rkdet.deploy.deploy_state import refuse_session_step
    from rkdet.records.deploy_record import DeployRecord, SessionRecord, write_deploy_record

    run = "20261206T010203Z-cafe"
    plain = DeployRecord(run_id=run, fingerprint=FP)
    refuse_session_step(tmp_path, plain)  # a plain run: resumed as before
    pair = SessionRecord(id="20261206T010202Z-beef", runs=("20261206T010202Z-0a0a", run),
                         backends=("rknnlite", "rknn_c"), index=1, pinned=True)
    write_deploy_record(tmp_path / "deploy.json", replace(plain, session=pair))
    with pytest.raises(InputError) as err:
        refuse_session_step(tmp_path)  # read from the folder's deploy.json
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{tmp_path}: run {run} is step 2 of 2 (rknn_c) of pinned session "
                                                "20261206T010202Z-beef")
    assert "rerun `rkdet deploy --backends rknnlite,rknn_c`" in line
    one = SessionRecord(id="S-1", runs=(run,), backends=("rknn_c",), index=0, pinned=True)
    with pytest.raises(InputError, match=r"step 1 of 1 .*rerun `rkdet deploy --backend rknn_c`"):
        refuse_session_step(tmp_path, replace(plain, session=one))
    with pytest.raises(InputError, match="deploy.json: missing"):
        refuse_session_step(tmp_path / "nowhere")
