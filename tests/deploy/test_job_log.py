"""A job's log on a real (emulated) board, read by THE one reader (`collect.read_job_log`): its records and a
session's step exit statuses from one read, each step's slice from the same read."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rkdet.deploy import collect, pinned_run, stage
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.link import jobs
from rkdet.link.ssh import BoardConnection, Limits

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def conn(board: EmulatedBoard) -> Iterator[BoardConnection]:
    with board.connect() as c:
        yield c


def _session_job(conn: BoardConnection, name: str, steps: list[list[str]]) -> tuple[str, int | None]:
    """`steps` run by run-steps.sh as one unpinned job (a session's shape) in a folder of its own (with a folder
    `s<I>` for each step's own files); the job's log path and exit status."""
    wd = conn.default_workdir()
    stage.push_scripts(conn, f"{wd}/scripts")
    folder = f"{wd}/runs/{name}"
    conn.run(["mkdir", "-p", folder, *[f"{folder}/s{i}" for i in range(len(steps))]])
    job = jobs.start(conn, pinned_run.steps_argv(f"{wd}/scripts", False, steps), f"{folder}/job.pid",
                     f"{folder}/job.log")
    return f"{folder}/job.log", jobs.wait(conn, job, 60)


def test_one_read_gives_every_step_s_exit_status_records_and_slice(conn: BoardConnection) -> None:
    logfile, rc = _session_job(conn, "one-reader", [["sh", "-c", "echo step-zero-said; exit 3"],
                                                    ["sh", "-c", "echo step-one-said"]])
    assert rc == 3  # the worst step's status
    job_log = collect.read_job_log(conn, logfile)
    assert job_log.steps == {0: 3, 1: 0}
    assert [(r["index"], r["at"]) for r in job_log.records if r.get("record") == "clocks"] == \
        [(0, "before"), (0, "after"), (1, "before"), (1, "after")]
    first, second = job_log.for_step(0), job_log.for_step(1)
    assert "step-zero-said" in first.text and "step-one-said" not in first.text
    assert "step-one-said" in second.text and "step-zero-said" not in second.text
    # a step's slice keeps its own step records and every record outside the steps, never another step's
    assert {r["index"] for r in first.records if r.get("record") == "step"} == {0}
    assert any(r.get("record") == "result" and r.get("script") == "run-steps" for r in first.records)
    whole = job_log.for_step(None)  # a job of one runner: the whole log
    assert (whole.text, whole.records) == (job_log.text, job_log.records)


def test_the_deploy_flow_reads_a_job_s_log_in_one_place_only() -> None:
    """A second reader (a session's step exits beside the records) was the bug: one `tail` of a job log,
    in collect.read_job_log, and the session, the flow and --resume take what they need from it."""
    readers = [(p.relative_to(ROOT), n) for p in sorted((ROOT / "rkdet").rglob("*.py"))
               for n, line in enumerate(p.read_text().splitlines(), 1)
               if re.search(r'"tail",\s*"-c"', line) or "step_exits(" in line]
    assert {str(p) for p, _ in readers} == {"rkdet/boardinfo/scripts.py", "rkdet/deploy/collect.py"}, readers


CAP = 16 << 10  # the connection's cap on one read (Limits.output_bytes), small so a step can print past it
CHATTY = ["sh", "-c", "echo first-words; yes chatty-runner-line | head -c 200000; echo; echo last-words"]


def test_a_step_printing_past_the_cap_loses_no_record(board: EmulatedBoard) -> None:
    """Step 0 prints 12 times the cap: every step's start and exit and every clocks record still reach the host,
    because a runner writes to its own file (pinned_run.output_to, as a session's steps do), never the job's
    log; its own output comes back capped from its end, in its place in the step's log."""
    with board.connect(limits=Limits(output_bytes=CAP)) as small:
        wd = small.default_workdir()
        outputs = {i: f"{wd}/runs/chatty/s{i}/runner.log" for i in (0, 1)}
        logfile, rc = _session_job(small, "chatty", [pinned_run.output_to(outputs[0], CHATTY),
                                                     pinned_run.output_to(outputs[1], ["sh", "-c", "exit 3"])])
        assert rc == 3
        job_log = collect.read_job_log(small, logfile, outputs)
        # what the same step printing into the job's log (as every runner did) costs: its start and first clocks
        old_log, _ = _session_job(small, "chatty-old", [CHATTY, ["sh", "-c", "exit 3"]])
        lost = collect.read_job_log(small, old_log)
    assert job_log.steps == {0: 0, 1: 3}
    assert [(r["index"], r["status"]) for r in job_log.records if r.get("record") == "step"] == \
        [(0, "started"), (0, "exited"), (1, "started"), (1, "exited")]
    assert [(r["index"], r["at"]) for r in job_log.records if r.get("record") == "clocks"] == \
        [(0, "before"), (0, "after"), (1, "before"), (1, "after")]
    assert any(r.get("record") == "result" and r.get("script") == "run-steps" for r in job_log.records)
    mine = job_log.for_step(0)
    said = mine.text.splitlines()
    started = next(n for n, line in enumerate(said) if '"status":"started"' in line)
    assert said[started + 1] and "chatty-runner-line".endswith(said[started + 1])  # the output, where it ran
    assert "last-words" in mine.text and "first-words" not in mine.text  # the output's end, capped
    assert len(job_log.outputs[0]) <= CAP and mine.records == job_log.for_step(0).records
    assert "chatty" not in job_log.for_step(1).text
    assert (0, "started") not in [(r["index"], r["status"]) for r in lost.records if r.get("record") == "step"]
