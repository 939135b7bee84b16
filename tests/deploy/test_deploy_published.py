"""A published run folder leaks neither the workstation nor the board's paths (issue 9 item 10, deploy side).

deploy.json records the board as host_port, the build and reference relative to the folder, and no
remote paths; what --resume needs lives in a private record under $XDG_STATE_HOME/rkdet/deploys/
(conftest points it at a temp dir), which exists only while the run can be resumed.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from deploy_helpers import deploy, run_folders

from rkdet.boardinfo.lock import this_holder
from rkdet.emulator.sshd import EmulatedBoard


def test_published_folder_has_no_user_names_or_host_paths(board: EmulatedBoard, fast_build: Path, tmp_path: Path,
                                                          private_state: Path) -> None:
    proc = deploy(board, fast_build, tmp_path / "results")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [folder] = run_folders(tmp_path / "results")
    record = json.loads((folder / "deploy.json").read_text())
    assert record["board"] == f"127.0.0.1_{board.port}" and "remote" not in record
    assert not os.path.isabs(record["build"]) and (folder / record["build"]).resolve() == fast_build.resolve()
    assert not os.path.isabs(record["reference"]) and record["reference"].endswith("golden/onnx-fp32")
    assert not {"RKDET_STATE_DIR", "RKDET_WORK_DIR", "RKDET_LOCK_HOLDER"} & set(record["job_env"])
    secrets = [f"{board.user}@", str(fast_build.resolve()), str(fast_build), str(board.home), str(board.board_dir),
               str(tmp_path), this_holder()]  # the board lock's holder record names this user@host
    # every file of the published run folder: deploy's, the diff's reports and the runner's run.json
    for name in ("deploy.json", "board.json", "pin.json", "job.log", "report.json", "report.html", "result/run.json"):
        text = (folder / name).read_text(errors="replace")
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"{name} holds {leaked}"
    # the run is final: no private record is kept for it
    assert not (private_state / "rkdet" / "deploys" / f"{folder.name}.json").exists()


def test_private_record_is_the_users_own(board: EmulatedBoard, fast_build: Path, tmp_path: Path,
                                         private_state: Path) -> None:
    """While a run can be resumed (here: cut off by the --timeout), its private record is 0600 in a 0700 dir."""
    proc = deploy(board, fast_build, tmp_path / "results", "--timeout", "0.5", repeats=30)
    assert proc.returncode == 3, proc.stderr[-3000:]
    [folder] = run_folders(tmp_path / "results")
    assert json.loads((folder / "deploy.json").read_text())["status"] == "disconnected"
    private = private_state / "rkdet" / "deploys" / f"{folder.name}.json"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(private.parent.stat().st_mode) == 0o700
    kept = json.loads(private.read_text())
    assert kept["board"] == f"{board.user}@127.0.0.1:{board.port}" and kept["remote"]["result"].startswith("/")
    resumed = deploy(board, fast_build, tmp_path / "results", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((folder / "deploy.json").read_text())["status"] == "complete"
    assert not private.exists()
