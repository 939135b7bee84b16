"""Deploy and fleet deploy of an imported `.rknn` (issue 23): a file built by rknn-toolkit2 2.3.2 (not rkdet's
2.5.0), imported without its ONNX, on emulated boards.

What is proved: deploy prints both verdict lines, "repeatable" judged as for any build and "agrees" NOT
APPLICABLE with its reason (and so in deploy.json: ok null, applicable false), over core-mask cells and
threaded contexts too; runs are recorded in the history; a fleet over it finds its determinism classes
(a board whose runtime flips a bit is a class of its own) and says agrees is not applicable; an imported
build without a stand-in for the emulated runtime double is refused in one line, and so are `rkdet diff RUN
IMPORTED` (agrees not applicable) and `--install-selfcheck` (no reference outputs to bundle).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from deploy_helpers import REPO, board_args, rkdet, run_folders

from rkdet.emulator.sshd import EmulatedBoard

sys.path.insert(0, str(REPO / "tests" / "convert"))
sys.path.insert(0, str(REPO / "tests" / "fleet_deploy"))
from fleet_helpers import fleet_deploy, lab  # noqa: E402
from tiny_models import foreign_rknn, image_folder, toolkit_cache  # noqa: E402


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    os.environ.setdefault("RKDET_TOOLKIT_CACHE", toolkit_cache())
    work = tmp_path_factory.mktemp("imported")
    rknn, onnx_path = foreign_rknn(work / "src", "2.3.2")
    gold = image_folder(work / "gold", 2, seed=5)
    out = work / "build" / "tiny232"
    proc = rkdet(["import-rknn", rknn, "--inputs", gold, "--channel-order", "rgb", "--out", out,
                  "--emulator-onnx", onnx_path])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _deploy(board: EmulatedBoard, build: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    return rkdet(["deploy", *board_args(board), "--build", build, "--out", out, "--repeats", "2", "--warmup", "0",
                  *extra])


def _said(proc) -> str:  # type: ignore[no-untyped-def]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return " ".join((proc.stdout + proc.stderr).split())


def test_deploy_says_repeatable_and_agrees_not_applicable(board: EmulatedBoard, imported: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = _deploy(board, imported, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = _said(proc)
    assert "repeatable: YES [bitwise]" in said
    assert ("agrees with the reference: NOT APPLICABLE (imported .rknn: no ONNX, so no FP32 reference; simulator: "
            "rknn-toolkit2 2.5.0 loads it (load_rknn) but refuses to run a load_rknn model on its simulator") in said
    assert "model built by toolkit 2.3.2" in said  # the stack line reads the file's own toolkit
    [folder] = run_folders(out)
    record = json.loads((folder / "deploy.json").read_text())
    assert record["agrees"]["ok"] is None and record["agrees"]["applicable"] is False
    assert record.get("reference") is None and record["repeatable"]["ok"] is True
    run = json.loads((folder / "result" / "run.json").read_text())
    expected = json.loads((imported / "manifest.json").read_text())["embedded_fingerprint"]
    assert run["model_check"]["found"] == expected  # rkdet-run checked the model it ran
    with sqlite3.connect(out / "rkdet.db") as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    alone = rkdet(["diff", folder])  # the run judged alone: repeatable, as deploy said
    assert alone.returncode == 0 and "repeatable: YES" in _said(alone)
    against = rkdet(["diff", folder, imported])  # against the imported build: one line, not a silent pass
    lines = [ln for ln in against.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert against.returncode == 2 and len(lines) == 1 and "agrees is not applicable" in lines[0]
    selfcheck = _deploy(board, imported, tmp_path / "s", "--install-selfcheck")  # refused before any board work
    lines = [ln for ln in selfcheck.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert selfcheck.returncode == 2 and len(lines) == 1 and "no self-check bundle" in lines[0]
    assert not (tmp_path / "s").exists()


def test_cells_and_contexts_on_an_imported_build(board: EmulatedBoard, imported: Path, tmp_path: Path) -> None:
    proc = _deploy(board, imported, tmp_path / "r", "--core-mask", "0,1,2,0_1_2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = _said(proc)
    assert "repeatable: YES [bitwise]: 4 cell(s) (core-0, core-1, core-2, core-0_1_2)" in said
    assert "agrees with the reference: NOT APPLICABLE" in said
    [folder] = run_folders(tmp_path / "r")
    cells = json.loads((folder / "deploy.json").read_text())["cells"]
    assert cells["repeatable"] is True and cells["agrees"] is None
    proc = _deploy(board, imported, tmp_path / "c", "--contexts", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "agrees with the reference: NOT APPLICABLE" in _said(proc)
    [folder] = run_folders(tmp_path / "c")
    assert json.loads((folder / "result" / "contexts.json").read_text())["agree"] is True


def test_an_imported_build_without_a_stand_in_is_refused_on_the_emulator(board: EmulatedBoard, imported: Path,
                                                                       tmp_path: Path) -> None:
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(imported, bare)
    manifest = json.loads((bare / "manifest.json").read_text())
    manifest["emulator_stand_in"] = None
    (bare / "manifest.json").write_text(json.dumps(manifest))
    (bare / "emulator-stand-in.onnx").unlink()
    proc = _deploy(board, bare, tmp_path / "r")
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert len(lines) == 1 and "an imported .rknn has no ONNX for the emulated runtime double" in lines[0]


def test_a_fleet_over_an_imported_build_finds_its_classes(imported: Path, tmp_path: Path) -> None:
    with lab(tmp_path / "lab", [("a", "rk3588"), ("b", "rk3588"), ("c", "rk3588")]) as boards:
        out = tmp_path / "results"
        proc = fleet_deploy(boards, boards.inventory(), out, "--json", builds=["--build", str(imported)])
        assert proc.returncode == 0, proc.stderr[-4000:]
        doc = json.loads(sorted((out / "fleet").glob("*/fleet.json"))[-1].read_text())
        assert [(k["name"], k["size"]) for k in doc["classes"]] == [("A", 3)]
        boards.arm_fault("b", {"occurrence": 0, "input_sha256": None, "output": 0, "index": 3, "bit": 1,
                               "all_calls": True})
        try:
            proc = fleet_deploy(boards, boards.inventory(), out, builds=["--build", str(imported)])
        finally:
            boards.arm_fault("b", None)
        assert proc.returncode == 1, proc.stderr[-4000:]
        said = " ".join(proc.stderr.split())
        assert "FLEET DIFFERS: 2 determinism classes" in said, said[-3000:]
        doc = json.loads(sorted((out / "fleet").glob("*/fleet.json"))[-1].read_text())
        assert sorted((k["name"], sorted(m["board"] for m in k["members"])) for k in doc["classes"]) == [
            ("A", ["a", "c"]), ("B", ["b"])]
        cells = [c for b in doc["boards"] for c in b["cells"]]
        assert len(cells) == 3 and all(c["status"] == "complete" and c["agrees"] is None for c in cells)
        assert all("no FP32 reference" in c["agrees_not_applicable"] for c in cells)  # said, not silently null
        assert "drift from history" in said  # the same boards ran the same build before
