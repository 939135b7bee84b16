"""Build deploy run folders the way rkdet writes them, for the history tests.

The result set is written by the runner's own writer (`prepare_out_dir`, `ResultWriter`,
`Recorder`, `write_json_atomic`: the code rkdet-run runs on a board; its run.json is still a dict
here until the typed run.json record lands), board.json is the real probe.sh run against an emulated
SoC tree (`build_fake_tree`), parsed by `parse_probe` and written by the one board.json writer
(`rkdet.records.probe.write_probe`), cells.json by `rkdet.records.cell.write_cells` and deploy.json
by the one deploy.json writer (`rkdet.records.deploy_record`), so the history reads what deploy writes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np

from rkdet.emulator.fake_tree import build_fake_tree
from rkdet.boardinfo.scripts import run_script_locally
from rkdet.emulator.socs import profile
from rkdet.onboard.atomic import write_json_atomic
from rkdet.onboard.recorder import Recorder
from rkdet.onboard.resultset import ResultWriter, prepare_out_dir
from rkdet.records.cell import Cell, write_cells
from rkdet.records.deploy_record import DeployRecord, DeployStatus, PublishedSettings, write_deploy_record
from rkdet.records.probe import parse_probe, write_probe

FINGERPRINT = "ab" * 32
OUTPUTS = ["box0", "cls0"]


def page_outputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 64, 20, 20)).astype(np.float32), rng.random((1, 11, 20, 20), dtype=np.float32)]


def probe_records(tmp: Path, soc: str = "rk3588", runtime: str | None = None, kernel: str | None = None,
                  serial: str | None = None) -> list[dict]:
    """probe.sh's records from an emulated tree of `soc`, with another librknnrt version, kernel or a
    device-tree serial if given."""
    prof = profile(soc)
    changes = {k: v for k, v in (("runtime_version", runtime), ("kernel", kernel), ("serial", serial)) if v is not None}
    prof = dataclasses.replace(prof, **changes)
    root = tmp / f"tree-{soc}-{abs(hash((runtime, kernel, serial)))}"
    if not root.exists():
        build_fake_tree(prof, root)
    code, records = run_script_locally("probe", root, tmp / "state")
    assert code == 0, records
    return records


def write_set(result: Path, outputs: dict[str, list[np.ndarray]], *, repeats: int = 2, started: float | None = None,
              core_mask: str = "auto", backend: str = "rknnlite", npu_hz: int = 1_000_000_000,
              flaky: tuple[str, int, list[np.ndarray]] | None = None) -> None:
    """One result set in `result`, written by the runner's own writer."""
    prepare_out_dir(str(result))
    writer = ResultWriter(str(result))
    started = time.time() if started is None else started
    writer.snapshots.append({"at": "before", "run": None, "t_unix": started,
                             "cpu": {"policy4": {"governor": "performance", "cur_khz": 2256000}},
                             "devfreq": {"fdab0000.npu": {"governor": "userspace", "cur_hz": npu_hz}},
                             "thermal": {"npu-thermal": 41000}, "npu_load": None})
    recorder = Recorder(writer, backend)
    for run in range(repeats):
        for name, arrays in outputs.items():
            if flaky and flaky[0] == name and flaky[1] == run:
                arrays = flaky[2]
            recorder.submit(run, name, 0.012, started + run, OUTPUTS, arrays)
    summary = recorder.finish()
    writer.close()
    write_json_atomic(str(result / "summary.json"), summary)
    write_json_atomic(str(result / "run.json"), {
        "schema": "rkdet.run/1", "backend": backend, "backend_detail": f"{backend} (history test)", "emulated": True,
        "model": {"path": "model.rknn", "sha256": "0" * 64},
        "inputs": [{"name": n, "file": f"{n}.npy"} for n in outputs], "outputs": OUTPUTS, "repeats": repeats,
        "warmup": 0, "core_mask": core_mask, "affinity": None, "backend_options": {}, "snapshot_every": 10,
        "python": "3.11", "platform": "test", "started_unix": started, "finished_unix": started + repeats,
        "status": "complete", "error": None})


def make_cells_run(results: Path, label: str, run_id: str, records: list[dict],
                   cells: dict[str, dict[str, list[np.ndarray]] | None], *, started: float | None = None,
                   fingerprint: str = FINGERPRINT, repeats: int = 2) -> Path:
    """A multi-mask run folder: `cells` maps a core mask to its outputs (None: skipped), each cell a result
    set in result/core-<mask>/ and result/cells.json as rkdet-run writes them (docs/FORMATS.md "cells")."""
    masks = ",".join(cells)
    folder = make_run(results, label, run_id, records, {}, repeats=0, started=started, core_mask=masks,
                      fingerprint=fingerprint)
    result = folder / "result"
    shutil.rmtree(result)
    result.mkdir()
    listed = []
    for mask, outputs in cells.items():
        if outputs is None:
            listed.append(Cell(f"core-{mask}", mask, "skipped", f"the SoC has 1 NPU core(s); core mask {mask} needs more"))
            continue
        write_set(result / f"core-{mask}", outputs, repeats=repeats, started=started, core_mask=mask)
        listed.append(Cell(f"core-{mask}", mask, "complete", None, exit=0))
    write_cells(result, listed)
    return folder


def make_run(results: Path, label: str, run_id: str, records: list[dict], outputs: dict[str, list[np.ndarray]], *,
             repeats: int = 2, started: float | None = None, core_mask: str = "auto", backend: str = "rknnlite",
             fingerprint: str = FINGERPRINT, npu_hz: int = 1_000_000_000,
             flaky: tuple[str, int, list[np.ndarray]] | None = None) -> Path:
    """results/<label>/<fp16>/<run_id>/ with deploy.json, board.json and result/ (the runner's own writer).

    `flaky` = (input, run, arrays): that inference gives other outputs (a non-deterministic run).
    """
    folder = results / label / fingerprint[:16] / run_id
    write_set(folder / "result", outputs, repeats=repeats, started=started, core_mask=core_mask, backend=backend,
              npu_hz=npu_hz, flaky=flaky)
    write_probe(folder / "board.json", parse_probe(records))
    write_deploy_record(folder / "deploy.json", DeployRecord(
        run_id=run_id, status=DeployStatus.COMPLETE, board=label, fingerprint=fingerprint, platform="rk3588",
        settings=PublishedSettings(repeats=repeats, warmup=0, core_mask=core_mask, backend=backend, pin=True,
                                   sudo=False)))
    return folder


def edit_json(path: Path, **changes: object) -> None:
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def synthetic_run(folder: str, outputs: int = 50, board: str = "rk3588:label=writer"):
    """A RunRecord built in memory (for the database crash and concurrency tests, which time writes)."""
    from rkdet.history.ingest import BoardIdentity, BoardState, OutputHash, RunRecord

    ident = BoardIdentity(key=board, soc="rk3588", serial=None, machine_id=None, label=board.split("=")[-1],
                          identified_by="label")
    state = BoardState(kernel="5.10.160", driver=None, runtime="librknnrt version: 2.3.2", model=None,
                       clocks=(("devfreq/fdab0000.npu", "1000000000 Hz userspace"),))
    outs = tuple(OutputHash(f"page-{i // 2:04d}", i % 2, OUTPUTS[i % 2], f"{i:064x}", 1) for i in range(outputs))
    return RunRecord(folder=folder, run_id=folder.rsplit("/", 1)[-1], board=ident, state=state, build=FINGERPRINT,
                     core_mask="auto", backend="rknnlite", started_unix=time.time(), status="complete",
                     accepted=True, deterministic=True, emulated=True, inferences=outputs, outputs=outs)
