"""On an emulated board (real OpenSSH sshd on 127.0.0.1): the example serving app serves a few thousand
inferences with the audited RKNNLite, `rkdet audit pull` copies the log over the link, `verify` finds
the chain intact and `report` charts it; a file removed on the board is found after the next pull. The same
for the example C app with the C library (cross-built for aarch64, run on the board under qemu-user)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from rkdet.cli import main
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.link.transfer import push
from rkdet.onboard import program

from audit_app import APP

BUILD = "d" * 64


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> Iterator[EmulatedBoard]:
    b = EmulatedBoard("rk3588", tmp_path_factory.mktemp("audit-board")).start()
    yield b
    b.stop()


def _args(board: EmulatedBoard) -> list[str]:
    return ["--board", board.target, "--user", board.user, "--identity", str(board.identity_file),
            "--known-hosts", str(board.known_hosts_file), "--ssh-config", "/dev/null"]


def _serve(conn, *args: str) -> str:
    """The app as a board gets it: the example and rkdet-onboard.pyz pushed to the board's home, run by the
    board's own python3 (nothing of the checkout is read on the board: a 0700 clone stays unreadable)."""
    with tempfile.TemporaryDirectory(prefix="rkdet-audit-") as tmp:
        push(conn, Path(program.build(tmp)), f"{conn.home}/{program.PROGRAM}")
    push(conn, APP, f"{conn.home}/{APP.name}")
    return conn.run(["python3", f"{conn.home}/{APP.name}", *args],
                    env={"RKDET_ONBOARD_PATH": f"{conn.home}/{program.PROGRAM}"}, timeout=600).out


def test_serve_pull_verify_report_on_an_emulated_board(board, tmp_path):
    with board.connect() as conn:
        log = f"{conn.home}/app-audit"
        conn.run(["rm", "-rf", log])
        served = _serve(conn, "--log", log, "--emulated", "--count", "3000", "--build", BUILD, "--shadow", "0",
                        "--max-file-bytes", "300000")
        assert "served 3000 inferences (emulated-numpy)" in served
    runner = CliRunner()
    out = tmp_path / "pulled"
    pulled = runner.invoke(main, ["audit", "pull", *_args(board), "--remote", log, "--out", str(out)],
                           catch_exceptions=False)
    assert pulled.exit_code == 0, pulled.output
    anchor = tmp_path / "anchor"
    ok = runner.invoke(main, ["audit", "verify", str(out), "--fingerprint", BUILD, "--anchor-file", str(anchor)])
    assert ok.exit_code == 0 and "chain intact, seq 0.." in ok.output, ok.output
    rep = runner.invoke(main, ["audit", "report", str(out), "--fingerprint", BUILD, "--html", str(tmp_path / "r.html")])
    assert rep.exit_code == 0 and "<svg" in (tmp_path / "r.html").read_text()
    with board.connect() as conn:  # the board serves on, and someone removes a file from the middle
        _serve(conn, "--log", log, "--emulated", "--count", "1500", "--build", BUILD, "--max-file-bytes", "300000")
        conn.run(["rm", f"{log}/audit-00000002.jsonl"])
    assert runner.invoke(main, ["audit", "pull", *_args(board), "--remote", log, "--out", str(out)]).exit_code == 0
    bad = runner.invoke(main, ["audit", "verify", str(out), "--fingerprint", BUILD, "--anchor-file", str(anchor)])
    assert bad.exit_code == 1 and "FAIL file-removed" in bad.output and "audit-00000002.jsonl removed" in bad.output


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fleet_pull_over_an_inventory_one_folder_per_board_one_line_per_failure(board, tmp_path):
    from rkdet.fleets.sources.inventory import FleetBoard, write_inventory

    with board.connect() as conn:
        log = f"{conn.home}/fleet-audit"
        conn.run(["rm", "-rf", log])
        assert "served 200 inferences" in _serve(conn, "--log", log, "--emulated", "--count", "200", "--build", BUILD)
    live = dict(address=board.host, port=board.port, user=board.user, key_file=str(board.identity_file),
                known_hosts=str(board.known_hosts_file))
    inventory = write_inventory(tmp_path / "inventory.yaml", [
        FleetBoard(name="lab-good", groups=("serving",), **live),
        FleetBoard(name="lab-gone", address="127.0.0.1", port=_free_port(), user=board.user,  # nothing listens
                   key_file=str(board.identity_file), known_hosts=str(board.known_hosts_file), groups=("serving",)),
        FleetBoard(name="..", groups=("serving",), **live),  # a crafted name: never a folder outside OUT
        FleetBoard(name="spare", groups=("spares",), **live)])
    out = tmp_path / "fleet"
    args = ["audit", "pull", "--inventory", str(inventory), "--remote", log, "--out", str(out),
            "--ssh-config", "/dev/null", "--connect-timeout", "5"]
    runner = CliRunner()
    both = runner.invoke(main, [*args, "--limit", "serving"], catch_exceptions=False)
    assert both.exit_code == 3, both.output
    failures = sorted(ln for ln in both.output.splitlines() if "FAILED" in ln)
    assert len(failures) == 2 and failures[1].startswith("board lab-gone: FAILED: ")
    assert failures[0].startswith("board ..: FAILED: ") and "not a plain folder name" in failures[0]
    assert "pulled 1 of 3 boards" in both.output and "2 failed" in both.output
    assert sorted(p.name for p in out.iterdir()) == ["lab-good"]  # nothing half-written for the failed boards
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet", "inventory.yaml"]  # nothing beside OUT
    ok = runner.invoke(main, ["audit", "verify", str(out / "lab-good"), "--fingerprint", BUILD])
    assert ok.exit_code == 0 and "chain intact" in ok.output, ok.output
    spare = runner.invoke(main, [*args, "--limit", "spare"], catch_exceptions=False)
    assert spare.exit_code == 0 and "pulled 1 of 1 boards" in spare.output, spare.output
    assert sorted(p.name for p in out.iterdir()) == ["lab-good", "spare"]
    none = runner.invoke(main, [*args, "--limit", "nothing-matches"])
    assert none.exit_code == 2 and "matches no group or host" in none.output
    both_sources = runner.invoke(main, [*args, "--board", board.target])
    assert both_sources.exit_code == 2 and "not both" in both_sources.output
    assert runner.invoke(main, ["audit", "pull", "--remote", log, "--out", str(out)]).exit_code == 2


