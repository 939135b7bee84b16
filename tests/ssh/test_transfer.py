"""Transfer: verified push/pull, skip-if-identical, temp-then-rename, SFTP and exec fallback."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rkdet.board.emulator.sshd import EmulatedBoard
from rkdet.board.ssh import BoardConnection, Timeouts
from rkdet.board.transfer import _COMMIT, remote_hashes, request_size
from rkdet.errors import EXIT_BOARD, BoardError, InputError

FAST = Timeouts(connect=5, banner=5, auth=5, command=60, keepalive=5)
NASTY = "a b;$(touch x)'\"`touch y`|&"


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _make_tree(root: Path) -> None:
    (root / "sub dir" / NASTY).mkdir(parents=True)
    (root / "model.bin").write_bytes(os.urandom(3_000_000))
    (root / "sub dir" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "sub dir" / "run.sh").chmod(0o755)
    (root / "sub dir" / NASTY / "empty").write_bytes(b"")


def _board_sha(conn: BoardConnection, path: str) -> str:
    return conn.run(["sh", "-c", 'sha256sum < "$1"', "sh", path]).out.split()[0]


def test_push_file_into_nasty_dir_then_second_push_sends_nothing(conn: BoardConnection, remote_tmp: str,
                                                                   tmp_path: Path) -> None:
    local = tmp_path / "w.bin"
    local.write_bytes(os.urandom(2_500_000))
    target = f"{remote_tmp}/{NASTY}/w.bin"
    first = conn.push(local, target)
    assert (first.files_sent, first.files_skipped, first.bytes_sent, first.method) == (1, 0, 2_500_000, "sftp")
    assert request_size(conn.sftp()) > 32768  # OpenSSH's limits@openssh.com was read: big requests used
    assert _board_sha(conn, target) == hashlib.sha256(local.read_bytes()).hexdigest()
    second = conn.push(local, target)
    assert (second.files_sent, second.files_skipped, second.bytes_sent, second.bytes_skipped) == (0, 1, 0, 2_500_000)
    # nothing executed, no temp files left behind
    listing = conn.run(["find", remote_tmp, conn.home, "-maxdepth", "2"]).out
    assert ".tmp" not in listing and "/x\n" not in listing and "/y\n" not in listing
    local.write_bytes(os.urandom(10))  # a changed file is sent again
    assert conn.push(local, target).bytes_sent == 10


def test_push_and_pull_directory_round_trip(conn: BoardConnection, remote_tmp: str, tmp_path: Path) -> None:
    src, back = tmp_path / "src", tmp_path / "back"
    _make_tree(src)
    stats = conn.push(src, f"{remote_tmp}/tree")
    assert stats.files_sent == 3 and stats.bytes_sent == sum(len(v) for v in _tree(src).values())
    assert conn.run(["test", "-x", f"{remote_tmp}/tree/sub dir/run.sh"], check=False).rc == 0  # mode kept
    pulled = conn.pull(f"{remote_tmp}/tree", back)
    assert _tree(back) == _tree(src) and pulled.files_sent == 3
    again = conn.pull(f"{remote_tmp}/tree", back)
    assert (again.files_sent, again.files_skipped) == (0, 3)
    assert not [p for p in back.rglob("*.tmp")]
    single = conn.pull(f"{remote_tmp}/tree/model.bin", tmp_path / "one.bin")
    assert (tmp_path / "one.bin").read_bytes() == (src / "model.bin").read_bytes() and single.files_sent == 1


def test_commit_refuses_a_temp_file_with_the_wrong_hash(conn: BoardConnection, remote_tmp: str) -> None:
    tmp, final = f"{remote_tmp}/.f.tmp", f"{remote_tmp}/f"
    conn.run(["sh", "-c", 'printf corrupted > "$1"', "sh", tmp])
    good = hashlib.sha256(b"original").hexdigest()
    res = conn.run(["sh", "-c", _COMMIT, "sh", tmp, final, "644", good], check=False)
    assert res.rc != 0 and final in res.err
    assert remote_hashes(conn, [tmp, final]) == [None, None]  # temp removed, nothing renamed into place


def test_pull_missing_path_is_board_error(conn: BoardConnection, remote_tmp: str, tmp_path: Path) -> None:
    with pytest.raises(BoardError, match="no such file") as info:
        conn.pull(f"{remote_tmp}/absent", tmp_path / "x")
    assert info.value.exit_code == EXIT_BOARD and not (tmp_path / "x").exists()


def test_push_missing_local_is_bad_input(conn: BoardConnection, tmp_path: Path) -> None:
    with pytest.raises(InputError):
        conn.push(tmp_path / "absent", "/tmp/whatever")


@pytest.mark.parametrize("variant", ["nosftp", "busybox"])
def test_exec_fallback_without_sftp(boards, variant: str, tmp_path: Path) -> None:
    board: EmulatedBoard = boards[variant]
    src, back = tmp_path / "src", tmp_path / "back"
    _make_tree(src)
    with board.connect(timeouts=FAST) as c:
        assert c.sftp() is None
        dest = f"~/fallback {NASTY}"
        stats = c.push(src, dest)
        assert stats.method == "exec" and stats.files_sent == 3
        assert c.push(src, dest).bytes_sent == 0
        pulled = c.pull(dest, back)
        assert pulled.method == "exec" and _tree(back) == _tree(src)
        c.run(["rm", "-rf", c.abspath(dest)])


def test_progress_bar_for_big_files_does_not_change_the_result(conn: BoardConnection, remote_tmp: str,
                                                               tmp_path: Path) -> None:
    from rkdet.board.transfer import PROGRESS_MIN_BYTES

    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(PROGRESS_MIN_BYTES + 1))
    stats = conn.push(big, f"{remote_tmp}/big.bin", progress=True)
    assert stats.bytes_sent == big.stat().st_size
    back = tmp_path / "back.bin"
    assert conn.pull(f"{remote_tmp}/big.bin", back, progress=True).bytes_sent == big.stat().st_size
    assert back.read_bytes() == big.read_bytes()
