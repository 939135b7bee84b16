"""What a pull survived is said the same way by every command that pulls: a pull whose SFTP session ended under it
fetches the file again over exec (still sha256-checked) and says so; deploy said it as a warning, and now so do
`rkdet audit pull` and the board bisection (`rkdet layers --board`), through one place (rkdet/deploy/pulled.py)
and one printer (rkdet/cli/warn.py). The board and the link are real; the SFTP session is ended by closing its
socket, as a board's sftp-server going away does."""

from __future__ import annotations

import ast
from pathlib import Path

from click.testing import CliRunner

import rkdet.link.connect as connect_module
from rkdet.bisection.on_board import BoardRunner
from rkdet.cli import main
from rkdet.deploy.pulled import pull_noted
from rkdet.deploy.settings import RunSettings
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.layers.report import BisectionReport
from rkdet.link.ssh import BoardConnection, Timeouts

FAST = Timeouts(connect=5, banner=5, auth=5, command=60, keepalive=5)

REPO = Path(__file__).resolve().parents[2]


def _remote_files(conn: BoardConnection, remote: str) -> None:
    conn.run(["sh", "-c", 'printf "a\\033[2J" > "$1/one" && head -c 70000 /dev/urandom > "$1/two"', "sh", remote])


def _ended(conn: BoardConnection) -> BoardConnection:
    sftp = conn.sftp()
    assert sftp is not None
    sftp.sock.close()  # the session ends; the connection stays
    return conn


def test_pull_noted_adds_what_the_pull_survived_to_the_warnings(board: EmulatedBoard, remote_tmp: str,
                                                                tmp_path: Path) -> None:
    with board.connect(timeouts=FAST) as own:  # its own connection: the session's shared one keeps its SFTP
        _remote_files(own, remote_tmp)
        warnings: list[str] = ["earlier warning"]
        stats = pull_noted(_ended(own), remote_tmp, tmp_path / "back", warnings)
    assert stats.files_sent == 2 and (tmp_path / "back" / "two").stat().st_size == 70000
    assert warnings[0] == "earlier warning" and len(warnings) == 2, warnings
    assert "SFTP session ended" in warnings[1] and "fetched again over exec (sha256 checked)" in warnings[1]
    assert own.target.label in warnings[1]


def test_audit_pull_says_the_sftp_fallback_as_a_warning(board: EmulatedBoard, conn: BoardConnection, remote_tmp: str,
                                                       tmp_path: Path, monkeypatch) -> None:
    _remote_files(conn, remote_tmp)
    real = connect_module.open_connection
    monkeypatch.setattr(connect_module, "open_connection", lambda options: _ended(real(options)))
    args = ["--board", board.target, "--user", board.user, "--identity", str(board.identity_file),
            "--known-hosts", str(board.known_hosts_file), "--ssh-config", "/dev/null"]
    done = CliRunner().invoke(main, ["audit", "pull", *args, "--remote", remote_tmp, "--out", str(tmp_path / "o")],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    said = [ln for ln in done.output.splitlines() if ln.startswith("warning: ")]
    assert len(said) == 1 and "SFTP session ended" in said[0] and "fetched again over exec" in said[0], done.output
    assert "pulled 2 files" in done.output


def test_the_bisection_keeps_what_its_pulls_survived_for_its_report(board: EmulatedBoard, remote_tmp: str,
                                                                     tmp_path: Path) -> None:
    with board.connect(timeouts=FAST) as own:
        _remote_files(own, remote_tmp)
        runner = BoardRunner(_ended(own), tmp_path, None, tmp_path, RunSettings())  # type: ignore[arg-type]
        runner.pull_result(remote_tmp, tmp_path / "cut-0")  # (the manifest is not read by a pull)
    assert len(runner.notes) == 1 and "SFTP session ended" in runner.notes[0]
    report = BisectionReport("b", "board", "simulator", "f" * 64, "t", "tol", 1, 2, None, None, None, [], 1, 0, 0,
                             warnings=list(runner.notes))
    assert report.to_json()["warnings"] == runner.notes  # layers-board.json keeps them; the command says them


def test_every_pull_outside_the_link_goes_through_the_one_place() -> None:
    """rkdet.link.pull is imported only by rkdet/deploy/pulled.py, so no command pulls without saying what the
    pull survived (deploy's result pull in rkdet/deploy/collect.py included)."""
    importers = []
    for path in sorted((REPO / "rkdet").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("rkdet/link/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "rkdet.link.pull" and any(
                    a.name == "pull" for a in node.names):
                importers.append(rel)
    assert sorted(set(importers)) == ["rkdet/deploy/pulled.py"], importers
