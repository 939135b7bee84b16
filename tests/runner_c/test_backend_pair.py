"""The lite2-vs-C cell: `rkdet deploy --backends rknnlite,rknn_c` runs one build through both on the same
emulated RK3588 and says whether what ships (the C API) equals what was proven (lite2): SAME on a clean
double, and for each planted difference (TEST CONTROLS of the emulated board, capi_double/board_exec.py)
the output and the setting: #445 want_float, NCHW declared for NHWC data, #448 an op only lite2 runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rkdet.backends.capi_build import build_runner
from rkdet.emulator.capi_runtime import build_double
from rkdet.emulator.fake_tree import tree_digest
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.onboard.backend_table import BACKENDS, DEFAULT_BACKEND

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from shared_build import trim_golden  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "yolov8.yaml"
LITE = DEFAULT_BACKEND  # what was proven
C_API = BACKENDS[-1]  # what ships: the registry's C backend (asserted below)


@pytest.fixture(scope="module")
def world(default_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    assert C_API == "rknn_c"
    tmp = tmp_path_factory.mktemp("pair")
    build = trim_golden(Path(shutil.copytree(default_build, tmp / "build" / default_build.name)), 1)
    build_runner(build_double("aarch64", tmp / "sdk"), "aarch64", tmp / "cache")
    control = Path(tempfile.mkdtemp(prefix="rkdet-capi-ctl-"))
    control.chmod(0o777)
    try:
        with EmulatedBoard("rk3588", tmp / "board", env={"RKDET_EMU_CONTROL_DIR": str(control)}) as board:
            yield {"board": board, "build": build, "cache": tmp / "cache", "control": control}
    finally:
        shutil.rmtree(control, ignore_errors=True)


def _pair_argv(world: dict, out: Path, *extra: str) -> list[str]:
    b = world["board"]
    return [sys.executable, "-m", "rkdet.cli", "deploy", "--board", b.target, "--user", b.user, "--identity",
            str(b.identity_file), "--known-hosts", str(b.known_hosts_file), "--ssh-config", "/dev/null", "--config",
            str(CONFIG), "--build", str(world["build"]), "--out", str(out), "--core-mask", "0", "--repeats", "1",
            "--backends", f"{LITE},{C_API}", *extra]


def _pair(world: dict, out: Path, control: dict | None, *extra: str,
          cache: Path | None = None) -> tuple[subprocess.CompletedProcess, dict | None]:
    plant = world["control"] / "capi.json"
    plant.unlink(missing_ok=True)
    if control is not None:
        plant.write_text(json.dumps(control))
    done = subprocess.run(_pair_argv(world, out, *extra), capture_output=True, text=True, cwd=REPO,
                          timeout=600, env={**os.environ, "RKDET_RUNNER_CACHE": str(cache or world["cache"])})
    found = sorted(out.glob("*/*/*/backends.json"))
    return done, (json.loads(found[-1].read_text()) if found else None)


def _count(records: list[dict], script: str, record: str, status: str | None = None) -> int:
    return sum(1 for r in records if r.get("script") == script and r.get("record") == record
               and (status is None or r.get("status") == status))


def _one_session(out: Path) -> tuple[dict, dict]:
    """Both runs' deploy.json, after checking they ran as ONE pinned session: one session id naming both
    runs, one lock, one pin and one restore in the session's job log (each run's job.log and pin.json hold
    the same pin and restore records and only their own runner's step), the same pinned clocks around both."""
    folders = sorted(out.glob("*/*/*/deploy.json"))
    assert len(folders) == 2, folders
    records = {json.loads(f.read_text())["session"]["index"]: json.loads(f.read_text()) for f in folders}
    a, b = records[0], records[1]
    assert a["session"]["id"] == b["session"]["id"] and a["session"]["runs"] == b["session"]["runs"]
    assert a["session"]["runs"] == [a["run_id"], b["run_id"]] and a["session"]["backends"] == [LITE, C_API]
    assert a["session"]["pinned"] is True and a["restored"] is True and b["restored"] is True
    own = ("backend", "runner_settings")  # everything else is the same run: repeats, warmup, mask, pin, tolerances
    assert {k: v for k, v in a["settings"].items() if k not in own} == \
        {k: v for k, v in b["settings"].items() if k not in own}
    pins = []
    for rec in (a, b):
        folder = out / folders[0].relative_to(out).parts[0] / folders[0].relative_to(out).parts[1] / rec["run_id"]
        recs = json.loads((folder / "pin.json").read_text())["records"]
        assert _count(recs, "run-pinned", "lock", "acquired") == 1 and _count(recs, "pin", "state", "saved") == 1
        assert _count(recs, "pin", "result") == 1 and _count(recs, "restore", "result") == 1
        assert _count(recs, "run-pinned", "child", "started") == 1  # one pinned job ran both runners
        assert [r["index"] for r in recs if r["record"] == "step"] == [rec["session"]["index"]] * 2
        pins.append([r for r in recs if r["script"] in ("pin", "restore") or r["record"] == "clocks"])
    assert pins[0] == pins[1]
    clocks = [r for r in pins[0] if r["record"] == "clocks"]
    assert [(r["index"], r["at"]) for r in clocks] == [(0, "before"), (0, "after"), (1, "before"), (1, "after")]
    assert all(r["clocks"] == clocks[0]["clocks"] for r in clocks)  # lite2 and C ran at the same pinned clocks
    npu = clocks[0]["clocks"]["devfreq/fdab0000.npu"]
    pinned = next(r for r in pins[0] if r["record"] == "knob" and r.get("knob") == "devfreq/fdab0000.npu")
    assert npu["governor"] == "performance" and npu["min"] == npu["max"] == int(pinned["wanted"])
    unpinned = next(r for r in pins[0] if r["script"] == "restore" and r.get("knob", "").endswith("npu/governor"))
    assert unpinned["wanted"] != "performance"  # what restore put back: the clocks above were the pin's
    return a, b


