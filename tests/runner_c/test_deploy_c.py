"""`rkdet deploy --backend rknn_c` end to end on an emulated RK3588: the real sshd board runs the cross-compiled
aarch64 rkdet-run-c under qemu-user (its launcher, invoked explicitly; no binfmt registration) over the
test-double librknnrt, whose numbers are the emulated board's own computation; the verdicts come from the C
runner's result set. A runner built against the header of another runtime, or against a header with another
struct size than the board's runtime expects, is refused before the push."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rkdet.backends.capi_build import build_runner
from rkdet.emulator.capi_runtime import build_double
from rkdet.emulator.socs import profile as soc_profile
from rkdet.emulator.socs import with_stack
from rkdet.emulator.sshd import EmulatedBoard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from shared_build import trim_golden  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "yolov8.yaml"
C_BACKEND = "rknn_c"  # the backend under test (its registry name)


@pytest.fixture(scope="module")
def two_page_build(default_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's default build with two golden pages (qemu runs are slow: few inferences)."""
    dest = tmp_path_factory.mktemp("c-build") / default_build.name
    shutil.copytree(default_build, dest)
    return trim_golden(dest, 2)


@pytest.fixture(scope="module")
def runner_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rkdet-run-c built by `rkdet runner build` against rkdet's test header (the SDK-shaped double folder)."""
    tmp = tmp_path_factory.mktemp("c-sdk")
    build_runner(build_double("aarch64", tmp / "sdk"), "aarch64", tmp / "cache")
    return tmp / "cache"


@pytest.fixture(scope="module")
def c_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedBoard]:
    with EmulatedBoard("rk3588", tmp_path_factory.mktemp("c-board")) as board:
        yield board


def _deploy(board: EmulatedBoard, build: Path, out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    args = ["deploy", "--board", board.target, "--user", board.user, "--identity", str(board.identity_file),
            "--known-hosts", str(board.known_hosts_file), "--ssh-config", "/dev/null", "--config", str(CONFIG),
            "--build", str(build), "--out", str(out), "--backend", C_BACKEND, "--core-mask", "0", *extra]
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=600, env={**os.environ, "RKDET_RUNNER_CACHE": str(cache)})


def _runs(out: Path) -> list[Path]:
    return sorted((p.parent for p in out.glob("*/*/*/deploy.json")), key=lambda p: p.name)


@pytest.mark.slow
def test_deploy_rknn_c_repeatable_and_agrees_from_the_c_runner(c_board, two_page_build, runner_cache, tmp_path):
    out = tmp_path / "results"
    done = _deploy(c_board, two_page_build, out, runner_cache, "--repeats", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "built against rknn_api.h sha256" in done.stderr and "of runtime 2.5.0" in done.stderr
    [folder] = _runs(out)
    run = json.loads((folder / "result" / "run.json").read_text())
    assert run["backend"] == C_BACKEND and run["emulated"] is True and run["stack"]["runner"] == "rkdet-run-c"
    assert run["model_check"]["by"] == "embedded-fingerprint"  # the custom string the double read from model.rknn
    assert run["backend_options"] == {"core_mask": "0", "input_fmt": "nhwc", "input_type": "uint8",
                                      "pass_through": 0, "want_float": 1}
    record = json.loads((folder / "deploy.json").read_text())
    assert record["status"] == "complete" and record["restored"] is True and record["job_exit"] == 0
    assert record["repeatable"] is not None and record["agrees"] is not None
    assert record["verdict"].startswith("SAME (bitwise)"), record["verdict"]
    report = json.loads((folder / "report.json").read_text())
    for entry in report["sets"]["A"]["inputs"]:  # every C output equals the reference bit for bit
        for output in entry["outputs"]:
            assert output["distinct"] == 1 and output["first_hash"] == output["reference_hash"]
    sent = record["transfer"]["files_sent"]
    import sqlite3
    with sqlite3.connect(out / "rkdet.db") as db:  # history records the run under its backend
        assert db.execute("SELECT backend, core_mask FROM runs").fetchall() == [(C_BACKEND, "0")]

    again = _deploy(c_board, two_page_build, out, runner_cache, "--repeats", "1")
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads((_runs(out)[-1] / "deploy.json").read_text())["transfer"]
    assert second["files_sent"] == 0 and second["files_skipped"] == sent  # the runner too: skip-unchanged


@pytest.mark.slow
def test_a_runner_of_another_runtime_header_is_refused_before_the_push(c_board, two_page_build, tmp_path):
    sdk = build_double("aarch64", tmp_path / "grown-sdk", grown_abi=True, version="2.6.0")
    build_runner(sdk, "aarch64", tmp_path / "cache")
    pushed = [p for p in c_board.home.rglob("rkdet-run-c")]
    for old in pushed:  # an earlier test's runner: gone, so that a push would show
        old.unlink()
    done = _deploy(c_board, two_page_build, tmp_path / "results", tmp_path / "cache", "--repeats", "1")
    assert done.returncode == 3, done.stderr[-3000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert len(lines) == 1 and "runtime 2.6.0" in lines[0] and "runs 2.5.0" in lines[0] and "ret=-5" in lines[0]
    assert "Traceback" not in done.stderr
    assert list(c_board.home.rglob("rkdet-run-c")) == []  # refused before the push
    assert not (tmp_path / "results").exists() or _runs(tmp_path / "results") == []


@pytest.mark.slow
def test_a_runner_of_another_struct_size_is_refused_before_any_push(two_page_build, tmp_path):
    """The runtime version alone would pass (both 2.3.2); the struct sizes the runner's header declares do not
    match what runtime 2.3.2 expects (rkdet's table of published headers): refused before the runner, the
    model or anything else is pushed (rockchip-linux/rknn-toolkit#440's ret=-5, caught on the host)."""
    sdk = build_double("aarch64", tmp_path / "grown-sdk", grown_abi=True, version="2.3.2")
    build_runner(sdk, "aarch64", tmp_path / "cache")
    with EmulatedBoard(with_stack(soc_profile("rk3588"), runtime="2.3.2"), tmp_path / "board") as board:
        before = {p.relative_to(board.home) for p in board.home.rglob("*")}
        done = _deploy(board, two_page_build, tmp_path / "results", tmp_path / "cache", "--repeats", "1")
        after = {p.relative_to(board.home) for p in board.home.rglob("*")}
    assert done.returncode == 3, done.stderr[-3000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert len(lines) == 1 and "rknn_tensor_attr is 392 bytes" in lines[0] and "2.3.2 expects 376" in lines[0]
    assert "Traceback" not in done.stderr
    pushed = [p for p in after - before if p.suffix in (".rknn", ".onnx", ".npy", ".pyz") or p.name == "rkdet-run-c"]
    assert pushed == []  # neither the runner nor the model nor the inputs went to the board
