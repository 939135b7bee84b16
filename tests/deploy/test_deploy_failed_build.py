"""A build that failed a gate at convert never passes for a good one (issue 24 §1): deploy, fleet deploy and
`deploy --install-selfcheck` refuse it in one line naming the build and the gate (exit 2, before any board
work) unless --allow-failed-build; with it, every verdict line (terminal, report.json/html, deploy.json
warnings) says the build failed its gates.

The failed build is the session's default build with its manifest's `gates` record saying the decision
gate failed, as convert writes it into a `--keep-failed` folder (tests/convert/test_failed_builds.py checks
convert writes that record, with real tiny builds)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_helpers import REPO, board_args, error_line, run_folders

from rkdet.emulator.sshd import EmulatedBoard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plain_words import html_visible_text, python_spellings  # noqa: E402

MESSAGE = "rk3588: fidelity gate failed: decision agreement 0.14 (11/77 detections agree), below the limit 0.9"


@pytest.fixture(scope="module")
def failed_build(fast_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("failed") / f"{fast_build.name}.failed"
    shutil.copytree(fast_build, dest)
    doc = json.loads((dest / "manifest.json").read_text())
    doc["gates"] = {"schema": "rkdet.gates/1", "passed": False, "failed_gate": "decision", "subject": None,
                    "message": MESSAGE}
    (dest / "manifest.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return dest


def rkdet(args: list[str]) -> subprocess.CompletedProcess:
    """The real CLI with wide lines (a verdict line is one line, as a log reader greps it)."""
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300, env={**os.environ, "COLUMNS": "1000"})


def _deploy(board: EmulatedBoard, build: Path, out: Path, *extra: str):
    return rkdet(["deploy", *board_args(board), "--build", str(build), "--out", str(out), "--repeats", "1",
                  "--warmup", "0", "--no-pin", *extra])


@pytest.mark.parametrize("extra, what", [((), "deploy refuses"),
                                         (("--install-selfcheck",), "deploy --install-selfcheck refuses")])
def test_deploy_refuses_a_failed_build(board: EmulatedBoard, failed_build: Path, tmp_path: Path, extra, what) -> None:
    proc = _deploy(board, failed_build, tmp_path / "r", *extra)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = error_line(proc)
    assert str(failed_build) in line and "failed the decision gate" in line and what in line
    assert "--allow-failed-build" in line and MESSAGE in line
    assert "preflight" not in proc.stderr and not run_folders(tmp_path / "r")  # nothing touched the board


def test_fleet_deploy_refuses_a_failed_build(board: EmulatedBoard, failed_build: Path, tmp_path: Path) -> None:
    proc = rkdet(["fleet", "deploy", "--board", board.target, "--user", board.user, "--identity",
                  str(board.identity_file), "--known-hosts", str(board.known_hosts_file), "--ssh-config", "/dev/null",
                  "--build", str(failed_build), "--out", str(tmp_path / "r"), "--repeats", "1", "--warmup", "0",
                  "--no-pin"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = error_line(proc)
    assert str(failed_build) in line and "failed the decision gate" in line and "fleet deploy refuses" in line
    assert not (tmp_path / "r").exists() or not run_folders(tmp_path / "r")


def test_allowed_failed_build_says_so_on_every_verdict_line(board: EmulatedBoard, failed_build: Path,
                                                            tmp_path: Path) -> None:
    proc = _deploy(board, failed_build, tmp_path / "r", "--allow-failed-build", "--install-selfcheck")
    assert proc.returncode == 0, proc.stderr[-3000:]
    caveat = f"build {failed_build.name} FAILED its gates (the decision gate)"
    text = " ".join(proc.stderr.split())
    verdicts = [ln for ln in proc.stderr.splitlines() if ln.startswith(("repeatable:", "agrees", "SAME", "DIFFERENT"))]
    assert len(verdicts) >= 3, proc.stderr[-3000:]
    assert all("FAILED its gates" in ln for ln in verdicts), verdicts
    assert f"warning: {caveat}" in text
    assert "self-check installed" in text  # allowed: the self-check of the failed build installs too
    [folder] = run_folders(tmp_path / "r")
    record = json.loads((folder / "deploy.json").read_text())
    assert record["warnings"][0].startswith(caveat) and caveat in record["verdict"]
    report = json.loads((folder / "report.json").read_text())
    assert caveat in report["build_failed_gates"] and caveat in report["verdict"]
    assert caveat in report["agrees"]["caveat"] and caveat in report["repeatable"]["caveat"]
    html = (folder / "report.html").read_text()
    assert html.count("FAILED its gates") >= 3
    # what a reader sees of a failed build's deploy says no None/True/False/[]/'repr' (issue 36 §2)
    for text in (proc.stderr, html_visible_text(html)):
        assert python_spellings(text) == [], python_spellings(text)


def test_fleet_deploy_of_an_allowed_failed_build_says_so(board: EmulatedBoard, failed_build: Path,
                                                         tmp_path: Path) -> None:
    proc = rkdet(["fleet", "deploy", "--board", board.target, "--user", board.user, "--identity",
                  str(board.identity_file), "--known-hosts", str(board.known_hosts_file), "--ssh-config", "/dev/null",
                  "--build", str(failed_build), "--out", str(tmp_path / "r"), "--repeats", "1", "--warmup", "0",
                  "--no-pin", "--allow-failed-build", "--json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    caveat = f"build {failed_build.name} FAILED its gates (the decision gate)"
    fleet = json.loads(proc.stdout)
    assert caveat in json.dumps(fleet["verdict"]), fleet.get("verdict")
    assert caveat in " ".join(proc.stderr.split())
    [folder] = run_folders(tmp_path / "r")
    assert caveat in json.loads((folder / "deploy.json").read_text())["verdict"]