def test_c_app_on_the_board_serves_and_the_host_pulls_verifies_and_charts(board, tmp_path):
    """The C library on the board: the example C app, cross-built for aarch64 here, pushed to the board and
    run there under qemu-user (invoked explicitly, no binfmt); the host reads its log like the Python app's."""
    import subprocess

    from rkdet.emulator.capi_runtime import TARGETS

    compiler, qemu, sysroot = TARGETS["aarch64"]
    c_dir = Path(__file__).resolve().parents[2] / "rkdet" / "onboard" / "c"
    exe = tmp_path / "audit_serving_app.aarch64"
    subprocess.run([compiler, "-std=c99", "-O2", "-pthread", f"-I{c_dir}", str(APP.with_suffix(".c")),
                    str(c_dir / "rkdet_audit.c"), "-lm", "-o", str(exe)], check=True, timeout=120, capture_output=True)
    with board.connect() as conn:
        log, remote_exe = f"{conn.home}/c-app-audit", f"{conn.home}/{exe.name}"
        conn.run(["rm", "-rf", log])
        push(conn, exe, remote_exe)
        served = conn.run([qemu, "-L", sysroot, remote_exe, "--log", log, "--build", BUILD, "--count", "3000",
                           "--max-file-bytes", "300000", "--canary-every", "500", "--background", "4096"],
                          timeout=300).out
        assert "served 3000 inferences (emulated-c); canary failures 0; audit records lost 0" in served
    runner = CliRunner()
    out = tmp_path / "pulled"
    pulled = runner.invoke(main, ["audit", "pull", *_args(board), "--remote", log, "--out", str(out)],
                           catch_exceptions=False)
    assert pulled.exit_code == 0, pulled.output
    ok = runner.invoke(main, ["audit", "verify", str(out), "--fingerprint", BUILD])
    assert ok.exit_code == 0 and "chain intact, seq 0..3012 (canary 7, inference 3000" in ok.output, ok.output
    rep = runner.invoke(main, ["audit", "report", str(out), "--fingerprint", BUILD, "--html", str(tmp_path / "r.html")])
    assert rep.exit_code == 0 and "<svg" in (tmp_path / "r.html").read_text()
