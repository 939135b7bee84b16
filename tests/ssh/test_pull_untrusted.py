"""Pull treats the board's listing, file types, sizes and SFTP answers as untrusted (issue 9, items 1-2).

The hostile emulated board (a TEST CONTROL, rkdet/emulator/hostile.py) lies in its `find`
listing and stalls its SFTP; the standard board is enough for symlinks, FIFOs and sparse files.
Every refusal is one BoardError (exit 3) naming the entry, and nothing lands outside the
destination, not even a half-written folder.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rkdet.emulator import hostile
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.link.pull import pull
from rkdet.link.ssh import BoardConnection, Limits, Timeouts
from rkdet.errors import EXIT_BOARD, BoardError
from bounds import HANG_MARGIN, ended_within

FAST = Timeouts(connect=5, banner=5, auth=5, command=60, keepalive=5, sftp=2)


@pytest.fixture(scope="module")
def bad(boards) -> EmulatedBoard:
    return boards["hostile"]


@pytest.fixture
def bad_conn(bad: EmulatedBoard) -> Iterator[BoardConnection]:
    c = bad.connect(timeouts=FAST)
    yield c
    c.close()
    hostile.write_control(bad.board_dir)


def _result_dir(conn: BoardConnection, where: str) -> str:
    """A small result folder on the board (run.json marks it for the hostile `find`)."""
    d = f"{conn.home}/{where}"
    conn.run(["rm", "-rf", d])
    conn.run(["sh", "-c", 'mkdir -p "$1/outputs" && echo "{}" > "$1/run.json" && echo x > "$1/outputs/a.npy"',
              "sh", d])
    return d


def _untouched_parent(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir())


def test_pull_refuses_an_absolute_name_and_leaves_the_host_file(bad: EmulatedBoard, bad_conn: BoardConnection,
                                                                 tmp_path: Path) -> None:
    victim = hostile.victim_path(bad.board_dir)
    hostile.write_control(bad.board_dir, ("names",), names=[str(victim)])
    before = (victim.stat().st_ino, victim.read_bytes())
    src = _result_dir(bad_conn, "abs")
    with pytest.raises(BoardError) as err:
        pull(bad_conn, src, tmp_path / "back")
    assert err.value.exit_code == EXIT_BOARD
    assert str(victim) in str(err.value) and "absolute" in str(err.value)
    assert (victim.stat().st_ino, victim.read_bytes()) == before
    assert _untouched_parent(tmp_path) == []  # no folder, no temp folder


@pytest.mark.parametrize(("name", "why"), [("./", "empty"), ("./../escaped.npy", ".."), ("./a/./b.npy", "normal"),
                                           ("./outputs//b.npy", "normal"), ("./outputs/\x1b[2Jclear.npy", "control"),
                                           ("./run.json", "twice")])
def test_pull_refuses_names_that_are_not_plain_relative_paths(bad: EmulatedBoard, bad_conn: BoardConnection,
                                                              tmp_path: Path, name: str, why: str) -> None:
    hostile.write_control(bad.board_dir, ("names",), names=[name])
    src = _result_dir(bad_conn, "names")
    with pytest.raises(BoardError) as err:
        pull(bad_conn, src, tmp_path / "back")
    message = str(err.value)
    assert why in message and "\x1b" not in message, message
    assert repr(name[2:] if name.startswith("./") else name) in message or "''" in message
    assert _untouched_parent(tmp_path) == []


@pytest.mark.parametrize(("make", "entry"), [('ln -s /etc/passwd "$1/outputs/p.npy"', "outputs/p.npy"),
                                             ('ln -s / "$1/root"', "root"),
                                             ('mkfifo "$1/outputs/fifo.npy"', "outputs/fifo.npy")])
def test_pull_refuses_anything_but_regular_files(conn: BoardConnection, remote_tmp: str, tmp_path: Path,
                                                 make: str, entry: str) -> None:
    src = _result_dir(conn, remote_tmp.rsplit("/", 1)[-1] + "/res")
    conn.run(["sh", "-c", make, "sh", src])
    with pytest.raises(BoardError) as err:
        pull(conn, src, tmp_path / "back")
    assert repr(entry) in str(err.value) and "not a regular file" in str(err.value)
    assert _untouched_parent(tmp_path) == []


def test_pull_refuses_a_10_gb_sparse_file_at_once(conn: BoardConnection, remote_tmp: str, tmp_path: Path) -> None:
    src = _result_dir(conn, remote_tmp.rsplit("/", 1)[-1] + "/res")
    conn.run(["sh", "-c", 'dd if=/dev/zero of="$1/outputs/huge.npy" bs=1 count=0 seek=10G 2>/dev/null',
              "sh", src])
    start = time.monotonic()
    with pytest.raises(BoardError) as err:
        pull(conn, src, tmp_path / "back")
    assert ended_within(start)  # refused from the listing, not after reading 10 GB
    assert "'outputs/huge.npy'" in str(err.value) and "per-file cap" in str(err.value)
    assert _untouched_parent(tmp_path) == []


@pytest.mark.parametrize(("limits", "why"), [(Limits(file_bytes=1000), "per-file cap"),
                                             (Limits(total_bytes=3000), "total cap"),
                                             (Limits(files=2), "files"),
                                             (Limits(keep_free_bytes=1 << 60), "free")])
def test_pull_caps_are_settings(board: EmulatedBoard, tmp_path: Path, limits: Limits, why: str) -> None:
    with board.connect(timeouts=FAST, limits=limits) as c:
        src = _result_dir(c, f"caps-{why.replace(' ', '-')}")
        c.run(["sh", "-c", 'head -c 2000 /dev/zero > "$1/outputs/b.npy"; head -c 2000 /dev/zero > "$1/outputs/c.npy"',
               "sh", src])
        with pytest.raises(BoardError) as err:
            pull(c, src, tmp_path / "back")
        assert why in str(err.value)
        assert _untouched_parent(tmp_path) == []
        single = tmp_path / "one.npy"
        if why == "per-file cap":
            with pytest.raises(BoardError):
                pull(c, f"{src}/outputs/b.npy", single)
            assert not single.exists()


def test_pull_never_replaces_a_symlink_or_device_at_the_destination(conn: BoardConnection, remote_tmp: str,
                                                                    tmp_path: Path) -> None:
    src = _result_dir(conn, remote_tmp.rsplit("/", 1)[-1] + "/res")
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "back"
    link.symlink_to(target)
    with pytest.raises(Exception) as err:
        pull(conn, src, link)
    assert "symlink" in str(err.value) or "not a" in str(err.value)
    assert link.is_symlink() and list(target.iterdir()) == []
    null = Path("/dev/null")
    with pytest.raises(Exception):
        pull(conn, f"{src}/run.json", null)
    assert null.is_char_device()


def test_a_stalled_sftp_fails_within_the_configured_timeout(bad: EmulatedBoard, bad_conn: BoardConnection,
                                                            tmp_path: Path) -> None:
    hostile.write_control(bad.board_dir, ("stall",))
    src = _result_dir(bad_conn, "runs/x/result")
    assert bad_conn.sftp() is not None
    start = time.monotonic()
    with pytest.raises(BoardError) as err:
        pull(bad_conn, src, tmp_path / "back")
    took = time.monotonic() - start
    assert took < FAST.sftp + HANG_MARGIN, took
    assert "no answer" in str(err.value) and f"{FAST.sftp:g} s" in str(err.value)
    assert _untouched_parent(tmp_path) == []
    # a bare stat on a fresh connection stalls the same way, and is cut off the same way
    with bad.connect(timeouts=FAST) as again:
        sftp = again.sftp()
        assert sftp is not None
        start = time.monotonic()
        with pytest.raises(OSError):
            sftp.stat(f"{src}/run.json")
        assert ended_within(start, FAST.sftp)


def test_command_output_is_read_with_a_byte_cap(board: EmulatedBoard) -> None:
    with board.connect(timeouts=FAST, limits=Limits(output_bytes=1 << 20)) as c:
        start = time.monotonic()
        with pytest.raises(BoardError) as err:
            c.run(["sh", "-c", "yes | head -c 50000000"])
        assert "more than 1048576 bytes" in str(err.value)
        assert ended_within(start)
        assert c.run(["echo", "ok"]).out == "ok\n"  # the connection is still usable


def test_pull_round_trip_still_skips_identical_files(conn: BoardConnection, remote_tmp: str, tmp_path: Path) -> None:
    src = _result_dir(conn, remote_tmp.rsplit("/", 1)[-1] + "/res")
    back = tmp_path / "back"
    first = pull(conn, src, back)
    assert first.files_sent == 2 and (back / "outputs" / "a.npy").read_text() == "x\n"
    (back / "stale.txt").write_text("not on the board")
    again = pull(conn, src, back)
    assert (again.files_sent, again.files_skipped) == (0, 2)
    assert sorted(p.relative_to(back).as_posix() for p in back.rglob("*")) == ["outputs", "outputs/a.npy", "run.json"]
    assert _untouched_parent(tmp_path) == ["back"]
    assert oct(os.stat(back).st_mode & 0o777) != "0o700"  # not left with mkdtemp's private mode
