"""A big streamed push arrives in two parts (rkdet.link.transfer._RECEIVE_SPLIT): the board hashes
the first part while the rest arrives, and each part's hash must be the host's. Files from 4 MiB here
(SPLIT_MIN_BYTES lowered), as the 32 MiB ones in use; under dash, busybox and without SFTP."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import rkdet.link.ssh as ssh_module
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import EXIT_BOARD, BoardError
from rkdet.link import transfer
from rkdet.link.openssh import OpenSshStreams
from rkdet.link.pull import pull
from rkdet.link.ssh import BoardConnection, Timeouts
from rkdet.link.transfer import STREAM_VERIFY_MIN_BYTES, _sha256_parts, _split_at, push

FAST = Timeouts(connect=5, banner=5, auth=5, command=60, keepalive=5)
MiB = 1 << 20
SIZE = 5 * MiB + 77  # split at 3 MiB: 3/4 of the size, whole MiB


@pytest.fixture
def split_small(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Streamed pushes from 4 MiB arrive in two parts; the commands the connection streamed."""
    monkeypatch.setattr(transfer, "SPLIT_MIN_BYTES", STREAM_VERIFY_MIN_BYTES)
    seen: list[str] = []
    real = BoardConnection.stream

    def spy(self: BoardConnection, command: str, **kw: object) -> int:
        seen.append(command)
        return real(self, command, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(BoardConnection, "stream", spy)
    return seen


def _board_sha(conn: BoardConnection, path: str) -> str:
    return conn.run(["sh", "-c", 'sha256sum < "$1"', "sh", path]).out.split()[0]


def _leftovers(conn: BoardConnection, folder: str) -> list[str]:
    return [line for line in conn.run(["find", folder, "-type", "f"]).out.splitlines() if line]


def test_the_split_point_is_three_quarters_in_whole_mib_and_only_for_big_files() -> None:
    assert _split_at(transfer.SPLIT_MIN_BYTES - 1) == 0
    assert _split_at(transfer.SPLIT_MIN_BYTES) == 24
    assert _split_at(64 * MiB) == 48 and _split_at(64 * MiB + 5) == 48


@pytest.mark.parametrize("cut", [0, 1, MiB - 1, MiB, MiB + 5, SIZE - 1, SIZE])
def test_the_hosts_part_digests_are_the_sha256_of_each_side_of_the_cut(tmp_path: Path, cut: int) -> None:
    data = os.urandom(SIZE)
    (tmp_path / "f").write_bytes(data)
    want = [hashlib.sha256(data[:cut]).hexdigest(), hashlib.sha256(data[cut:]).hexdigest()]
    assert _sha256_parts(tmp_path / "f", cut) == want


@pytest.mark.parametrize("variant", ["standard", "busybox", "nosftp"])
def test_a_big_push_arrives_in_two_parts_and_lands_whole(boards, variant: str, tmp_path: Path,
                                                         split_small: list[str]) -> None:
    board: EmulatedBoard = boards[variant]
    big = tmp_path / "model.rknn"
    big.write_bytes(os.urandom(SIZE))
    with board.connect(timeouts=FAST) as c:
        dest = c.abspath("~/split")
        split_small.clear()
        stats = push(c, big, f"{dest}/model.rknn")
        received = [cmd for cmd in split_small if "iflag=fullblock" in cmd]
        assert len(received) == 1 and received[0].endswith(" 3")  # the first part: 3 MiB
        assert stats.bytes_sent == SIZE
        assert _board_sha(c, f"{dest}/model.rknn") == hashlib.sha256(big.read_bytes()).hexdigest()
        assert _leftovers(c, dest) == [f"{dest}/model.rknn"]  # no temp file, no hash file
        c.run(["rm", "-rf", dest])


@pytest.mark.parametrize("part,change", [
    ("first", ('iflag=fullblock > "$1" 2> /dev/null &&',
               'iflag=fullblock > "$1" 2> /dev/null && printf Z | dd of="$1" bs=1 seek=5 conv=notrunc 2> /dev/null &&')),
    ("second", ('cat >> "$1"', '{ cat; printf Z; } >> "$1"')),
])
def test_a_byte_changed_in_either_part_is_caught_and_nothing_lands(conn: BoardConnection, remote_tmp: str,
                                                                   tmp_path: Path, split_small: list[str],
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   part: str, change: tuple[str, str]) -> None:
    """The board's script stores a changed byte in one part (the host's file is untouched)."""
    big = tmp_path / "model.rknn"
    big.write_bytes(os.urandom(SIZE))
    real = transfer._RECEIVE_SPLIT
    assert change[0] in real
    monkeypatch.setattr(transfer, "_RECEIVE_SPLIT", real.replace(change[0], change[1], 1))
    with pytest.raises(BoardError, match="model.rknn arrived corrupted") as info:
        push(conn, big, f"{remote_tmp}/model.rknn")
    assert info.value.exit_code == EXIT_BOARD and len(str(info.value).splitlines()) == 1
    assert _leftovers(conn, remote_tmp) == []
    monkeypatch.setattr(transfer, "_RECEIVE_SPLIT", real)
    push(conn, big, f"{remote_tmp}/model.rknn")  # a retry lands it
    assert _board_sha(conn, f"{remote_tmp}/model.rknn") == hashlib.sha256(big.read_bytes()).hexdigest()


@pytest.mark.parametrize("variant", ["standard", "busybox"])
def test_a_dd_without_fullblock_receives_whole_then_hashes_both_parts(boards, variant: str, tmp_path: Path,
                                                                      split_small: list[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A board whose dd has no iflag=fullblock (the probe fails) gets the same two checked hashes."""
    probe = "dd if=/dev/null iflag=fullblock count=0 2> /dev/null"
    real = transfer._RECEIVE_SPLIT
    assert probe in real
    board: EmulatedBoard = boards[variant]
    big = tmp_path / "model.rknn"
    big.write_bytes(os.urandom(SIZE))
    with board.connect(timeouts=FAST) as c:
        dest = c.abspath("~/split-nofull")
        monkeypatch.setattr(transfer, "_RECEIVE_SPLIT", real.replace(probe, "false", 1))
        push(c, big, f"{dest}/model.rknn")
        assert _board_sha(c, f"{dest}/model.rknn") == hashlib.sha256(big.read_bytes()).hexdigest()
        # and a changed second part is still caught on that path
        bad = real.replace(probe, "false", 1).replace('else cat > "$1"', 'else { cat; printf Z; } > "$1"', 1)
        assert bad != real.replace(probe, "false", 1)
        monkeypatch.setattr(transfer, "_RECEIVE_SPLIT", bad)
        with pytest.raises(BoardError, match="arrived corrupted"):
            push(c, big, f"{dest}/other.rknn")
        assert _leftovers(c, dest) == [f"{dest}/model.rknn"]
        c.run(["rm", "-rf", dest])


def test_a_smaller_upload_uses_a_master_that_is_up_but_never_starts_one(board: EmulatedBoard, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Uploads below OPENSSH_MIN_BYTES go through OpenSSH's client only when its master is already up
    (a connection that moved big files); downloads below it stay on paramiko."""
    monkeypatch.setattr(ssh_module, "OPENSSH_MIN_BYTES", 2 * STREAM_VERIFY_MIN_BYTES)
    monkeypatch.setattr(ssh_module, "OPENSSH_AFTER_BYTES", 0)
    through: list[str] = []
    real = OpenSshStreams.stream
    monkeypatch.setattr(OpenSshStreams, "stream",
                        lambda self, command, **kw: through.append(command) or real(self, command, **kw))
    small, big = tmp_path / "small.rknn", tmp_path / "big.rknn"
    small.write_bytes(os.urandom(STREAM_VERIFY_MIN_BYTES + 1))
    big.write_bytes(os.urandom(2 * STREAM_VERIFY_MIN_BYTES))
    with board.connect(timeouts=FAST) as c:
        dest = c.abspath("~/small-after-big")
        push(c, small, f"{dest}/a.rknn")
        assert through == [] and c._openssh is None  # noqa: SLF001  # a small upload starts no master
        push(c, big, f"{dest}/big.rknn")
        assert len(through) == 1 and c._openssh is not None  # noqa: SLF001
        push(c, small, f"{dest}/b.rknn")
        assert len(through) == 2 and 'cat > "$1"' in through[1]
        back = pull(c, f"{dest}/b.rknn", tmp_path / "back.rknn")
        assert len(through) == 2 and back.bytes_sent == small.stat().st_size  # a small download: paramiko
        for name in ("a.rknn", "b.rknn"):
            assert _board_sha(c, f"{dest}/{name}") == hashlib.sha256(small.read_bytes()).hexdigest()
        c.run(["rm", "-rf", dest])
