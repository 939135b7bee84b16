"""Big streams through OpenSSH's client over a ControlMaster (rkdet.link.openssh): used once a connection
keeps moving big files, as verified and as strict as the paramiko path, ended with the connection."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import paramiko
import pytest

import rkdet.link.ssh as ssh_module
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import EXIT_BOARD, BoardError
from rkdet.link import openssh
from rkdet.link.openssh import OpenSshStreams
from rkdet.link.pull import pull
from rkdet.link.ssh import BoardConnection, Timeouts
from rkdet.link.target import Target
from rkdet.link.transfer import STREAM_VERIFY_MIN_BYTES, push

FAST = Timeouts(connect=5, banner=5, auth=5, command=60, keepalive=5)


def _gone(pid: int, wait: float = 5.0) -> bool:
    """The process ended (absent, or a zombie its new parent has not reaped yet), within `wait` s."""
    import time

    deadline = time.monotonic() + wait
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def _board_sha(conn: BoardConnection, path: str) -> str:
    return conn.run(["sh", "-c", 'sha256sum < "$1"', "sh", path]).out.split()[0]


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The commands that went through OpenSSH's client (for streams from 4 MiB, not 32: cheaper files)."""
    monkeypatch.setattr(ssh_module, "OPENSSH_MIN_BYTES", STREAM_VERIFY_MIN_BYTES)
    seen: list[str] = []
    real = OpenSshStreams.stream

    def spy(self: OpenSshStreams, command: str, **kw):  # type: ignore[no-untyped-def]
        seen.append(command)
        return real(self, command, **kw)

    monkeypatch.setattr(OpenSshStreams, "stream", spy)
    return seen


