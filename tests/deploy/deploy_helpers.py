"""Helpers for the `rkdet deploy` end-to-end tests: run the real CLI, find results, inspect the board.

Why a subprocess: exit codes, one-line errors and Ctrl-C are properties of the command, not of a
function; and a test must see what a user sees.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rkdet.emulator.sshd import EmulatedBoard
from rkdet.emulator.fake_tree import tree_digest

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "yolov8.yaml"
FAST_INPUTS = 2


def board_args(board: EmulatedBoard, *, known_hosts: Path | None = None, identity: Path | None = None) -> list[str]:
    """The connection flags for `board` (strict host keys from the emulator's known_hosts)."""
    return ["--board", board.target, "--user", board.user,
            "--identity", str(identity or board.identity_file),
            "--known-hosts", str(known_hosts or board.known_hosts_file), "--ssh-config", "/dev/null"]


def rkdet(args: Sequence[str], timeout: float = 240) -> subprocess.CompletedProcess:
    """Run the real `rkdet` CLI; stdout/stderr captured as text."""
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout, env=dict(os.environ))


def deploy_args(board: EmulatedBoard, build: Path, out: Path, *extra: str, repeats: int = 2, warmup: int = 0,
                **conn: Path) -> list[str]:
    return ["deploy", *board_args(board, **conn), "--config", str(CONFIG), "--build", str(build), "--out", str(out),
            "--repeats", str(repeats), "--warmup", str(warmup), *extra]


def deploy(board: EmulatedBoard, build: Path, out: Path, *extra: str, repeats: int = 2, warmup: int = 0,
           timeout: float = 240, **conn: Path) -> subprocess.CompletedProcess:
    return rkdet(deploy_args(board, build, out, *extra, repeats=repeats, warmup=warmup, **conn), timeout=timeout)


def run_folders(out: Path) -> list[Path]:
    """Every run folder under a results root (<out>/<board>/<fingerprint>/<run-id>), oldest first."""
    return sorted((p.parent for p in out.glob("*/*/*/deploy.json")), key=lambda p: p.name)


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The `rkdet: ...` error line; asserts it is one line and that no traceback was printed."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def board_processes(board: EmulatedBoard) -> list[str]:
    """Processes (other than sshd's) running with this board's fake root: leftovers of a deploy."""
    found = []
    marker = f"RKDET_ROOT={board.root}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if marker in environ and not cmdline.startswith("sshd"):
            found.append(f"{entry.name}: {cmdline}")
    return found


def wait_no_board_processes(board: EmulatedBoard, timeout: float = 10.0) -> list[str]:
    """[] once nothing of a deploy runs on the board any more (sessions end asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        left = board_processes(board)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def assert_untouched(board: EmulatedBoard, before: dict[str, str]) -> None:
    """The fake tree is byte-identical to `before` and no deploy process is left behind."""
    after = tree_digest(board.root)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"board tree changed: {changed[:10]}"
    assert wait_no_board_processes(board) == []


def sshd_session_pids(board: EmulatedBoard) -> list[int]:
    """The per-connection sshd processes (children of the board's listening sshd)."""
    assert board._proc is not None  # noqa: SLF001 - the emulator's own sshd, started by this test
    listener = board._proc.pid  # noqa: SLF001
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == listener:
                pids.append(int(entry.name))
    return pids


def kill_sessions(board: EmulatedBoard) -> int:
    """SIGKILL every live SSH connection of the board (not the detached jobs); returns how many."""
    pids = sshd_session_pids(board)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def control_dir(board: EmulatedBoard) -> Path:
    return Path(board.env["RKDET_EMU_CONTROL_DIR"])


@contextlib.contextmanager
def held(board: EmulatedBoard) -> Iterator[Callable[[], bool]]:
    """While inside, the board's runtime holds every inference (TEST CONTROL `hold`); yields "is a run
    being held right now" (the runner started, so the board lock is taken). Released on leaving."""
    control = control_dir(board)
    (control / "holding").unlink(missing_ok=True)
    (control / "hold").write_text("")
    try:
        yield lambda: (control / "holding").exists()
    finally:
        (control / "hold").unlink(missing_ok=True)
        (control / "holding").unlink(missing_ok=True)
