"""The board kinds a deploy must cope with, each a complete deploy: a sudo login (`--sudo`), a busybox
ash login with busybox applets only and no SFTP, and OpenSSH without the SFTP subsystem."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_helpers import assert_untouched, deploy, run_folders
from host_leftovers import inventory

from rkdet.emulator.sshd import EmulatedBoard
from rkdet.emulator.fake_tree import tree_digest

CASES = {
    # variant: (extra deploy flags, transfer method the deploy must have used)
    "sudo": (("--sudo",), "sftp"),
    "busybox": ((), "exec"),
    "nosftp": ((), "exec"),
}


def _busybox_has_flock() -> bool:
    """Whether this busybox build has the flock applet (Debian's has not): the busybox board's PATH holds
    busybox applets only."""
    done = subprocess.run(["busybox", "flock", "--help"], capture_output=True, text=True, timeout=30)
    return "applet not found" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(CASES))
def test_variant_completes_a_deploy(variant: str, fast_build: Path, tmp_path: Path) -> None:
    flags, method = CASES[variant]
    host_before = inventory([tmp_path])
    with EmulatedBoard("rk3588", tmp_path / "board", variant) as board:
        if variant == "sudo":  # pin state under the board's home (the board's /run/rkdet would do too)
            flags = (*flags, "--state-dir", f"{board.home}/pin-state")
        before = tree_digest(board.root)
        out = tmp_path / "r"
        proc = deploy(board, fast_build, out, *flags)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "SAME (bitwise)" in proc.stderr
        assert_untouched(board, before)
        paths = [tmp_path, board.workdir, board.board_dir]
        mine = dict(uids=[board.account.uid], roots=[board.root], pids=[board._proc.pid],  # noqa: SLF001
                    ports=[board.port])
        [folder] = run_folders(out)
        record = json.loads((folder / "deploy.json").read_text())
        assert record["status"] == "complete" and record["restored"] is True
        assert record["transfer"]["method"] == method and record["transfer"]["files_sent"] > 0
        assert record["settings"]["sudo"] is (variant == "sudo")
        assert len((folder / "result" / "index.jsonl").read_text().splitlines()) == 2 * 2
        # the board lock (lock.sh): flock where the board has it, else the ln-based fallback
        locks = [r for r in json.loads((folder / "pin.json").read_text())["records"]
                 if r.get("record") == "lock" and r.get("status") == "acquired"]
        has_flock = (_busybox_has_flock() if variant == "busybox" else shutil.which("flock") is not None)
        assert [r["method"] for r in locks] == ["flock" if has_flock else "link"]
    left = inventory(paths, **mine).new_since(host_before)  # the board is stopped: nothing of it may remain
    assert left == {kind: [] for kind in left}, f"the deploy left on the host: {left}"