def test_a_connection_that_keeps_moving_big_files_moves_them_through_openssh(
        board: EmulatedBoard, tmp_path: Path, streamed: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from rkdet.link.transfer import _HashingReader

    monkeypatch.setattr(ssh_module, "OPENSSH_AFTER_BYTES", STREAM_VERIFY_MIN_BYTES + 1)
    fed: list[int] = []  # bytes the push read through Python
    real_read = _HashingReader.read
    monkeypatch.setattr(_HashingReader, "read", lambda self, n=-1: fed.append(len(d := real_read(self, n))) or d)
    big = tmp_path / "model.rknn"
    big.write_bytes(os.urandom(STREAM_VERIFY_MIN_BYTES + 1))
    want = hashlib.sha256(big.read_bytes()).hexdigest()
    with board.connect(timeouts=FAST) as c:
        dest = c.abspath("~/bulk")
        push(c, big, f"{dest}/a.rknn")  # the first big file: paramiko, no master started for it
        assert streamed == [] and c._openssh is None  # noqa: SLF001
        fed.clear()
        push(c, big, f"{dest}/b.rknn")  # the connection has moved enough: the master starts, the bytes go through it
        got = pull(c, f"{dest}/b.rknn", tmp_path / "back.rknn")
        assert len(streamed) == 2 and 'cat > "$1"' in streamed[0] and streamed[1].startswith("cat ")
        assert sum(fed) == 0  # the client read the pushed file itself: nothing went through Python
        assert _board_sha(c, f"{dest}/b.rknn") == want and got.bytes_sent == big.stat().st_size
        assert hashlib.sha256((tmp_path / "back.rknn").read_bytes()).hexdigest() == want
        streams = c._openssh  # noqa: SLF001
        assert streams is not None and streams.master_pid is not None
        pid, folder = streams.master_pid, streams._dir  # noqa: SLF001
        assert folder is not None and folder.is_dir()
        c.run(["rm", "-rf", dest])
    # the connection's close ends the master and removes its folder (socket, pinned known_hosts)
    assert _gone(pid) and not folder.exists()


def test_a_changed_byte_is_refused_on_the_openssh_path_both_ways(
        board: EmulatedBoard, tmp_path: Path, streamed: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The client reads the pushed file itself (no copy through Python), so the change is made where
    the bytes land: the board's receiving script stores one byte more than it received."""
    from rkdet.link import transfer

    monkeypatch.setattr(ssh_module, "OPENSSH_AFTER_BYTES", 0)
    big = tmp_path / "model.rknn"
    big.write_bytes(os.urandom(STREAM_VERIFY_MIN_BYTES + 3))
    real_receive = transfer._RECEIVE
    with board.connect(timeouts=FAST) as c:
        dest = c.abspath("~/bulk-bad")
        monkeypatch.setattr(transfer, "_RECEIVE", real_receive.replace('cat > "$1"', '{ printf Z; cat; } > "$1"'))
        with pytest.raises(BoardError, match="model.rknn arrived corrupted") as info:
            push(c, big, f"{dest}/model.rknn")
        assert info.value.exit_code == EXIT_BOARD and len(streamed) == 1
        assert c.run(["find", dest, "-type", "f"]).out.strip() == ""  # nothing landed, no temp file
        monkeypatch.setattr(transfer, "_RECEIVE", real_receive)
        push(c, big, f"{dest}/model.rknn")
        # the pull: the board lies about the file's hash (it changed between hash and read)
        monkeypatch.setattr("rkdet.link.pull.remote_hashes", lambda conn, paths, mkdirs=(): ["0" * 64] * len(paths))
        with pytest.raises(BoardError, match="arrived corrupted during the pull"):
            pull(c, f"{dest}/model.rknn", tmp_path / "back.rknn")
        assert len(streamed) == 3 and not (tmp_path / "back.rknn").exists()
        assert not list(tmp_path.glob(".back.rknn*"))
        c.run(["rm", "-rf", dest])


def test_openssh_refuses_a_host_key_other_than_the_one_paramiko_verified(
        board: EmulatedBoard, tmp_path: Path, streamed: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The master pins the key the connection verified (StrictHostKeyChecking=yes, BatchMode): another
    key is refused, and the connection stays on paramiko, still verified."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = paramiko.Ed25519Key(filename=str(tmp_path / "other"))
    with board.connect(timeouts=FAST) as c:
        wrong = OpenSshStreams(c.target, other, 10)
        assert not wrong.start() and "Host key verification failed" in wrong.why_not
        assert wrong.master_pid is None and wrong._dir is None  # noqa: SLF001  # nothing left behind
        right = OpenSshStreams(c.target, c.transport.get_remote_server_key(), 10)
        assert right.start()
        right.close()
        monkeypatch.setattr(ssh_module, "OPENSSH_AFTER_BYTES", 0)
        monkeypatch.setattr(c.transport, "get_remote_server_key", lambda: other)
        big = tmp_path / "model.rknn"
        big.write_bytes(os.urandom(STREAM_VERIFY_MIN_BYTES))
        push(c, big, c.abspath("~/bulk-key/model.rknn"))
        assert streamed == [] and c._openssh is None  # noqa: SLF001
        assert _board_sha(c, c.abspath("~/bulk-key/model.rknn")) == hashlib.sha256(big.read_bytes()).hexdigest()
        c.run(["rm", "-rf", c.abspath("~/bulk-key")])


def test_only_a_direct_key_file_connection_uses_openssh(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("a key file")
    base = dict(name="b", hostname="127.0.0.1", port=2222, user="u")
    assert openssh.available(Target(**base, identities=(key,)))
    assert not openssh.available(Target(**base))  # agent or default keys: paramiko's choice, not repeatable here
    assert not openssh.available(Target(**base, identities=(tmp_path / "missing",)))
    assert not openssh.available(Target(**base, identities=(key,), proxy_jump="jump"))


def test_a_stream_through_openssh_is_bounded_and_a_dead_master_is_one_line(board: EmulatedBoard) -> None:
    import time

    with board.connect(timeouts=FAST) as c:
        streams = OpenSshStreams(c.target, c.transport.get_remote_server_key(), 10)
        assert streams.start()
        try:
            t0 = time.monotonic()
            with pytest.raises(BoardError, match="`sleep` timed out after 0.5 s"):  # as paramiko's path says it
                streams.stream("sleep 30", stdout=None, stderr=None, stdin=None, deadline=time.monotonic() + 0.5,
                               on_send=None, label=c.target.label, what="sleep", limit=0.5)
            assert time.monotonic() - t0 < 10
            out = bytearray()
            assert streams.stream("echo hi; exit 4", stdout=out.extend, stderr=None, stdin=None,
                                  deadline=time.monotonic() + 30, on_send=None, label=c.target.label, what="echo",
                                  limit=30) == 4
            assert bytes(out) == b"hi\n"
            pid = streams.master_pid
            assert pid is not None
            os.kill(pid, 9)  # the master is gone: the client may not connect on its own (ProxyCommand=false)
            while streams.master_pid is not None:
                time.sleep(0.01)
            with pytest.raises(BoardError, match="connection lost during `echo`"):
                streams.stream("echo hi", stdout=None, stderr=None, stdin=None, deadline=time.monotonic() + 30,
                               on_send=None, label=c.target.label, what="echo", limit=30)
        finally:
            streams.close()


def test_the_master_ends_by_itself_when_idle_and_an_idle_one_is_replaced(
        board: EmulatedBoard, monkeypatch: pytest.MonkeyPatch) -> None:
    """A master nobody uses ends on its own (ControlPersist: a killed rkdet leaves nothing running for
    longer); one near its idle limit is replaced before a stream instead of racing its timer."""
    import time

    monkeypatch.setattr(openssh, "MASTER_IDLE_S", 3)
    with board.connect(timeouts=FAST) as c:
        streams = OpenSshStreams(c.target, c.transport.get_remote_server_key(), 10)
        assert streams.start()
        folder = streams._dir  # noqa: SLF001
        pid = streams.master_pid
        assert pid is not None and folder is not None
        deadline = time.monotonic() + 20  # (not `master_pid` in the loop: `ssh -O check` is a client, it resets the timer)
        while streams._control.exists() and time.monotonic() < deadline:  # noqa: SLF001  # the master removes it as it ends
            time.sleep(0.1)
        assert streams.master_pid is None and not streams.ready()  # ended by itself; closed, folder removed
        assert _gone(pid) and not folder.exists()
    monkeypatch.setattr(openssh, "MASTER_IDLE_S", 30)
    monkeypatch.setattr(openssh, "_RESTART_IDLE_S", 0)
    monkeypatch.setattr(ssh_module, "OPENSSH_AFTER_BYTES", 0)
    monkeypatch.setattr(ssh_module, "OPENSSH_MIN_BYTES", STREAM_VERIFY_MIN_BYTES)
    with board.connect(timeouts=FAST) as c:
        first = c.bulk_streams(STREAM_VERIFY_MIN_BYTES)
        assert first is not None
        old = first.master_pid
        second = c.bulk_streams(STREAM_VERIFY_MIN_BYTES)  # idle past the (patched) limit: a new master
        assert second is not None and second is not first and second.master_pid not in (None, old)
        assert old is not None and _gone(old)


def test_an_unclosed_master_is_ended_when_its_object_goes(board: EmulatedBoard) -> None:
    import gc

    with board.connect(timeouts=FAST) as c:
        streams = OpenSshStreams(c.target, c.transport.get_remote_server_key(), 10)
        assert streams.start()
        folder, pid = streams._dir, streams.master_pid  # noqa: SLF001
        assert folder is not None and pid is not None
        del streams
        gc.collect()
        assert _gone(pid) and not folder.exists()
