"""A one-bit fault in one output of one run (the emulated runtime's test control) must turn the deploy's
verdict into DIFFERENT (exit 1) and be located exactly: run, input, output, element."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from deploy_helpers import assert_untouched, deploy, run_folders

from rkdet.emulator.sshd import EmulatedBoard
from rkdet.emulator.fake_tree import tree_digest

WARMUP, REPEATS = 1, 3


@pytest.mark.slow
def test_bit_flip_in_one_run_is_found_and_located(board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    pages = sorted((fast_build / "golden" / "inputs").glob("*.npy"))
    page = pages[1]
    tensor = np.load(page)
    sha = hashlib.sha256(np.ascontiguousarray(tensor).tobytes()).hexdigest()
    run, index = 2, 4321
    fault = {"occurrence": WARMUP + run, "input_sha256": sha, "output": "cls0", "index": index, "bit": 0}
    before = tree_digest(board.root)
    out = tmp_path / "results"
    proc = deploy(board, fast_build, out, "--emulator-fault", json.dumps(fault), repeats=REPEATS, warmup=WARMUP)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert_untouched(board, before)
    [folder] = run_folders(out)
    record = json.loads((folder / "deploy.json").read_text())
    assert record["settings"]["fault_injected"] is True and record["diff_exit"] == 1
    verdict = record["verdict"]
    assert verdict.startswith("DIFFERENT"), verdict
    assert f"run {run}, input {page.stem}, output cls0, element {index} " in verdict, verdict
    assert " ".join(verdict.split()) in " ".join(proc.stderr.split())

    report = json.loads((folder / "report.json").read_text())
    assert report["same"] is False and report["exit_code"] == 1
    first = report["sets"]["A"]["first_divergence"]
    assert (first["run"], first["input"], first["output"], first["index"]) == (run, page.stem, "cls0", index)
    shape = next(o["shape"] for i in report["sets"]["A"]["inputs"] if i["name"] == page.stem
                 for o in i["outputs"] if o["name"] == "cls0")
    assert json.loads(first["position"]) == [int(c) for c in np.unravel_index(index, shape)]
    assert first["max_ulp"] == 1  # bit 0 of a float32: exactly one unit in the last place
    # only that one input's cls0 has two variants; everything else is bit-identical
    for entry in report["sets"]["A"]["inputs"]:
        for output in entry["outputs"]:
            expected = 2 if (entry["name"], output["name"]) == (page.stem, "cls0") else 1
            assert output["distinct"] == expected, (entry["name"], output["name"])
