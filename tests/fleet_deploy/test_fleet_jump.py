"""Issue 22: a board behind a jump host deploys through it, with `ansible_become: true` meaning sudo.

The lab: a network namespace this test makes and holds with a process (unique names, removed after) with a veth pair to the
host. The jump board's sshd listens on the namespace's veth address (the host reaches it); the target
board's sshd listens on the namespace's own loopback, which only processes inside the namespace (the
jump board) reach. The inventory is INI, written as an Ansible user writes it: ProxyJump in
ansible_ssh_common_args, the jump host's key and known_hosts in an ssh_config, as OpenSSH would use.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import BoardError
from tests.fleet_deploy.fleet_helpers import rkdet


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture()
def netns() -> Iterator[tuple[str, str]]:
    """(network namespace path, its veth address): a namespace held by a process of this test (not
    `ip netns add`, which leaves a /run/netns mount on the host), removed with it; only what it made."""
    tag = secrets.token_hex(3)
    host_if, ns_if = f"rkdj{tag}h", f"rkdj{tag}n"
    net = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(256)}"
    holder = subprocess.Popen(["unshare", "--net", "--", "sleep", "infinity"], stdin=subprocess.DEVNULL)
    path = f"/proc/{holder.pid}/ns/net"
    try:
        deadline = time.monotonic() + 30
        while os.readlink(path) == os.readlink("/proc/self/ns/net"):  # until unshare has made it
            assert time.monotonic() < deadline and holder.poll() is None, "unshare --net did not start"
            time.sleep(0.02)
        inside = ["nsenter", f"--net={path}", "--", "ip"]
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", str(holder.pid))
        _ip("addr", "add", f"{net}.1/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        subprocess.run([*inside, "addr", "add", f"{net}.2/30", "dev", ns_if], check=True, capture_output=True, timeout=30)
        subprocess.run([*inside, "link", "set", ns_if, "up"], check=True, capture_output=True, timeout=30)
        subprocess.run([*inside, "link", "set", "lo", "up"], check=True, capture_output=True, timeout=30)
        yield path, f"{net}.2"
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)
        holder.kill()
        holder.wait(timeout=30)


def _refused(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return False
    except OSError:
        return True


def test_a_board_behind_a_jump_host_deploys_through_it_with_sudo(netns: tuple[str, str], tmp_path: Path,
                                                                   build_args: list[str]) -> None:
    name, veth = netns
    with EmulatedBoard("rk3588", tmp_path / "jump", netns=name, listen=veth) as jump, \
            EmulatedBoard("rk3588", tmp_path / "target", "sudo", netns=name, listen="127.0.0.1") as target:
        known = tmp_path / "known_hosts"
        known.write_text(jump.known_hosts_file.read_text() + target.known_hosts_file.read_text())
        # reachable only through the jump board: not on the host's loopback, not on the namespace's veth
        assert _refused("127.0.0.1", target.port) and _refused(veth, target.port)
        with pytest.raises(BoardError):
            target.connect(known_hosts=known, timeouts=None).close()
        ssh_config = tmp_path / "ssh_config"
        ssh_config.write_text(f"Host jumpbox\n  HostName {veth}\n  Port {jump.port}\n  User {jump.user}\n"
                              f"  IdentityFile {jump.identity_file}\n  IdentitiesOnly yes\n"
                              f"  UserKnownHostsFile {known}\n")
        inventory = tmp_path / "hosts.ini"
        inventory.write_text(
            "[rk3588]\n"
            f"board1 ansible_host=127.0.0.1 ansible_port={target.port} ansible_user={target.user} "
            f"ansible_ssh_private_key_file={target.identity_file} rkdet_soc=rk3588\n"
            "[rk3588:vars]\nansible_become=true\nansible_ssh_common_args='-o ProxyJump=jumpbox'\n")
        hosts = rkdet(["fleet", "hosts", "--inventory", inventory, "--json"])
        assert hosts.returncode == 0, hosts.stderr
        (rec,) = json.loads(hosts.stdout)["boards"]
        assert (rec["proxy_jump"], rec["sudo"]) == ("jumpbox", True)
        out = tmp_path / "out"
        proc = rkdet(["fleet", "deploy", "--inventory", inventory, "--known-hosts", known, "--ssh-config", ssh_config,
                      *build_args, "--out", out, "--repeats", "1", "--warmup", "0", "--connect-timeout", "10",
                      "--json"], timeout=900)
        assert proc.returncode == 0, proc.stderr[-4000:]
        doc = json.loads(proc.stdout)
        (board,) = doc["boards"]
        assert board["name"] == "board1" and board["status"] == "complete", board
        runs = [json.loads(p.read_text()) for p in out.rglob("deploy.json")]
        assert runs and all(r["settings"]["sudo"] is True for r in runs)  # ansible_become: true ran with sudo
        log = target.log_file.read_text()
        assert f"Accepted publickey for {target.user} from 127.0.0.1" in log  # it came in from inside the namespace
        assert f"Accepted publickey for {jump.user} from {veth[:-1]}1" in jump.log_file.read_text()
