"""rkdet-run-c's RKNPU1 path on an emulated RV1126: the armhf runner built against an RKNPU1 SDK (librknn_api.so),
started over SSH with the native runner's own command line (rkdet.backends descriptor), runs under qemu-arm
through the board's launcher over the RKNPU1 test double (4-argument rknn_init, no custom string: identity
by sha256), reports the board's librknn_runtime version, and gives the reference's outputs.

Not `rkdet deploy`: an RV1126 build needs RKNN-Toolkit 1.7, which cannot be installed here, so no RV1126
model exists to deploy (preflight would rightly refuse the RK3588 build on it). The RK3588 build's files stand
in for the model the board would run (the double computes from its ONNX); they are put in the board user's
home directly, as a push would (deploy's push is tested on the emulated RK3588)."""

from __future__ import annotations

import hashlib
import os
import json
import shutil
from pathlib import Path

import pytest

from rkdet.backends.capi_build import build_runner
from rkdet.backends.registry import REGISTRY
from rkdet.emulator.capi_runtime import build_double
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.link.ssh import BoardConnection
from rkdet.onboard.resultset import read_index


@pytest.mark.slow
def test_rknpu1_runner_on_an_emulated_rv1126(default_build: Path, tmp_path: Path) -> None:
    [native] = [d for d in REGISTRY.values() if d.native_runner]
    runner = build_runner(build_double("armhf", tmp_path / "sdk", rknpu1=True, version="1.7.3"), "armhf",
                          tmp_path / "cache")
    assert runner.api == "rknpu1" and runner.runtime_version == "1.7.3"
    page = sorted((default_build / "golden" / "inputs").glob("*.npy"))[0]
    with EmulatedBoard("rv1126", tmp_path / "board") as board:
        job = board.home / "job"
        (job / "inputs").mkdir(parents=True)
        for name in ("model.rknn", "model.onnx", "model.io.json"):
            shutil.copyfile(default_build / name, job / name)
        (job / "model.emu.json").write_text(json.dumps({"mean": [0, 0, 0], "std": [255, 255, 255],
                                                        "input_layout": "nchw"}))
        shutil.copyfile(page, job / "inputs" / page.name)
        shutil.copyfile(runner.path, job / "rkdet-run-c")
        (job / "rkdet-run-c").chmod(0o755)
        assert board.account is not None
        for path in [job, *job.rglob("*")]:
            os.chown(path, board.account.uid, board.account.gid)
        sha = hashlib.sha256((job / "model.rknn").read_bytes()).hexdigest()
        argv = native.runner_command(str(job / "rkdet-run-c"), [
            "--model", str(job / "model.rknn"), "--inputs", str(job / "inputs"), "--repeats", "2",
            "--out", str(job / "out"), "--expect-sha256", sha])
        with BoardConnection.open(board.alias, ssh_config=board.ssh_config_file, known_hosts=board.known_hosts_file,
                                  allow_agent=False) as conn:
            done = conn.run(argv, check=False, timeout=300)
        assert done.rc == 0, done.err[-2000:]
        run = json.loads((job / "out" / "run.json").read_text())
        index = read_index(str(job / "out"))
    assert run["platform"].endswith("armv7l")  # the armhf binary under qemu-arm
    assert run["backend_detail"].startswith("rkdet-run-c on librknn_api (RKNPU1) 1.7.3")
    assert run["emulated"] is True and run["stack"]["runtime_api_version"].startswith("1.7.3 ")  # the board's
    assert run["stack"]["custom_string"] is None and run["model_check"]["by"] == "sha256"
    golden = {r["input"]: [o["hash"] for o in r["outputs"]] for r in read_index(str(default_build / "golden" / "onnx-fp32"))}
    assert [[o["hash"] for o in r["outputs"]] for r in index] == [golden[page.stem]] * 2
