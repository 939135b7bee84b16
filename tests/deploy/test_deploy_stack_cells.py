"""Deploy with the runtime stack as evidence (issue 12 §2) on emulated boards: the runner checks the model by
its embedded build fingerprint, the verdict prints the stack in one line, `--core-mask 0,1,2,0_1_2` runs every
mask as a cell of one pinned session (masks the SoC lacks skipped and said; #228 caught across masks), and
`--contexts N` checks threaded contexts against the sequential run (#474)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from deploy_helpers import deploy, run_folders

from rkdet.emulator.fake_tree import tree_digest
from rkdet.emulator.sshd import EmulatedBoard
from rkdet.history.db import connect, load_runs


def _said(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


@pytest.fixture(scope="module")
def build(one_page_build: Path) -> Path:
    """The session's one-page build (tests/deploy/conftest.py): every claim here is about cells, contexts,
    masks and the stack line, none about how many inputs a run has (a fault with `occurrence` 0 / `all_calls`
    hits the first)."""
    return one_page_build


@pytest.fixture(scope="module")
def contexts_run(board: EmulatedBoard, build: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """ONE plain deploy with `--contexts 3` on the module's board, read by the model-check/stack test and the
    contexts test (neither changes what the other checks: contexts are extra runs after the sequential one)."""
    out = tmp_path_factory.mktemp("contexts") / "r"
    return deploy(board, build, out, "--contexts", "3", repeats=1), out


def test_model_checked_by_its_fingerprint_and_the_stack_in_one_line(board: EmulatedBoard, build: Path,
                                                                    contexts_run) -> None:  # type: ignore[no-untyped-def]
    manifest = json.loads((build / "manifest.json").read_text())
    proc, out = contexts_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    [folder] = run_folders(out)
    run = json.loads((folder / "result" / "run.json").read_text())
    assert run["model_check"] == {"by": "embedded-fingerprint", "expected": manifest["embedded_fingerprint"],
                                  "found": manifest["embedded_fingerprint"]}
    said = _said(proc)
    assert (f"stack: kernel {board.profile.kernel} · rknpu driver RKNPU driver: v0.9.8 (debugfs) · librknnrt 2.5.0"
            in said), said[-2000:]
    assert "rknn-toolkit-lite 2.5.0+rkdet.emulated" in said and "model built by toolkit 2.5.0" in said
    record = json.loads((folder / "deploy.json").read_text())
    assert record["stack"]["librknnrt"].startswith("librknnrt version: 2.5.0")
    assert record["stack"]["model_toolkit"] == "2.5.0"


def test_every_core_mask_a_cell_in_one_pinned_session(board: EmulatedBoard, build: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    before = tree_digest(board.root)
    proc = deploy(board, build, out, "--core-mask", "0,1,2,0_1_2", repeats=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [folder] = run_folders(out)
    cells = json.loads((folder / "result" / "cells.json").read_text())
    assert [c["cell"] for c in cells["cells"]] == ["core-0", "core-1", "core-2", "core-0_1_2"]
    for c in cells["cells"]:
        assert json.loads((folder / "result" / c["cell"] / "run.json").read_text())["core_mask"] == c["core_mask"]
        assert (folder / "cells" / c["cell"] / "report.json").is_file()
    assert (folder / "report.json").is_file()
    said = _said(proc)
    assert "repeatable: YES [bitwise]: 4 cell(s) (core-0, core-1, core-2, core-0_1_2)" in said
    assert said.count("pin: ") == 0 or "run-pinned" not in said  # one pinned job, not one per mask
    job = (folder / "job.log").read_text()
    assert job.count('"script":"pin"') and job.count('"record":"state"') == 1  # pinned once
    record = json.loads((folder / "deploy.json").read_text())
    assert record["cells"]["repeatable"] is True and len(record["cells"]["cells"]) == 4
    assert tree_digest(board.root) == before  # restored
    assert "not recorded" not in said and "recorded in" in said  # the history: one run per cell
    conn = connect(out)
    runs = load_runs(conn)
    conn.close()
    assert sorted((r.core_mask, r.result_set) for r in runs) == [
        ("0", "core-0"), ("0_1_2", "core-0_1_2"), ("1", "core-1"), ("2", "core-2")]
    assert {r.folder for r in runs} == {folder.relative_to(out).as_posix()} and all(r.outputs for r in runs)


def test_a_mask_that_differs_is_not_repeatable_and_named(board: EmulatedBoard, build: Path,
                                                         tmp_path: Path) -> None:
    drift = json.dumps({"occurrence": 0, "input_sha256": None, "output": 0, "index": 5, "bit": 0, "core_mask": 7,
                        "all_calls": True})
    out = tmp_path / "r"
    proc = deploy(board, build, out, "--core-mask", "0,0_1_2", "--emulator-fault", drift, repeats=2)
    assert proc.returncode == 1, proc.stderr[-3000:]
    said = _said(proc)
    assert "repeatable: NO [bitwise]: core-0_1_2 differs from core-0" in said
    assert "DIFFERENT: not repeatable" in said


@pytest.mark.slow
def test_single_core_soc_skips_the_masks_it_lacks(build: Path, tmp_path: Path) -> None:

    rk3568 = tmp_path / "b" / build.name
    shutil.copytree(build, rk3568)
    manifest = json.loads((rk3568 / "manifest.json").read_text())
    manifest["platform"] = "rk3568"  # the emulated runtime computes the ONNX, whatever the .rknn's target
    (rk3568 / "manifest.json").write_text(json.dumps(manifest))
    with EmulatedBoard("rk3568", tmp_path / "board") as b:
        proc = deploy(b, rk3568, tmp_path / "r", "--core-mask", "0,1,2,0_1_2", repeats=1)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said = _said(proc)
        assert "1 cell(s) (core-0)" in said
        for mask in ("1", "2", "0_1_2"):
            assert f"core-{mask} skipped (the SoC has 1 NPU core(s)" in said


def test_contexts_agree_with_the_sequential_run(contexts_run) -> None:  # type: ignore[no-untyped-def]
    proc, out = contexts_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    [folder] = run_folders(out)
    ctx = json.loads((folder / "result" / "contexts.json").read_text())
    assert ctx["contexts"] == 3 and ctx["agree"] is True


def test_a_context_that_differs_fails_repeatable(board: EmulatedBoard, build: Path, tmp_path: Path) -> None:
    fault = json.dumps({"occurrence": 0, "input_sha256": None, "output": 1, "index": 0, "bit": 3, "instance": 2,
                        "all_calls": True})
    proc = deploy(board, build, tmp_path / "r", "--contexts", "2", "--emulator-fault", fault, repeats=1)
    assert proc.returncode == 1, proc.stderr[-3000:]
    said = _said(proc)
    assert "repeatable: NO" in said and "context 1 of 2 (threads) differs from the sequential run" in said


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["sudo", "busybox"])
def test_cells_contexts_and_stack_on_sudo_and_busybox_boards(variant: str, build: Path, tmp_path: Path) -> None:
    with EmulatedBoard("rk3588", tmp_path / "board", variant) as b:
        flags = ("--sudo", "--state-dir", f"{b.home}/pin-state") if variant == "sudo" else ()
        before = tree_digest(b.root)
        out = tmp_path / "r"
        proc = deploy(b, build, out, *flags, "--core-mask", "0,0_1_2", "--contexts", "2", repeats=1)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said = _said(proc)
        assert "repeatable: YES [bitwise]: 2 cell(s) (core-0, core-0_1_2)" in said and "2 contexts agree" in said
        assert "stack: kernel" in said and "rknpu driver RKNPU driver: v0.9.8 (debugfs)" in said
        [folder] = run_folders(out)
        for cell in ("core-0", "core-0_1_2"):
            run = json.loads((folder / "result" / cell / "run.json").read_text())
            assert run["model_check"]["by"] == "embedded-fingerprint" and run["contexts"] == 2
        assert tree_digest(b.root) == before


@pytest.mark.slow
def test_multicore_numerics_make_core_0_1_2_differ_in_the_int8_emulation(build: Path, tmp_path: Path) -> None:
    """The opt-in profile setting (socs.with_multicore_split): the emulated NPU computes the build's INT8
    emulation with NPU_CORE_0_1_2's partial sums added in another order, so the core-mask sweep finds a real
    difference in the outputs (many elements, not one flipped bit), while each mask repeats itself."""
    from rkdet.emulator.socs import RK3588, with_compute, with_multicore_split

    profile = with_compute(with_multicore_split(RK3588), "int8")
    with EmulatedBoard(profile, tmp_path / "board") as board:
        proc = deploy(board, build, tmp_path / "r", "--core-mask", "0,0_1_2", repeats=2)
    assert proc.returncode == 1, proc.stderr[-3000:]
    said = _said(proc)
    assert "repeatable: NO [bitwise]: core-0_1_2 differs from core-0" in said
    [folder] = run_folders(tmp_path / "r")
    cells = json.loads((folder / "deploy.json").read_text())["cells"]
    assert [c["cell"] for c in cells["cells"]] == ["core-0", "core-0_1_2"]
    assert all(c["repeatable"]["ok"] for c in cells["cells"])  # each mask bit-identical run to run
    assert cells["cells"][1]["same_as_first"] is False
