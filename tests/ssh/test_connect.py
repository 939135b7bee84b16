"""Connecting: strict host keys, auth failures, refused/silent ports, ssh_config and ProxyJump."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rkdet.emulator.sshd import EmulatedBoard, free_port
from rkdet.link.ssh import BoardConnection, Timeouts
from rkdet.link.target import parse_board, resolve_target
from rkdet.errors import EXIT_BOARD, BoardError, InputError
from bounds import ended_within

FAST = Timeouts(connect=5, banner=5, auth=5, command=60, keepalive=5)


def _openssh_fingerprint(pub: Path) -> str:
    """What `ssh-keygen -l` says (the reference our message must match)."""
    return subprocess.run(["ssh-keygen", "-l", "-f", str(pub)], capture_output=True, text=True,
                          check=True).stdout.split()[1]


def test_unknown_host_key_is_refused_with_openssh_fingerprint(board: EmulatedBoard, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    with pytest.raises(BoardError) as info:
        board.connect(known_hosts=empty, timeouts=FAST)
    msg = str(info.value)
    assert info.value.exit_code == EXIT_BOARD
    assert _openssh_fingerprint(board.workdir / "ssh_host_ed25519_key.pub") in msg
    assert "unknown host key" in msg and "--accept-new-host-key" in msg and "\n" not in msg
    assert not empty.exists()  # nothing recorded without accept-new


def test_accept_new_records_key_then_strict_connect_passes(board: EmulatedBoard, tmp_path: Path) -> None:
    known = tmp_path / "cfg" / "known_hosts"
    with board.connect(known_hosts=known, accept_new_host_key=True, timeouts=FAST) as c:
        assert c.run(["id", "-un"]).out.strip() == board.user
    line = known.read_text().strip()
    host_pub = (board.workdir / "ssh_host_ed25519_key.pub").read_text().split()
    assert line.split() == [f"[127.0.0.1]:{board.port}", host_pub[0], host_pub[1]]
    with board.connect(known_hosts=known, accept_new_host_key=False, timeouts=FAST) as c:
        assert c.run(["true"]).rc == 0
    assert known.read_text().count("\n") == 1  # not recorded twice


def test_changed_host_key_is_always_refused(board: EmulatedBoard, tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    keytype, data = (tmp_path / "other.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{board.port} {keytype} {data}\n")
    for accept_new in (False, True):
        with pytest.raises(BoardError) as info:
            board.connect(known_hosts=known, accept_new_host_key=accept_new, timeouts=FAST)
        assert "HOST KEY CHANGED" in str(info.value)
        assert _openssh_fingerprint(board.workdir / "ssh_host_ed25519_key.pub") in str(info.value)
        assert info.value.exit_code == EXIT_BOARD
    assert known.read_text().count("\n") == 1


def test_system_known_hosts_is_read(board: EmulatedBoard, tmp_path: Path) -> None:
    with board.connect(known_hosts=tmp_path / "rkdet_known", system_known_hosts=board.known_hosts_file,
                       timeouts=FAST) as c:
        assert c.run(["true"]).rc == 0


def test_wrong_client_key_is_auth_failure(board: EmulatedBoard, tmp_path: Path) -> None:
    wrong = tmp_path / "id_wrong"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    with pytest.raises(BoardError) as info:
        board.connect(identity=wrong, timeouts=FAST)
    assert info.value.exit_code == EXIT_BOARD
    assert "authentication failed" in str(info.value) and f"{board.user}@127.0.0.1:{board.port}" in str(info.value)


def test_missing_identity_file_is_bad_input(board: EmulatedBoard, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="identity file .* not found"):
        board.connect(identity=tmp_path / "nope")


def test_refused_port_is_board_error(tmp_path: Path) -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(BoardError, match="connection refused") as info:
        BoardConnection.open(f"127.0.0.1:{port}", user="x", known_hosts=tmp_path / "k", system_known_hosts=None,
                             ssh_config=None, allow_agent=False, timeouts=FAST)
    assert info.value.exit_code == EXIT_BOARD and f"127.0.0.1:{port}" in str(info.value)
    assert ended_within(t0)  # refused at once, not after a timeout of its own


def test_silent_host_times_out_on_banner(tmp_path: Path) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(srv.accept()[0]), daemon=True).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(BoardError, match="no SSH banner within 0.5 s") as info:
            BoardConnection.open(f"127.0.0.1:{port}", user="x", known_hosts=tmp_path / "k", system_known_hosts=None,
                                 ssh_config=None, allow_agent=False,
                                 timeouts=Timeouts(connect=2, banner=0.5, auth=2, command=5))
        assert info.value.exit_code == EXIT_BOARD
        assert ended_within(t0, 0.5)
    finally:
        for s in accepted:
            s.close()
        srv.close()


def test_ssh_config_alias_resolves_everything(board: EmulatedBoard) -> None:
    target = resolve_target(board.alias, ssh_config=board.ssh_config_file)
    assert (target.hostname, target.port, target.user) == ("127.0.0.1", board.port, board.user)
    assert target.identities == (board.identity_file,) and target.known_hosts == (board.known_hosts_file,)
    with BoardConnection.open(board.alias, ssh_config=board.ssh_config_file, known_hosts=board.workdir / "unused",
                              allow_agent=False, timeouts=FAST) as c:
        assert c.run(["id", "-un"]).out.strip() == board.user
    # explicit values win over the config
    assert resolve_target(f"someone@{board.alias}:2222", ssh_config=board.ssh_config_file).port == 2222
    assert resolve_target(board.alias, user="other", ssh_config=board.ssh_config_file).user == "other"


def test_proxy_jump_through_a_board(board: EmulatedBoard, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(board.ssh_config_file.read_text() +
                   f"Host behind\n  HostName 127.0.0.1\n  Port {board.port}\n  User {board.user}\n"
                   f"  IdentityFile {board.identity_file}\n  UserKnownHostsFile {board.known_hosts_file}\n"
                   f"  ProxyJump {board.alias}\n")
    with BoardConnection.open("behind", ssh_config=cfg, known_hosts=tmp_path / "k", allow_agent=False,
                              timeouts=FAST) as c:
        assert c.run(["id", "-un"]).out.strip() == board.user
        assert len(c._jumps) == 1


@pytest.mark.parametrize("text,expected", [
    ("board", (None, "board", None)), ("root@10.0.0.5:2222", ("root", "10.0.0.5", 2222)),
    ("[fe80::1]:22", (None, "fe80::1", 22)), ("fe80::1", (None, "fe80::1", None)),
])
def test_parse_board(text: str, expected: tuple) -> None:
    assert parse_board(text) == expected


@pytest.mark.parametrize("bad", ["host:0", "host:99999", "host:x", "@host", ""])
def test_parse_board_rejects(bad: str) -> None:
    with pytest.raises(InputError):
        parse_board(bad)
