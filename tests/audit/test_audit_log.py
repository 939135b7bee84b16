"""The serving audit end to end: the shipped example app (docs/examples/audit_serving_app.py) serves a
few thousand inferences of a tiny numpy model (its emulated runtime, named as such) through the audited
RKNNLite; `rkdet audit verify/report` then finds the chain intact, and each planted fault is found and
named: a canary failure, an edited record, a removed file, a shadow disagreement, lost or reordered
records, a chain rewritten past its anchor, a torn tail, and a kill -9 in the middle of serving."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rkdet.audit.chainlog import read_log
from rkdet.audit.spc import limits, western_electric
from rkdet.audit.verify import (ANCHOR_MISSING, CANARY_BASELINE, CANARY_FAILED, EDITED, FILE_REMOVED, LOST,
                                NOTE_LOST_WRITES, NOTE_TORN_TAIL, REORDERED, SHADOW_DISAGREED, TORN, UNKNOWN_BUILD,
                                verify)
from rkdet.cli import main
from rkdet.onboard.audit import AuditSettings, RKNNLite
from rkdet.onboard.audit_chain import GENESIS, AuditChain, audit_files, line_hash
from rkdet.onboard.audit_prom import PROM_FILE
from rkdet.onboard.audit_watch import Canary, Shadow

from audit_app import APP, APP_MODULE, BUILD, REPO

OTHER = "c" * 64


def serve(log: Path, count: int = 3000, *, prom: Path | None = None, runtime=None, shadow=None,
          canary_every: int = 500, max_file_bytes: int = 300_000, build: str = BUILD, background: bool = False,
          queue_size: int = 256) -> RKNNLite:
    import numpy as np

    rng = np.random.RandomState(1)
    golden = [[rng.standard_normal((1, 8)).astype(np.float32)] for _ in range(3)]
    settings = AuditSettings(str(log), prom_dir=str(prom) if prom else None, max_file_bytes=max_file_bytes,
                             canary=Canary(golden, every_n=canary_every), shadow=shadow, build=build,
                             background=background, queue_size=queue_size)
    lite = RKNNLite(audit=settings, runtime=runtime or APP_MODULE.EmulatedTinyRuntime())
    lite.load_rknn("unused.rknn")
    lite.init_runtime()
    for _ in range(count):
        lite.inference(inputs=[rng.standard_normal((1, 8)).astype(np.float32)])
    lite.release()
    return lite


def kinds(result) -> list[str]:
    return [f.kind for f in result.findings if f.failed]


def cli(*args: str):
    return CliRunner().invoke(main, ["audit", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("served")
    serve(root / "log", prom=root / "prom", shadow=Shadow(APP_MODULE.EmulatedTinyRuntime(), sample_every=10,
                                                          report_every=50, build=BUILD))
    return root / "log", root / "prom"


def copy_log(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for name in os.listdir(src):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def test_intact_chain_verifies_and_reports(served, tmp_path):
    log, prom = served
    assert len(audit_files(str(log))) >= 3  # rotated: the chain runs across files
    result = verify(log, {BUILD})
    assert not result.findings and result.counts["inference"] == 3000 and result.counts["canary"] == 7
    first = read_log(log)[0].lines[0]
    assert first.record["prev"] == GENESIS
    out = cli("verify", str(log), "--fingerprint", BUILD, "--anchor-file", str(tmp_path / "anchor"))
    assert out.exit_code == 0, out.output
    assert "chain intact" in out.output
    assert (tmp_path / "anchor").read_text().strip() == result.last_hash
    report = cli("report", str(log), "--fingerprint", BUILD, "--html", str(tmp_path / "r.html"))
    assert report.exit_code == 0, report.output
    page = (tmp_path / "r.html").read_text()
    assert "<svg" in page and "Latency, mean of 100 inferences" in page and "chain intact" in page
    metrics = (prom / PROM_FILE).read_text()
    assert f'rkdet_audit_inferences_total{{build="{BUILD[:16]}"}} 3000' in metrics
    assert f'rkdet_audit_canary_failures_total{{build="{BUILD[:16]}"}} 0' in metrics


def test_recorder_thread_writes_the_same_chain(tmp_path):
    shadow = Shadow(APP_MODULE.EmulatedTinyRuntime(perturb=0.3), sample_every=5, report_every=40, build=OTHER)
    lite = serve(tmp_path / "log", 2000, background=True, queue_size=4096, shadow=shadow)
    result = verify(tmp_path / "log", {BUILD, OTHER})
    assert kinds(result) and set(kinds(result)) == {SHADOW_DISAGREED}  # found from the recorder's thread too
    assert result.counts["inference"] == 2000 and lite.counters["rkdet_audit_inferences_total"] == 2000


def test_recorder_queue_full_drops_and_declares(tmp_path):
    lite = serve(tmp_path / "log", 2000, background=True, queue_size=1)
    result = verify(tmp_path / "log", {BUILD})
    lost = lite.counters.get("rkdet_audit_log_write_failures_total", 0)
    assert not result.failed and result.counts["inference"] + lost == 2000
    if lost:  # the tiny model outruns the recorder on most machines: every drop is declared in the chain
        declared = sum(int(f.message.split()[0]) for f in result.findings if f.kind == NOTE_LOST_WRITES)
        assert declared == lost


def test_unknown_build_is_named(served):
    result = verify(served[0], {OTHER})
    assert kinds(result) == [UNKNOWN_BUILD]
    assert cli("verify", str(served[0]), "--fingerprint", OTHER).exit_code == 1


def test_planted_canary_failure_is_found_with_its_first_differing_element(tmp_path):
    runtime = APP_MODULE.EmulatedTinyRuntime(drift_after=1200)
    lite = serve(tmp_path / "log", 2000, prom=tmp_path / "prom", runtime=runtime)
    assert lite.counters["rkdet_audit_canary_failures_total"] >= 1
    result = verify(tmp_path / "log", {BUILD})
    failures = [f for f in result.findings if f.kind == CANARY_FAILED]
    assert failures and "golden 0 output 0 element 0" in failures[0].message
    assert 'rkdet_audit_canary_failures_total{build="bbbbbbbbbbbbbbbb"} 2' in (tmp_path / "prom" / PROM_FILE).read_text()
    assert cli("verify", str(tmp_path / "log"), "--fingerprint", BUILD).exit_code == 1


def test_canary_callback_is_called_and_never_fails_the_inference(tmp_path):
    import numpy as np

    called = []

    def broken_callback(what, details):
        called.append((what, details))
        raise RuntimeError("the app's own bug")

    golden = [[np.ones((1, 8), np.float32)]]
    settings = AuditSettings(str(tmp_path / "log"), canary=Canary(golden, every_n=10), on_alarm=broken_callback,
                             build=BUILD)
    lite = RKNNLite(audit=settings, runtime=APP_MODULE.EmulatedTinyRuntime(drift_after=5))
    lite.init_runtime()
    outs = [lite.inference(inputs=[np.zeros((1, 8), np.float32)]) for _ in range(12)]
    lite.release()
    assert len(outs) == 12 and called and called[0][0] == "canary_failure"
    assert called[0][1]["index"] == 0 and called[0][1]["output"] == 0


def test_a_restart_with_another_baseline_is_found(tmp_path):
    serve(tmp_path / "log", 600)
    serve(tmp_path / "log", 600, runtime=APP_MODULE.EmulatedTinyRuntime(perturb=0.5))  # a silently other build
    result = verify(tmp_path / "log", {BUILD})
    assert CANARY_BASELINE in kinds(result)


def test_edited_record_is_found_and_named(served, tmp_path):
    log = copy_log(served[0], tmp_path / "log")
    path = log / "audit-00000001.jsonl"
    lines = path.read_bytes().split(b"\n")
    rec = json.loads(lines[10])
    rec["latency_us"] += 1
    lines[10] = json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()
    path.write_bytes(b"\n".join(lines))
    result = verify(log, {BUILD})
    assert kinds(result) == [EDITED]
    assert result.findings[0].where == "audit-00000001.jsonl:11" and f"seq {rec['seq']}" in result.findings[0].message


def test_removed_record_and_reordered_records_are_found(served, tmp_path):
    log = copy_log(served[0], tmp_path / "lost")
    path = log / "audit-00000001.jsonl"
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join(lines[:20] + lines[21:]))
    assert kinds(verify(log, {BUILD})) == [LOST]
    log = copy_log(served[0], tmp_path / "swapped")
    path = log / "audit-00000001.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[20], lines[21] = lines[21], lines[20]
    path.write_bytes(b"\n".join(lines))
    assert REORDERED in kinds(verify(log, {BUILD}))


def test_removed_file_is_found_and_named(served, tmp_path):
    log = copy_log(served[0], tmp_path / "log")
    (log / "audit-00000001.jsonl").unlink()
    result = verify(log, {BUILD})
    assert FILE_REMOVED in kinds(result)
    assert any("audit-00000001.jsonl removed" in f.message for f in result.findings)
    assert cli("verify", str(log), "--fingerprint", BUILD).exit_code == 1


def test_shadow_disagreement_is_found(tmp_path):
    shadow = Shadow(APP_MODULE.EmulatedTinyRuntime(perturb=0.3), sample_every=5, report_every=40, build=OTHER)
    lite = serve(tmp_path / "log", 1000, shadow=shadow)
    assert lite.counters["rkdet_audit_shadow_disagreements_total"] >= 1
    result = verify(tmp_path / "log", {BUILD, OTHER})
    assert SHADOW_DISAGREED in kinds(result)
    periods = [ln.record for af in read_log(tmp_path / "log") for ln in af.lines if ln.record["kind"] == "shadow"]
    assert periods and periods[0]["errors"][0]["max"] > 0 and periods[0]["samples"] == 40


def test_anchor_of_the_previous_pull_must_be_in_the_chain(tmp_path):
    serve(tmp_path / "log", 300)
    anchor = tmp_path / "anchor"
    assert cli("verify", str(tmp_path / "log"), "--fingerprint", BUILD, "--anchor-file", str(anchor)).exit_code == 0
    serve(tmp_path / "log", 300)  # the board serves on: the chain continues from the anchor
    assert cli("verify", str(tmp_path / "log"), "--fingerprint", BUILD, "--anchor-file", str(anchor)).exit_code == 0
    old = anchor.read_text()
    for _, name in audit_files(str(tmp_path / "log")):  # a board rewrites its whole chain afresh
        (tmp_path / "log" / name).unlink()
    serve(tmp_path / "log", 300)
    assert verify(tmp_path / "log", {BUILD}).findings == []  # alone, a rewritten chain looks intact ...
    result = verify(tmp_path / "log", {BUILD}, anchor=old.strip())
    assert kinds(result) == [ANCHOR_MISSING]  # ... the anchor is what catches it


def test_torn_tail_is_declared_by_the_next_start(tmp_path):
    serve(tmp_path / "log", 100)
    last = tmp_path / "log" / audit_files(str(tmp_path / "log"))[-1][1]
    with open(last, "ab") as handle:
        handle.write(b'{"kind":"inference","se')  # a power cut in the middle of a write
    serve(tmp_path / "log", 100)
    result = verify(tmp_path / "log", {BUILD})
    assert not result.failed and NOTE_TORN_TAIL in [f.kind for f in result.findings]
    with open(last, "ab") as handle:
        handle.write(b'q":9}')  # bytes appended afterwards: no longer what the start declared
    assert TORN in kinds(verify(tmp_path / "log", {BUILD}))


def test_full_disk_never_fails_the_inference_and_is_declared(tmp_path):
    chain = AuditChain(str(tmp_path / "log"))
    assert chain.append("note", {"n": 1})
    real = chain._fd
    chain._fd = os.open("/dev/full", os.O_WRONLY)  # a real device that answers every write with ENOSPC
    assert not chain.append("note", {"n": 2}) and not chain.append("note", {"n": 3})
    os.close(chain._fd)
    chain._fd = real
    assert chain.append("note", {"n": 4}) and chain.write_failures == 2
    chain.close()
    result = verify(tmp_path / "log", set())
    assert not result.failed and [f.kind for f in result.findings] == [NOTE_LOST_WRITES]


def test_kill_9_while_serving_leaves_a_verifiable_chain(tmp_path):
    log = tmp_path / "log"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, str(APP), "--log", str(log), "--emulated", "--count", "10000000",
                             "--build", BUILD], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            files = audit_files(str(log)) if log.is_dir() else []
            if files and sum(os.path.getsize(log / n) for _, n in files) > 200_000:
                break
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    serve(log, 50)  # the app starts again: a new file continues the chain
    result = verify(log, {BUILD})
    assert not result.failed, result.findings
    assert result.counts["inference"] > 100 and result.counts["open"] >= 2


def test_untrusted_folder_is_bounded(tmp_path):
    (tmp_path / "log").mkdir()
    os.symlink("/etc/passwd", tmp_path / "log" / "audit-00000000.jsonl")
    out = cli("verify", str(tmp_path / "log"), "--fingerprint", BUILD)
    assert out.exit_code == 2 and "not a regular file" in out.output
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "audit-00000000.jsonl").write_bytes(b"x" * 200_000)
    out = cli("verify", str(tmp_path / "big"), "--fingerprint", BUILD)
    assert out.exit_code == 2 and "line longer than" in out.output
    out = cli("verify", str(tmp_path / "log"))
    assert out.exit_code == 2 and "no approved build" in out.output


def test_garbage_line_is_named_not_a_traceback(served, tmp_path):
    log = copy_log(served[0], tmp_path / "log")
    path = log / "audit-00000002.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[5] = b"\x1b[31mnot json"
    path.write_bytes(b"\n".join(lines))
    out = cli("verify", str(log), "--fingerprint", BUILD)
    assert out.exit_code == 1 and "audit-00000002.jsonl:6" in out.output and "\x1b" not in out.output


def test_record_hash_is_the_line_bytes(served):
    af = read_log(served[0])[0]
    for a, b in zip(af.lines, af.lines[1:]):
        assert b.record["prev"] == a.hash
    raw = (served[0] / af.name).read_bytes().split(b"\n")[0]
    assert line_hash(raw) == af.lines[0].hash


def test_western_electric_rules():
    base = [0.0, 1.0] * 10
    lim = limits(base)
    assert [s.rule for s in western_electric(base + [20.0], lim)] == [1]
    assert {s.rule for s in western_electric(base + [0.9] * 8, lim)} == {4}
    assert western_electric(base, lim) == []


def test_a_flood_of_bad_records_is_counted_not_printed(served, tmp_path):
    log = copy_log(served[0], tmp_path / "log")
    path = log / "audit-00000001.jsonl"
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([b"{}"] * 500 + lines))
    out = cli("verify", str(log), "--fingerprint", BUILD)
    assert out.exit_code == 1
    assert out.output.count("FAIL unreadable-record") == 100 and "more findings not shown" in out.output