@pytest.mark.slow
def test_a_clean_double_is_same_bitwise(world, tmp_path):
    before = tree_digest(world["board"].root)
    done, cell = _pair(world, tmp_path / "r", None)
    assert done.returncode == 0, done.stderr[-3000:]
    assert cell is not None and cell["same"] is True and cell["a"] == LITE and cell["b"] == C_API
    assert cell["compared"] == 1 and cell["outputs"] == [] and cell["settings"] == []
    assert f"{C_API} vs {LITE}: SAME (bitwise)" in done.stderr
    a, b = _one_session(tmp_path / "r")
    assert cell["session"] == {"id": a["session"]["id"], "pinned": True, "same_pin": True, "same_clocks": True,
                               "moved": [], "cur_changes": cell["session"]["cur_changes"]}
    assert f"one pinned session {a['session']['id']}: pinned once, restored once" in done.stderr
    # the union pushed once: C's run sent its own runner at most, never asked again about the shared files
    assert b["transfer"]["files_skipped"] == 0 and b["transfer"]["files_sent"] <= 1, b["transfer"]
    assert tree_digest(world["board"].root) == before  # restored exactly
    runs = sorted(p.parent for p in (tmp_path / "r").glob("*/*/*/deploy.json"))
    diff = subprocess.run([sys.executable, "-m", "rkdet.cli", "diff", str(runs[0]), str(runs[1] / "result")],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert diff.returncode == 0, diff.stdout[-2000:] + diff.stderr[-2000:]
    assert f"A and B ran in one pinned session {a['session']['id']}: pinned once" in diff.stdout + diff.stderr


def test_a_backend_that_cannot_run_is_refused_before_any_push(world, tmp_path):
    """No rkdet-run-c built (an empty runner cache): the C backend's preflight refuses the session in one line
    naming it and what to run, before lite2's files were pushed; no run folder is left."""
    with world["board"].connect() as conn:
        models = f"{conn.default_workdir()}/models"
        conn.run(["rm", "-rf", models], check=False)
    done, cell = _pair(world, tmp_path / "r", None, cache=tmp_path / "no-runner")
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"{C_API} cannot run in this session: --backend {C_API}: no rkdet-run-c built" in done.stderr
    assert "rkdet runner build --sdk DIR" in done.stderr and "Traceback" not in done.stderr
    assert cell is None and not list((tmp_path / "r").glob("*/*/*"))
    with world["board"].connect() as conn:
        assert conn.run(["test", "-e", models], check=False).rc != 0  # nothing of the build went to the board


@pytest.mark.slow
def test_want_float_0_is_named_with_its_outputs_445(world, tmp_path):
    """The application's setting given to deploy (it goes to the C runner only: lite2 takes no such setting)."""
    done, cell = _pair(world, tmp_path / "r", None, "--runner-setting", "want_float=0")
    assert done.returncode == 1, done.stderr[-3000:]
    assert cell is not None and cell["same"] is False
    assert cell["settings"] == [{"key": "want_float", "a": 1, "b": 0}]
    assert {d["how"] for d in cell["outputs"]} == {"dtype float32 vs int8"}
    assert {d["output"] for d in cell["outputs"]} == {"box0", "cls0", "box1", "cls1", "box2", "cls2"}
    assert "want_float rknn_c=0 vs rknnlite=1" in done.stderr and "box0" in done.stderr


@pytest.mark.slow
def test_nchw_declared_for_nhwc_data_is_named(world, tmp_path):
    """Planted by the emulated board's test control (as an application built with that setting would run)."""
    done, cell = _pair(world, tmp_path / "r", {"args": ["--input-fmt", "nchw"]})
    assert done.returncode == 1, done.stderr[-3000:]
    assert cell is not None and cell["settings"] == [{"key": "input_fmt", "a": "nhwc", "b": "nchw"}]
    assert cell["outputs"] and {d["how"] for d in cell["outputs"]} == {"values differ bitwise"}


@pytest.mark.slow
def test_an_op_only_lite2_runs_is_named_448(world, tmp_path):
    """B's runtime refuses the model: the pair names it, and the one session still restored the board once."""
    before = tree_digest(world["board"].root)
    done, cell = _pair(world, tmp_path / "r", {"reject_op": "Floor"})
    assert done.returncode == 1, done.stderr[-3000:]
    assert cell is not None and cell["same"] is False and "Floor" in cell["refused"]
    assert "rknn_init" in cell["refused"] and "Traceback" not in done.stderr
    a, b = _one_session(tmp_path / "r")
    assert a["status"] == "complete" and b["status"] == "failed" and "no results" in b["error"]
    assert cell["session"]["same_pin"] is True
    assert tree_digest(world["board"].root) == before


@pytest.mark.slow
def test_ctrl_c_during_the_session_stops_it_and_restores_the_board_once(world, tmp_path):
    """Ctrl-C while lite2's runner is mid-run (held by the runtime double's TEST CONTROL `hold`): exit 130, the C
    runner never starts, the board is restored once (by the session's one job) and both runs say interrupted."""
    import signal
    import time

    board, control, out = world["board"], world["control"], tmp_path / "r"
    before = tree_digest(board.root)
    (control / "capi.json").unlink(missing_ok=True)
    (control / "holding").unlink(missing_ok=True)
    (control / "hold").write_text("")
    log = tmp_path / "deploy.log"
    try:
        with open(log, "wb") as err:
            proc = subprocess.Popen(_pair_argv(world, out), stdout=subprocess.DEVNULL, stderr=err, cwd=REPO,
                                    env={**os.environ, "RKDET_RUNNER_CACHE": str(world["cache"])})
        try:
            deadline = time.monotonic() + 180
            while not (control / "holding").exists():
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.05)
            assert tree_digest(board.root) != before  # pinned while lite2 runs
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    finally:
        (control / "hold").unlink(missing_ok=True)
        (control / "holding").unlink(missing_ok=True)
    text = log.read_text()
    assert proc.returncode == 130 and "Traceback" not in text, text[-3000:]
    assert tree_digest(board.root) == before
    records = {json.loads(f.read_text())["session"]["index"]: (f.parent, json.loads(f.read_text()))
               for f in sorted(out.glob("*/*/*/deploy.json"))}
    assert sorted(records) == [0, 1]
    for folder, record in records.values():
        assert record["status"] == "interrupted" and record["restored"] is True, record
        recs = json.loads((folder / "pin.json").read_text())["records"]
        assert _count(recs, "pin", "result") == 1 and _count(recs, "restore", "result", "ok") == 1
    lite_steps = [(r["index"], r["status"]) for r in json.loads((records[0][0] / "pin.json").read_text())["records"]
                  if r["record"] == "step"]
    assert lite_steps == [(0, "started"), (0, "exited")]
    c_steps = [r for r in json.loads((records[1][0] / "pin.json").read_text())["records"] if r["record"] == "step"]
    assert c_steps == []  # the C runner never started


@pytest.mark.slow
def test_no_pin_runs_both_in_one_unpinned_session(world, tmp_path):
    """--no-pin: one job still runs both runners (run-steps.sh alone: no lock, no pin, no restore); the session
    and the cell say it was not pinned, and the board is untouched."""
    before = tree_digest(world["board"].root)
    done, cell = _pair(world, tmp_path / "r", None, "--no-pin")
    assert done.returncode == 0, done.stderr[-3000:]
    assert cell is not None and cell["same"] is True and cell["session"]["pinned"] is False
    records = [json.loads(f.read_text()) for f in sorted((tmp_path / "r").glob("*/*/*/deploy.json"))]
    assert len(records) == 2 and records[0]["session"]["id"] == records[1]["session"]["id"]
    assert all(r["session"]["pinned"] is False and r["status"] == "complete" for r in records)
    for folder in sorted((tmp_path / "r").glob("*/*/*/")):
        recs = json.loads((folder / "pin.json").read_text())["records"]
        assert _count(recs, "pin", "result") == 0 and _count(recs, "restore", "result") == 0
        assert _count(recs, "run-steps", "step", "exited") == 1
    assert "one session" in done.stderr and "not pinned" in done.stderr
    assert tree_digest(world["board"].root) == before
