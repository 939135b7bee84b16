"""The C audit library (rkdet/onboard/c/rkdet_audit.c) writes the log the Python library writes.

The shipped example app (docs/examples/audit_serving_app.c, an emulated runtime: a tiny float32 MLP in C,
a test double named as such) is built with gcc and serves a few thousand inferences; `rkdet audit verify`
reads its log unchanged: intact, canonical lines, hashes equal to THE output hash; a chain the Python
library continues (and the other way round) stays intact; an edited record, a removed file and a planted
canary failure are found and named; a full disk (RLIMIT_FSIZE, a real kernel refusal) never stops the
serving. The aarch64 cross build runs under qemu-user.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from rkdet.audit.verify import (CANARY_FAILED, EDITED, FILE_REMOVED, NOTE_LOST_WRITES, NOTE_TORN_TAIL,
                                NOTE_TRUNCATED_START, SHADOW_DISAGREED, verify)
from rkdet.cli import main
from rkdet.onboard.audit import AuditSettings, RKNNLite
from rkdet.onboard.audit_chain import audit_files
from rkdet.onboard.audit_prom import PROM_FILE
from rkdet.onboard.hashing import output_hash

from audit_app import APP_MODULE, BUILD, REPO

C_DIR = REPO / "rkdet" / "onboard" / "c"
C_APP = REPO / "docs" / "examples" / "audit_serving_app.c"
SOURCES = [str(C_APP), str(C_DIR / "rkdet_audit.c")]
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", f"-I{C_DIR}"]


def _compiler(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not installed; run .ci/setup")
    return path


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("c-app") / "audit_serving_app"
    done = subprocess.run([_compiler("gcc"), *CFLAGS, *SOURCES, "-lm", "-o", str(out)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


def run_app(app: Path | list[str], log: Path, *args: str, limit_bytes: int | None = None, sha256: str = "") -> str:
    def full_disk():  # a real refusal from the kernel: writes past the limit fail (EFBIG), SIGXFSZ ignored
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    cmd = [*(app if isinstance(app, list) else [str(app)]), "--log", str(log), "--build", BUILD, *args]
    env = dict(os.environ, RKDET_SHA256=sha256)  # "portable": the portable code even where the CPU has sha256
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env,
                          preexec_fn=full_disk if limit_bytes else None)
    assert done.returncode == 0, done.stderr
    return done.stdout


def kinds(result) -> list[str]:
    return [f.kind for f in result.findings if f.failed]


def lines(log: Path) -> list[bytes]:
    return [ln for _, name in audit_files(str(log)) for ln in (log / name).read_bytes().split(b"\n")[:-1]]


@pytest.fixture(scope="module")
def served(app, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("c-served")
    out = run_app(app, root / "log", "--prom", str(root / "prom"), "--count", "3000", "--max-file-bytes", "300000",
                  "--canary-every", "500")
    assert "served 3000 inferences (emulated-c); canary failures 0; audit records lost 0" in out
    return root / "log", root / "prom"


def test_c_log_is_intact_canonical_and_read_by_rkdet_audit_verify(served):
    log, prom = served
    assert len(audit_files(str(log))) >= 3  # rotated
    result = verify(log, {BUILD})
    assert not result.failed, result.findings
    assert result.counts == {"open": len(audit_files(str(log))), "start": 1, "canary": 7, "inference": 3000, "stop": 1}
    for line in lines(log):  # the very bytes the Python library would write for these records
        record = json.loads(line)
        assert json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode() == line
    out = CliRunner().invoke(main, ["audit", "verify", str(log), "--fingerprint", BUILD])
    assert out.exit_code == 0 and "chain intact, seq 0..3012" in out.output, out.output
    text = (prom / PROM_FILE).read_text()
    assert f'rkdet_audit_inferences_total{{build="{BUILD[:16]}"}} 3000' in text
    assert f'rkdet_audit_canary_runs_total{{build="{BUILD[:16]}"}} 7' in text


def assert_hashes_are_the_output_hash(app: Path | list[str], log: Path, sha256: str) -> str:
    """The bench mode's record: a uint8 input and a float32 output of known bytes, hashed by the C code."""
    import hashlib

    import numpy as np

    n = 100_001  # not a multiple of sha256's 64-byte block
    out = run_app(app, log, "--bench-bytes", str(n), sha256=sha256)
    assert out.startswith(f"bench bytes={n} ")
    record = [json.loads(x) for x in lines(log) if b'"kind":"inference"' in x][0]
    x = (np.arange(n) % 256).astype(np.uint8).reshape(1, 1, 1, n)
    y = np.arange(n // 4, dtype=np.float32).reshape(1, n // 4)
    assert record["outputs"] == [output_hash(y)]
    assert record["input"] == hashlib.sha256(output_hash(x).encode()).hexdigest()
    assert verify(log, {BUILD}).failed is False  # and every record hash (the line's sha256) links
    return out.split("sha256=")[1].strip()


def test_c_textfile_passes_promtool_check_metrics(served):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not installed; run .ci/setup (Debian package prometheus)")
    text = (served[1] / PROM_FILE).read_text()
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr
    assert text.count("# TYPE ") == 8  # the counters the Python textfile has (audit_prom.COUNTERS)


@pytest.mark.parametrize("sha256", ["", "portable"])
def test_c_hashes_are_the_output_hash(app, tmp_path, sha256):
    used = assert_hashes_are_the_output_hash(app, tmp_path / "log", sha256)
    assert used == (sha256 or used) and used in ("portable", "x86-sha-ni", "armv8-sha2")


def test_recorder_thread_writes_the_same_records_and_a_full_queue_is_declared(app, served, tmp_path):
    def inferences(log: Path) -> list[tuple[str, list[str]]]:
        return [(r["input"], r["outputs"]) for r in map(json.loads, lines(log)) if r["kind"] == "inference"]

    log = tmp_path / "log"
    out = run_app(app, log, "--count", "3000", "--max-file-bytes", "300000", "--canary-every", "500",
                  "--background", "4096")
    assert "audit records lost 0" in out
    result = verify(log, {BUILD})
    assert not result.failed and result.counts["inference"] == 3000, result.findings
    assert inferences(log) == inferences(served[0])  # what the calling thread wrote, in the same order
    small = tmp_path / "small"
    out = run_app(app, small, "--count", "20000", "--background", "1")  # the tiny model outruns the recorder
    assert "served 20000 inferences" in out and int(out.split("audit records lost ")[1]) > 0
    result = verify(small, {BUILD})
    assert not result.failed and NOTE_LOST_WRITES in [f.kind for f in result.findings]


def test_shadow_disagreements_are_found_and_periods_recorded(app, tmp_path):
    same = tmp_path / "same"
    run_app(app, same, "--count", "1000", "--shadow", "0", "--prom", str(tmp_path / "prom"))
    result = verify(same, {BUILD})
    assert not result.failed and result.counts["shadow"] == 2, result.findings
    periods = [r for r in map(json.loads, lines(same)) if r["kind"] == "shadow"]
    assert all(p["samples"] == 50 and p["agreement"] == 1.0 and p["errors"][0]["max"] == 0.0 for p in periods)
    assert f'rkdet_audit_shadow_samples_total{{build="{BUILD[:16]}"}} 100' in (tmp_path / "prom" / PROM_FILE).read_text()
    moved = tmp_path / "moved"
    run_app(app, moved, "--count", "1000", "--shadow", "0.5")
    result = verify(moved, {BUILD})
    found = [f for f in result.findings if f.kind == SHADOW_DISAGREED]
    assert found and kinds(result) == [SHADOW_DISAGREED] * len(found)
    assert "the candidate decided [" in found[0].message
    periods = [r for r in map(json.loads, lines(moved)) if r["kind"] == "shadow"]
    assert sum(p["disagreements"] for p in periods) == result.counts["shadow_disagreement"] == len(found)
    assert all(0 < p["errors"][0]["p50"] <= p["errors"][0]["p99"] <= p["errors"][0]["max"] for p in periods)


def test_python_and_c_continue_each_others_chain(app, tmp_path):
    import numpy as np

    log = tmp_path / "log"
    run_app(app, log, "--count", "300")
    lite = RKNNLite(audit=AuditSettings(str(log), build=BUILD, background=False),
                    runtime=APP_MODULE.EmulatedTinyRuntime())
    lite.init_runtime()
    for _ in range(300):
        lite.inference(inputs=[np.ones((1, 8), np.float32)])
    lite.release()
    run_app(app, log, "--count", "300")
    result = verify(log, {BUILD})
    assert not result.failed, result.findings
    assert result.counts["inference"] == 900 and result.counts["start"] == 3


def test_edited_record_and_removed_file_are_found(served, tmp_path):
    log, _ = served
    edited = tmp_path / "edited"
    shutil.copytree(log, edited)
    path = edited / "audit-00000001.jsonl"
    body = path.read_bytes().split(b"\n")
    body[10] = body[10].replace(b'"latency_us":', b'"latency_us":1')
    path.write_bytes(b"\n".join(body))
    result = verify(edited, {BUILD})
    assert kinds(result) == [EDITED] and result.findings[0].where == "audit-00000001.jsonl:11"
    removed = tmp_path / "removed"
    shutil.copytree(log, removed)
    (removed / "audit-00000001.jsonl").unlink()
    result = verify(removed, {BUILD})
    assert FILE_REMOVED in kinds(result)
    assert any("audit-00000001.jsonl removed" in f.message for f in result.findings)


def test_planted_canary_failure_is_found_and_counted(app, tmp_path):
    out = run_app(app, tmp_path / "log", "--prom", str(tmp_path / "prom"), "--count", "1200", "--canary-every",
                  "500", "--drift-after", "800")
    assert "canary failures 1;" in out
    result = verify(tmp_path / "log", {BUILD})
    failures = [f for f in result.findings if f.kind == CANARY_FAILED]
    assert kinds(result) == [CANARY_FAILED]
    assert "golden 0 output 0 element 0" in failures[0].message
    assert f'rkdet_audit_canary_failures_total{{build="{BUILD[:16]}"}} 1' in (tmp_path / "prom" / PROM_FILE).read_text()


def test_full_disk_never_stops_serving_and_leaves_no_torn_line(app, tmp_path):
    log = tmp_path / "log"
    out = run_app(app, log, "--prom", str(tmp_path / "prom"), "--count", "3000", limit_bytes=150_000)
    served, lost = out.split("served ")[1].split(" ")[0], out.split("audit records lost ")[1].strip()
    assert served == "3000" and int(lost) > 1000
    assert all(os.path.getsize(log / name) <= 150_000 for _, name in audit_files(str(log)))
    assert 'rkdet_audit_log_write_failures_total{build="bbbbbbbbbbbbbbbb"} ' + lost in \
        (tmp_path / "prom" / PROM_FILE).read_text()
    run_app(app, log, "--count", "100")  # room again: the next start continues the chain
    result = verify(log, {BUILD})
    assert not result.failed and NOTE_TORN_TAIL not in [f.kind for f in result.findings], result.findings


def test_torn_tail_is_declared_and_retention_keeps_max_files(app, tmp_path):
    log = tmp_path / "log"
    run_app(app, log, "--count", "50")
    with open(log / audit_files(str(log))[-1][1], "ab") as handle:
        handle.write(b'{"kind":"inference","se')  # a power cut in the middle of a write
    run_app(app, log, "--count", "50")
    result = verify(log, {BUILD})
    assert not result.failed and NOTE_TORN_TAIL in [f.kind for f in result.findings], result.findings
    opened = json.loads(log.joinpath(audit_files(str(log))[-1][1]).read_bytes().split(b"\n")[0])
    assert opened["torn_tail"] == {"file": "audit-00000000.jsonl", "bytes": 23}
    kept = tmp_path / "kept"
    run_app(app, kept, "--count", "4000", "--max-file-bytes", "262144", "--max-files", "3")
    indices = [index for index, _ in audit_files(str(kept))]
    assert len(indices) == 3 and indices[0] >= 2 and indices == list(range(indices[0], indices[0] + 3))  # retention
    result = verify(kept, {BUILD})
    assert not result.failed and NOTE_TRUNCATED_START in [f.kind for f in result.findings]


def test_aarch64_cross_build_under_qemu_writes_a_verifiable_chain(tmp_path):
    exe = tmp_path / "audit_serving_app.aarch64"
    done = subprocess.run([_compiler("aarch64-linux-gnu-gcc"), *CFLAGS, *SOURCES, "-lm", "-o", str(exe)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    qemu = [_compiler("qemu-aarch64"), "-L", "/usr/aarch64-linux-gnu", str(exe)]
    out = run_app(qemu, tmp_path / "log", "--count", "1000", "--canary-every", "250")
    assert "served 1000 inferences" in out
    result = verify(tmp_path / "log", {BUILD})
    assert not result.failed and result.counts["inference"] == 1000 and result.counts["canary"] == 5
    # qemu's default CPU has the ARMv8 SHA2 instructions: both sha256 codes give THE output hash
    assert assert_hashes_are_the_output_hash(qemu, tmp_path / "accel", "") == "armv8-sha2"
    assert assert_hashes_are_the_output_hash(qemu, tmp_path / "portable", "portable") == "portable"


def test_api_edges_refuse_with_one_line_and_never_crash(tmp_path):
    exe = tmp_path / "api_edges"
    done = subprocess.run([_compiler("gcc"), *CFLAGS, str(Path(__file__).parent / "c" / "api_edges.c"),
                           str(C_DIR / "rkdet_audit.c"), "-lm", "-o", str(exe)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    (tmp_path / "a-file").write_text("")
    done = subprocess.run([str(exe), str(tmp_path / "log"), str(tmp_path / "a-file"), BUILD], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    got = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert got["file_as_folder"].endswith("a-file: not a folder (a symlink or file); name a folder for the log")
    assert got["bad_build"] == "rkdet audit: settings.build must be the build fingerprint, 64 lowercase hex"
    assert [got[k] for k in ("null_dtype", "null_data", "null_shape", "null_list", "canary_null")] == ["-1"] * 5
    assert got["good"] == "0" and got["canary_baseline"] == "1" and got["canary_other_count"] == "0"
    assert got["write_failures"] == "5" and got["inferences"] == "1"
    result = verify(tmp_path / "log", {BUILD})
    assert kinds(result) == [CANARY_FAILED, SHADOW_DISAGREED]  # another count of golden outputs; the shadow below
    assert NOTE_LOST_WRITES in [f.kind for f in result.findings]  # the refused calls, declared
    assert not (tmp_path / "a-file").read_text()
    assert [got[k] for k in ("shadow_disagrees", "shadow_same", "shadow_agrees")] == ["0", "1", "1"]
    import numpy as np

    period = [r for r in map(json.loads, lines(tmp_path / "log")) if r["kind"] == "shadow"]
    errors = np.abs(np.array([0.5, 2.0, -1.0, 0.25, 0.5, 2.0, -1.0, 0.25, 1, 2, 3, 4])
                    - np.array([0.5, 1.0, 3.0, 0.0, 0.5, 2.0, -1.0, 0.25, 1, 2, 3, 5]))
    assert period == [dict(period[0], samples=3, disagreements=1, agreement=1 - 1 / 3, candidate="f" * 64, errors=[
        {"output": 0, "p50": float(np.percentile(errors, 50)), "p99": float(np.percentile(errors, 99)),
         "max": float(errors.max())}])]  # numpy's definitions, the Python library's


@pytest.mark.slow  # two ASan builds and a sanitized run: ~5 s on 2 busy cores
def test_address_and_undefined_behaviour_sanitizers_find_nothing(tmp_path):
    """Every path the tests above take (rotation, retention, the recorder thread, a full queue, canary failures,
    shadow statistics, the API edges), once more under ASan and UBSan, any report fatal."""
    flags = [*CFLAGS, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    exes = {}
    for name, main_c in (("app", str(C_APP)), ("edges", str(Path(__file__).parent / "c" / "api_edges.c"))):
        exes[name] = tmp_path / name
        done = subprocess.run([_compiler("gcc"), *flags, main_c, str(C_DIR / "rkdet_audit.c"), "-lm", "-o",
                               str(exes[name])], capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
    out = run_app(exes["app"], tmp_path / "log", "--count", "3000", "--shadow", "0.3", "--background", "16",
                  "--drift-after", "1000", "--max-files", "2", "--max-file-bytes", "262144", "--prom",
                  str(tmp_path / "prom"))
    assert "served 3000 inferences" in out
    (tmp_path / "a-file").write_text("")
    done = subprocess.run([str(exes["edges"]), str(tmp_path / "edges-log"), str(tmp_path / "a-file"), BUILD],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ERROR: AddressSanitizer" not in done.stderr, done.stderr
    assert "runtime error" not in done.stderr
