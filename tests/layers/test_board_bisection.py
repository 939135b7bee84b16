"""`rkdet layers BUILD --board H`: bisection on the emulated board (real sshd, the emulated runtime with a
fault at a named tensor, real rknn-toolkit2 cut builds) names exactly the faulted tensor, within the
cut-build bound, reuses its cached cut models, says "no departure" without a fault, refuses a bad --against."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from convert_helpers import REPO, run_rkdet
from deploy_helpers import kill_sessions, wait_no_board_processes
from layer_models import chain_model
from tiny_models import image_folder, write_config

from rkdet.emulator.fake_tree import tree_digest
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import EXIT_BOARD

pytestmark = pytest.mark.slow

DEPTH = 6  # 14 nodes: conv0 relu0 ... conv6 relu6


@pytest.fixture(scope="module")
def chain_build(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("bisect-build")
    cfg = write_config(tmp / "tiny.yaml", chain_model(tmp / "chain.onnx", depth=DEPTH),
                       image_folder(tmp / "cal", 4, seed=1), image_folder(tmp / "gold", 2, seed=2),
                       fidelity={"min_cosine": 0.5, "min_slice_cosine": 0.5})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp / "out"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (tmp / "out" / "tiny-rk3588" / "config.yaml").write_text(cfg.read_text())  # where its files are (by name only)
    return tmp / "out" / "tiny-rk3588"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cut-cache")


def _board_args(board: EmulatedBoard) -> list[str]:
    return ["--board", board.target, "--user", board.user, "--identity", str(board.identity_file),
            "--known-hosts", str(board.known_hosts_file), "--ssh-config", "/dev/null"]


def _bisect(board: EmulatedBoard, build: Path, cache: Path, out: Path, *extra: str):
    out.mkdir(parents=True, exist_ok=True)
    return run_rkdet("layers", str(build), "--config", str(build / "config.yaml"), *_board_args(board), "--cache", str(cache), "--out", str(out), "--json",
                     *extra)


@pytest.fixture(scope="module")
def faulted_board(tmp_path_factory):
    # the emulated NPU computes the build's INT8 emulation (and each cut's), judged against the simulator
    with EmulatedBoard("rk3588", tmp_path_factory.mktemp("fault-board"),
                       env={"RKDET_EMU_FAULT_TENSOR": "c3", "RKDET_EMU_COMPUTE": "int8"}) as b:
        yield b


def test_fault_in_the_middle_is_named_then_cached(faulted_board, chain_build, cache, tmp_path):
    proc = _bisect(faulted_board, chain_build, cache, tmp_path / "a", "--html", str(tmp_path / "b.html"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["mode"] == "board" and doc["verdict"] == "departs" and doc["layers"] == 2 * DEPTH + 2
    assert doc["against"] == "simulator"
    pushed = sorted(p.parent.name for p in Path(faulted_board.home).rglob("model.int8emu.onnx"))
    assert "full" in pushed and any(name.startswith("cut-") for name in pushed)  # the build's and each cut's
    assert doc["pinned"] is True  # every run through run-pinned.sh, as deploy's
    assert doc["first_departing"]["tensors"] == ["c3"] and doc["op_between"] == "conv3 (Conv)"
    assert doc["last_agreeing"]["tensors"] == ["r2"]
    assert doc["board_runs"] <= 1 + math.ceil(math.log2(doc["layers"]))
    assert 1 <= doc["cut_builds"] <= doc["cut_build_bound"] and doc["cut_cache_hits"] == 0
    assert all(s["quant_changed"] == 0 for s in doc["steps"])  # the cut's own step 1 agreed with the full build's
    assert "c3" in (tmp_path / "b.html").read_text()
    # a second bisection of the same build: every cut from the cache, the same answer
    again = _bisect(faulted_board, chain_build, cache, tmp_path / "c")
    assert again.returncode == 1, again.stderr[-3000:]
    second = json.loads(again.stdout)
    assert second["cut_builds"] == 0 and second["cut_cache_hits"] == doc["cut_builds"]
    assert second["first_departing"] == doc["first_departing"]


def test_run_to_run_fault_found_against_run0(tmp_path, chain_build, cache):
    with EmulatedBoard("rk3588", tmp_path / "board", env={"RKDET_EMU_FAULT_TENSOR": "r5:run=1"}) as board:
        proc = _bisect(board, chain_build, cache, tmp_path / "out", "--against", "run0", "--repeats", "2")
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["against"] == "run0" and doc["first_departing"]["tensors"] == ["r5"]


@pytest.mark.parametrize("compute", ["int8", "fp32"])
def test_no_fault_no_departure(tmp_path, chain_build, cache, compute):
    """Without a fault the build's own model agrees: the INT8 emulation with the simulator (bitwise on this
    chain, docs/EMULATOR.md), the FP32 control with the FP32 reference."""
    with EmulatedBoard("rk3588", tmp_path / "board", env={"RKDET_EMU_COMPUTE": compute}) as board:
        proc = _bisect(board, chain_build, cache, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "no departure" and doc["first_departing"] is None
    assert doc["board_runs"] == 1 and doc["cut_builds"] == 0  # the full model agrees: nothing to bisect


def test_bad_against_is_one_line(chain_build, tmp_path):
    proc = run_rkdet("layers", str(chain_build), "--board", "127.0.0.1:1", "--against", "npu", "--out", str(tmp_path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--against 'npu'" in lines[0]


def test_board_dropping_mid_bisection_is_exit_3_and_restored(tmp_path, chain_build, cache):
    """The link dies while the second model runs (pinned): one line, exit 3, the board's knobs restored.
    The module's cut cache: whether the second model was just built or read from the cache, the link is cut
    while it runs on the board (after "board run 2"), which is all this claim needs."""
    with EmulatedBoard("rk3588", tmp_path / "board", env={"RKDET_EMU_FAULT_TENSOR": "c1"}) as board:
        before = tree_digest(board.root)
        log = tmp_path / "err.log"
        argv = [sys.executable, "-m", "rkdet.cli", "layers", str(chain_build), "--config", str(chain_build / "config.yaml"),
                *_board_args(board), "--cache", str(cache), "--out", str(tmp_path)]
        with open(log, "wb") as err:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)
        try:
            deadline = time.monotonic() + 300
            while "board run 2" not in log.read_text(errors="replace"):
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.02)
            assert kill_sessions(board) >= 1
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        text = log.read_text()
        assert proc.returncode == EXIT_BOARD, text[-3000:]
        assert "Traceback" not in text and text.strip().splitlines()[-1].startswith("rkdet: ")
        assert wait_no_board_processes(board, timeout=30) == []
        assert tree_digest(board.root) == before  # restored by run-pinned's trap, or never pinned again


@pytest.mark.parametrize("tensor, position", [("c0", 0), ("r6", 2 * DEPTH + 1)])
def test_fault_at_either_end_is_named(tmp_path, chain_build, cache, tensor, position):
    """The first node's output (nothing agrees before it: the last agreeing is the graph input) and the
    graph's output (the build's own model departs, no cut before it does)."""
    with EmulatedBoard("rk3588", tmp_path / "board", env={"RKDET_EMU_FAULT_TENSOR": tensor}) as board:
        proc = _bisect(board, chain_build, cache, tmp_path / "out")
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["first_departing"]["tensors"] == [tensor] and doc["first_departing"]["position"] == position
    if position == 0:
        assert doc["last_agreeing"]["tensors"] == ["graph input"]
    else:
        assert doc["last_agreeing"]["tensors"] == [f"c{DEPTH}"]
    assert doc["board_runs"] <= 1 + math.ceil(math.log2(doc["layers"]))


def test_core_masks_equally_faulted_do_not_depart(faulted_board, chain_build, cache, tmp_path):
    """--against core-mask=M runs the build's model on both masks: the same fault on both is no departure."""
    proc = _bisect(faulted_board, chain_build, cache, tmp_path / "out", "--against", "core-mask=0_1", "--no-pin")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["against"] == "core-mask=0_1" and doc["verdict"] == "no departure" and doc["pinned"] is False
    assert doc["board_runs"] == 2 and doc["cut_builds"] == 0
