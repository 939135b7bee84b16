"""`rkdet deploy` against the emulated RK3588: the verdict, the results folder, a restored board, and a
repeat deploy that sends nothing; then `rkdet board info|pin|restore` by hand on the same board."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from deploy_helpers import assert_untouched, board_args, deploy, rkdet, run_folders

from rkdet.emulator.sshd import EmulatedBoard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plain_words import html_visible_text, python_spellings  # noqa: E402
from rkdet.emulator.fake_tree import tree_digest


@pytest.mark.slow
def test_deploy_happy_path_then_repeat_sends_nothing(board: EmulatedBoard, default_build: Path, tmp_path: Path) -> None:
    before = tree_digest(board.root)
    out = tmp_path / "results"
    proc = deploy(board, default_build, out, repeats=3, warmup=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SAME (bitwise)" in proc.stderr and "EMULATED" in proc.stderr
    assert_untouched(board, before)

    [folder] = run_folders(out)
    assert folder.parent.name == json.loads((default_build / "manifest.json").read_text())["fingerprint"][:16]
    for name in ("deploy.json", "board.json", "pin.json", "report.json", "report.html", "job.log",
                 "result/run.json", "result/index.jsonl"):
        assert (folder / name).is_file(), name
    record = json.loads((folder / "deploy.json").read_text())
    assert record["status"] == "complete" and record["restored"] is True and record["job_exit"] == 0
    assert record["emulated"] is True and record["diff_exit"] == 0
    assert record["reference"].endswith("golden/onnx-fp32")
    assert record["verdict"].startswith("SAME (bitwise)")
    run = json.loads((folder / "result" / "run.json").read_text())
    assert run["emulated"] is True
    pages = sorted(p.stem for p in (default_build / "golden" / "inputs").glob("*.npy"))
    assert sorted(i["name"] for i in run["inputs"]) == pages
    index = [json.loads(line) for line in (folder / "result" / "index.jsonl").read_text().splitlines()]
    assert len(index) == 3 * len(pages)
    report = json.loads((folder / "report.json").read_text())
    assert report["same"] is True and report["exit_code"] == 0 and report["mode"] == "a-vs-b"
    for entry in report["sets"]["A"]["inputs"]:
        assert entry["distinct"] == 1
        for output in entry["outputs"]:  # every output of every run equals the ONNX FP32 golden bit for bit
            assert output["distinct"] == 1 and output["first_hash"] == output["reference_hash"]
    assert "<html" in (folder / "report.html").read_text()[:2000].lower()
    # the demo's reports say "not set", "yes"/"no", never None/True/False/[]/'repr' (issue 36 §2)
    for text in (proc.stderr, html_visible_text((folder / "report.html").read_text())):
        assert python_spellings(text) == [], python_spellings(text)
    probe = json.loads((folder / "board.json").read_text())["records"]
    assert [r["soc"] for r in probe if r.get("record") == "soc"] == ["rk3588"]
    pin = json.loads((folder / "pin.json").read_text())
    scripts = {r.get("script") for r in pin["records"]}
    assert {"pin", "restore"} <= scripts
    first = record["transfer"]
    assert first["bytes_sent"] > (default_build / "model.rknn").stat().st_size

    # the same build again: every file is already on the board with the right sha256
    proc2 = deploy(board, default_build, out, repeats=1)
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    assert_untouched(board, before)
    second = json.loads((run_folders(out)[-1] / "deploy.json").read_text())["transfer"]
    assert second["bytes_sent"] == 0 and second["files_sent"] == 0
    assert second["files_skipped"] == first["files_sent"] + first["files_skipped"]


def test_board_info_pin_restore(board: EmulatedBoard, tmp_path: Path) -> None:
    before = tree_digest(board.root)
    conn = board_args(board)
    info = rkdet(["board", "info", *conn])
    assert info.returncode == 0, info.stderr
    records = json.loads(info.stdout)["records"]
    assert [r["soc"] for r in records if r.get("record") == "soc"] == ["rk3588"]
    assert tree_digest(board.root) == before  # probing changes nothing

    pin = rkdet(["board", "pin", *conn])
    assert pin.returncode == 0, pin.stderr
    pinned = tree_digest(board.root)
    changed = {k for k in before if pinned.get(k) != before[k]}
    assert any(k.endswith("scaling_governor") for k in changed), sorted(changed)
    assert any("npu" in k and k.endswith("min_freq") for k in changed), sorted(changed)

    again = rkdet(["board", "pin", *conn])  # a second pin keeps the ORIGINAL values for restore
    assert again.returncode == 0, again.stderr

    restore = rkdet(["board", "restore", *conn])
    assert restore.returncode == 0, restore.stderr
    assert_untouched(board, before)
    idle = rkdet(["board", "restore", *conn])  # idempotent: nothing left to restore
    assert idle.returncode == 0, idle.stderr
    assert tree_digest(board.root) == before
