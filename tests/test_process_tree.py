"""The process-tree check used instead of machine-wide `pgrep` (issue 9 item 9)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from process_tree import leftovers, tree_argv


def test_survivors_of_the_command_are_reported_and_others_are_not(tmp_path: Path) -> None:
    # a process with the same name outside the test's tree (as someone else's convert would be)
    stranger = subprocess.Popen(["bash", "-c", "exec -a toolkit2_worker.py sleep 30"])
    try:
        report = tmp_path / "r.json"
        res = subprocess.run(tree_argv(["bash", "-c", "(exec -a toolkit2_worker.py sleep 30) & exit 3"], report,
                                       grace=0.3), timeout=30)
        assert res.returncode == 3  # the command's own exit code
        assert leftovers(report) == ["toolkit2_worker.py 30"]  # its orphan, found and killed; not the stranger
        assert stranger.poll() is None
        clean = tmp_path / "c.json"
        assert subprocess.run(tree_argv(["sh", "-c", "sleep 0.1 & wait"], clean), timeout=30).returncode == 0
        assert leftovers(clean) == []
    finally:
        stranger.kill()
        stranger.wait()
