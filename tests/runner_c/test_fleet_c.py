"""The fleet matrix with the C backend as an axis: `rkdet fleet deploy --matrix backend=rknnlite,rknn_c` on an
emulated RK3588, both backends in one determinism class, run as steps of the board's one pinned session; every
cell's run is in history under its backend. (rkdet-run-c takes one core mask a run, so each of its masks is a
step of its own: one_mask_per_run.)"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from rkdet.backends.capi_build import build_runner
from rkdet.emulator.capi_runtime import build_double
from rkdet.onboard.backend_table import BACKENDS, DEFAULT_BACKEND

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fleet_deploy"))
from fleet_helpers import fleet_deploy, lab  # noqa: E402
from shared_build import trim_golden  # noqa: E402

C_API = BACKENDS[-1]


def test_a_one_mask_runner_gets_a_session_per_mask_the_others_one_per_backend():
    from rkdet.backends.registry import REGISTRY
    from rkdet.fleets.run.matrix import MatrixCell
    from rkdet.fleets.run.one_board import sessions

    one_mask = [d.name for d in REGISTRY.values() if d.one_mask_per_run]
    assert one_mask == [C_API]
    cells = [MatrixCell(m, b) for b in (DEFAULT_BACKEND, C_API) for m in ("0", "1", "0_1")]
    assert sessions(cells) == [cells[:3], [cells[3]], [cells[4]], [cells[5]]]


@pytest.mark.slow
def test_fleet_matrix_runs_the_c_backend_as_an_axis(default_build, tmp_path, monkeypatch):
    assert C_API == "rknn_c"
    build = trim_golden(Path(shutil.copytree(default_build, tmp_path / "build" / default_build.name)), 1)
    build_runner(build_double("aarch64", tmp_path / "sdk"), "aarch64", tmp_path / "cache")
    monkeypatch.setenv("RKDET_RUNNER_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "results"
    with lab(tmp_path / "lab", [("a", "rk3588")]) as fleet:
        proc = fleet_deploy(fleet, fleet.inventory(), out, "--matrix", "core_mask=0",
                            "--matrix", f"backend={DEFAULT_BACKEND},{C_API}", builds=("--build", str(build)))
    assert proc.returncode == 0, proc.stderr[-4000:]
    [found] = sorted((out / "fleet").glob("*/fleet.json"))
    doc = json.loads(found.read_text())
    assert doc["matrix"] == [f"0/{DEFAULT_BACKEND}", f"0/{C_API}"]
    [board] = doc["boards"]
    cells = {c["cell"]: c for c in board["cells"]}
    assert all(c["status"] == "complete" and c["deploy_exit"] == 0 for c in cells.values()), cells
    run_json = found.parent / cells[f"0/{C_API}"]["run_folder"] / "result" / "run.json"  # relative to fleet.json
    assert json.loads(run_json.read_text())["backend"] == C_API
    assert len({c["class"] for c in cells.values()}) == 1  # C and lite2: one determinism class
    sessions_of = [json.loads((found.parent / c["run_folder"] / "deploy.json").read_text())["session"]
                   for c in cells.values()]
    assert sessions_of[0]["id"] == sessions_of[1]["id"]  # both backends ran in the board's one pinned session
    assert sorted(sessions_of[0]["backends"]) == sorted([DEFAULT_BACKEND, C_API])
    assert {c["session"] for c in cells.values()} == {sessions_of[0]["id"]}  # fleet.json says it too
    with sqlite3.connect(out / "rkdet.db") as db:
        rows = db.execute("SELECT backend, core_mask FROM runs ORDER BY backend, core_mask").fetchall()
    assert rows == [(C_API, "0"), (DEFAULT_BACKEND, "0")]
