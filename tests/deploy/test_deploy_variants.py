"""The board kinds a deploy must cope with, each a complete deploy: a sudo login (`--sudo`), a busybox
ash login with busybox applets only and no SFTP, and OpenSSH without the SFTP subsystem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deploy_helpers import assert_untouched, deploy, run_folders

from rkdet.board.emulator.sshd import EmulatedBoard
from rkdet.board.fake_tree import tree_digest

CASES = {
    # variant: (extra deploy flags, transfer method the deploy must have used)
    "sudo": (("--sudo",), "sftp"),
    "busybox": ((), "exec"),
    "nosftp": ((), "exec"),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(CASES))
def test_variant_completes_a_deploy(variant: str, fast_build: Path, tmp_path: Path) -> None:
    flags, method = CASES[variant]
    with EmulatedBoard("rk3588", tmp_path / "board", variant) as board:
        if variant == "sudo":  # pin state under the board's home, never the host's /run/rkdet
            flags = (*flags, "--state-dir", f"{board.home}/pin-state")
        before = tree_digest(board.root)
        out = tmp_path / "r"
        proc = deploy(board, fast_build, out, *flags)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "SAME (bitwise)" in proc.stderr
        assert_untouched(board, before)
        [folder] = run_folders(out)
        record = json.loads((folder / "deploy.json").read_text())
        assert record["status"] == "complete" and record["restored"] is True
        assert record["transfer"]["method"] == method and record["transfer"]["files_sent"] > 0
        assert record["settings"]["sudo"] is (variant == "sudo")
        assert len((folder / "result" / "index.jsonl").read_text().splitlines()) == 2 * 2
