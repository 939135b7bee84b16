"""rkdet-run --core-mask LIST (one cell per mask, OUT/core-<mask>/, cells.json with skipped masks and agreement
across masks: rknn-toolkit2 #228) and --contexts N (N runtime contexts in threads, compared with the
sequential run: #474), against the emulated RKNNLite on an emulated SoC tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rkdet.emulator.fake_tree import build_fake_tree
from rkdet.emulator.socs import RK3568, RK3588
from rkdet.onboard.resultset import read_index
from runner_helpers import make_inputs, make_rknn_dir, run_cli, with_double


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cells")
    return make_rknn_dir(root / "model"), make_inputs(root / "inputs", count=2, nhwc_uint8=True)


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    return {p.soc: build_fake_tree(p, tmp_path_factory.mktemp(p.soc)) for p in (RK3588, RK3568)}


def run(model, out: Path, root: Path, *extra: str, fault: dict | None = None):
    env = with_double(RKDET_ROOT=str(root))
    if fault is not None:
        env["RKDET_EMU_FAULT"] = json.dumps(fault)
    return run_cli(["--model", model[0], "--inputs", model[1], "--repeats", "2", "--out", out, *extra], env=env)


def test_every_mask_a_cell_and_they_agree(model, trees, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run(model, out, trees["rk3588"], "--core-mask", "0,1,2,0_1_2", "--npu-cores", "3")
    assert proc.returncode == 0, proc.stderr
    cells = json.loads((out / "cells.json").read_text())
    assert [c["cell"] for c in cells["cells"]] == ["core-0", "core-1", "core-2", "core-0_1_2"]
    assert all(c["status"] == "complete" and c["exit"] == 0 for c in cells["cells"])
    assert cells["agree"] is True and cells["first_difference"] is None
    for cell in cells["cells"]:
        folder = out / cell["cell"]
        assert json.loads((folder / "run.json").read_text())["core_mask"] == cell["core_mask"]
        assert len(read_index(str(folder))) == 4 and (folder / "summary.json").exists()


def test_masks_the_soc_lacks_are_skipped_and_said(model, trees, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run(model, out, trees["rk3568"], "--core-mask", "0,1,2,0_1_2", "--npu-cores", "1")
    assert proc.returncode == 0, proc.stderr
    cells = {c["cell"]: c for c in json.loads((out / "cells.json").read_text())["cells"]}
    assert cells["core-0"]["status"] == "complete"
    for name in ("core-1", "core-2", "core-0_1_2"):
        assert cells[name]["status"] == "skipped" and "1 NPU core" in cells[name]["reason"]
        assert not (out / name).exists()


def test_a_mask_the_npu_lacks_fails_in_the_runtime_when_not_skipped(model, trees, tmp_path: Path) -> None:
    """Without --npu-cores the runtime itself refuses (as lite2 does): that cell fails, exit 3, the rest ran."""
    out = tmp_path / "out"
    proc = run(model, out, trees["rk3568"], "--core-mask", "0,0_1_2")
    assert proc.returncode == 3, proc.stderr
    cells = {c["cell"]: c for c in json.loads((out / "cells.json").read_text())["cells"]}
    assert cells["core-0"]["status"] == "complete" and cells["core-0_1_2"]["status"] == "failed"
    assert "init_runtime" in cells["core-0_1_2"]["reason"]


def test_one_mask_differing_from_another_is_exit_1_and_named(model, trees, tmp_path: Path) -> None:
    out = tmp_path / "out"
    drift = {"occurrence": 0, "input_sha256": None, "output": 0, "index": 3, "bit": 0, "core_mask": 7,
             "all_calls": True}  # NPU_CORE_0_1_2 always one bit off: #228
    proc = run(model, out, trees["rk3588"], "--core-mask", "0,0_1_2", "--npu-cores", "3", fault=drift)
    assert proc.returncode == 1, proc.stderr
    cells = json.loads((out / "cells.json").read_text())
    assert all(c["exit"] == 0 for c in cells["cells"])  # each mask repeats itself
    assert cells["agree"] is False
    diff = cells["first_difference"]
    assert diff["cells"] == ["core-0", "core-0_1_2"] and diff["output"] == "output0" and diff["input"]


def test_contexts_agree_with_the_sequential_run(model, trees, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run(model, out, trees["rk3588"], "--contexts", "3")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "contexts.json").read_text())
    assert doc["contexts"] == 3 and doc["agree"] is True and doc["differences"] == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["contexts_agree"] is True and summary["deterministic"] is True
    assert json.loads((out / "run.json").read_text())["contexts"] == 3


def test_a_context_that_differs_makes_the_run_not_repeatable(model, trees, tmp_path: Path) -> None:
    out = tmp_path / "out"
    fault = {"occurrence": 0, "input_sha256": None, "output": 1, "index": 0, "bit": 2, "instance": 2,
             "all_calls": True}  # the second threaded context (instance 0 is the sequential one): #474
    proc = run(model, out, trees["rk3588"], "--contexts", "2", fault=fault)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads((out / "contexts.json").read_text())
    assert doc["agree"] is False
    assert {(d["context"], d["output"]) for d in doc["differences"]} == {(1, "output1")}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["contexts_agree"] is False and summary["deterministic"] is False
    assert all(v["distinct"] == 1 for v in summary["inputs"].values())  # the sequential runs repeat


@pytest.mark.parametrize("masks", ["0,0", "0,7", "auto,"])
def test_bad_mask_lists_are_bad_input(model, trees, tmp_path: Path, masks: str) -> None:
    proc = run(model, tmp_path / "o", trees["rk3588"], "--core-mask", masks)
    assert proc.returncode == 2 and "--core-mask" in proc.stderr


# ---- the host's judgement of those folders (rkdet/deploy/cells.py), as deploy makes it ----

def test_host_judges_agreeing_cells_from_their_outputs(model, trees, tmp_path: Path) -> None:
    from rkdet.deploy.cells import judge_cells
    from rkdet.records.cell import read_cells
    from rkdet.tolerance import Tolerance

    out = tmp_path / "out"
    assert run(model, out, trees["rk3588"], "--core-mask", "0,2,0_1_2", "--npu-cores", "2").returncode == 0
    cells = read_cells(out)
    assert [c.status for c in cells] == ["complete", "skipped", "skipped"]
    judged = judge_cells(out, cells, None, Tolerance())
    assert judged.repeatable and judged.agrees is None and judged.exit_code == 0
    [line] = judged.lines()
    assert line.startswith("repeatable: YES") and "core-2 skipped (the SoC has 2 NPU core(s)" in line


def test_host_finds_a_mask_that_differs_even_if_the_board_says_they_agree(model, trees, tmp_path: Path) -> None:
    from rkdet.deploy.cells import judge_cells
    from rkdet.records.cell import read_cells
    from rkdet.tolerance import Tolerance

    out = tmp_path / "out"
    drift = {"occurrence": 0, "input_sha256": None, "output": 0, "index": 3, "bit": 0, "core_mask": 7,
             "all_calls": True}
    assert run(model, out, trees["rk3588"], "--core-mask", "0,0_1_2", fault=drift).returncode == 1
    doc = json.loads((out / "cells.json").read_text())
    doc.update(agree=True, first_difference=None)  # a board that lies about the agreement
    (out / "cells.json").write_text(json.dumps(doc))
    judged = judge_cells(out, read_cells(out), None, Tolerance())
    assert not judged.repeatable and judged.exit_code == 1
    [line] = judged.lines()
    assert line.startswith("repeatable: NO") and "core-0_1_2 differs from core-0" in line and "output0" in line


def test_host_folds_a_disagreeing_context_into_repeatable(model, trees, tmp_path: Path) -> None:
    from rkdet.deploy.cells import fold_contexts
    from rkdet.diff.api import compare

    out = tmp_path / "out"
    fault = {"occurrence": 0, "input_sha256": None, "output": 1, "index": 0, "bit": 2, "instance": 1,
             "all_calls": True}
    assert run(model, out, trees["rk3588"], "--contexts", "2", fault=fault).returncode == 1
    comparison = compare(out)
    assert comparison.repeatable.ok  # the sequential runs alone repeat themselves
    check = fold_contexts(comparison, out)
    assert check is not None and not check.agree and comparison.exit_code == 1
    assert not comparison.repeatable.ok and "context 0 of 2 (threads) differs" in comparison.repeatable.reason


def test_a_cells_file_naming_a_path_outside_is_refused(tmp_path: Path) -> None:
    from rkdet.records.cell import read_cells
    from rkdet.errors import BoardError

    (tmp_path / "cells.json").write_text(json.dumps({"cells": [{"cell": "../../etc", "core_mask": "0"}]}))
    with pytest.raises(BoardError, match="unexpected cell"):
        read_cells(tmp_path)
