"""The two named verdicts (issue 12 §1): *repeatable* (run-to-run, always bitwise) and *agrees* (against
the build's reference, picked by ONE rule shared by deploy, diff and the self-check)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rkdet.diff.api import compare
from rkdet.records.run_info import RunInfo
from rkdet.diff.resultset import reference_set
from rkdet.onboard.reference import reference_for

ROOT = Path(__file__).resolve().parents[2]


def _rkdet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ), timeout=300, check=False)


def _board_like(build: Path, dest: Path, **run_fields: object) -> Path:
    """A run folder as deploy leaves it (<run>/result/) holding the build's onnx-fp32 golden set, as the
    emulated rknnlite (onnxruntime FP32) produces it, with run.json edited by `run_fields`."""
    result = dest / "result"
    shutil.copytree(build / "golden" / "onnx-fp32", result)
    run = json.loads((result / "run.json").read_text())
    run.update(run_fields)
    (result / "run.json").write_text(json.dumps(run))
    return dest


def test_the_rule() -> None:
    assert reference_for("rknnlite", emulated=False) == "simulator"
    assert reference_for("rknnlite", emulated=True) == "onnx-fp32"
    assert reference_for("onnxruntime", emulated=False) == "onnx-fp32"
    assert reference_for("rknnlite", emulated=True, emulates_npu=True) == "simulator"


def test_diff_run_folder_against_build_uses_deploys_reference(default_build: Path, tmp_path: Path) -> None:
    """README after `rkdet demo`: `rkdet diff results/…/result build/…` said DIFFERENT (simulator set picked)
    while deploy judged the same results SAME against onnx-fp32."""
    run = _board_like(default_build, tmp_path / "run", backend="rknnlite", emulated=True)
    for a in (run / "result", run):
        proc = _rkdet("diff", str(a), str(default_build), "--json")
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        report = json.loads(proc.stdout)
        assert report["repeatable"]["ok"] is True
        assert report["agrees"]["ok"] is True and report["agrees"]["reference"] == "onnx-fp32"
        assert "onnx-fp32" in report["sets"]["B"]["path"]
    run = {"backend": "rknnlite", "emulated": True}
    assert reference_set(default_build, RunInfo.from_json(run, "run.json")).name == "onnx-fp32"
    run["emulated"] = False
    assert reference_set(default_build, RunInfo.from_json(run, "run.json")).name == "simulator"


def test_npu_results_are_judged_against_the_simulator(default_build: Path, tmp_path: Path) -> None:
    """The same FP32 results claimed by a real NPU run: the rule picks the simulator, they disagree, and the
    message names the failed verdict (agrees) while repeatable holds."""
    run = _board_like(default_build, tmp_path / "run", backend="rknnlite", emulated=False)
    c = compare(run, default_build)
    assert c.exit_code == 1
    assert c.repeatable.ok and c.agrees is not None and not c.agrees.ok
    assert c.agrees.reference == "simulator"
    assert c.agrees.max_ulp and c.agrees.max_ulp > 0 and c.agrees.min_cosine is not None
    proc = _rkdet("diff", str(run), str(default_build))
    assert proc.returncode == 1
    assert "repeatable: YES" in proc.stdout and "agrees with the reference (simulator): NO" in proc.stdout, proc.stdout[-3000:]


def test_not_repeatable_is_named(default_build: Path, tmp_path: Path) -> None:
    """Two runs of one input that differ by one float bit: repeatable fails (bitwise, whatever the tolerance)."""
    run = _board_like(default_build, tmp_path / "run", backend="onnxruntime")
    result = run / "result"
    lines = (result / "index.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    out = rec["outputs"][0]
    src = next(p for p in (result / "outputs").rglob(f"{out['hash']}*"))
    arr = np.load(src)
    flipped = arr.copy()
    flipped.reshape(-1).view(np.uint32)[0] ^= 1
    from rkdet.onboard.hashing import output_hash

    h = output_hash(flipped)
    np.save(src.with_name(src.name.replace(out["hash"], h)), flipped)
    rec2 = dict(rec, run=1)
    rec2["outputs"] = [dict(out, hash=h)] + rec["outputs"][1:]
    (result / "index.jsonl").write_text("\n".join(lines + [json.dumps(rec2)]) + "\n")
    c = compare(run, default_build, decoder="auto")
    assert not c.repeatable.ok and c.exit_code == 1
    assert c.repeatable.max_ulp == 1
    assert "not repeatable" in c.verdict


def _shift(result: Path, output: str, lsb: float, k: int, steps: int) -> None:
    """Move k elements of `output` of every inference by `steps` quantization steps (as an NPU that is
    `steps` LSB off the simulator would), rewriting outputs/<hash>.npy and index.jsonl consistently."""
    from rkdet.onboard.hashing import output_hash

    lines = []
    for line in (result / "index.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for out in rec["outputs"]:
            if out["name"] == output:
                arr = np.load(result / "outputs" / f"{out['hash']}.npy")
                flat = arr.reshape(-1).copy()
                at = np.linspace(0, flat.size - 1, k).astype(int)
                flat[at] = (flat[at].astype(np.float64) + steps * lsb).astype(flat.dtype)
                moved = flat.reshape(arr.shape)
                out["hash"] = output_hash(moved)
                np.save(result / "outputs" / f"{out['hash']}.npy", moved)
        lines.append(json.dumps(rec))
    (result / "index.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("steps,tolerance,agrees", [(0, {}, True), (1, {"max_lsb": 1}, True), (1, {}, False),
                                                    (2, {"max_lsb": 1}, False)])
def test_npu_lsb_off_the_simulator(default_build: Path, tmp_path: Path, steps: int, tolerance: dict,
                                   agrees: bool) -> None:
    """An NPU's results k LSB off the simulator: repeatable holds; agrees by `max_lsb`; the distance in LSB
    is reported even when within tolerance."""
    from rkdet.diff.resultset import quant_steps
    from rkdet.tolerance import Tolerance

    result = tmp_path / "run" / "result"
    shutil.copytree(default_build / "golden" / "simulator", result)
    run = json.loads((result / "run.json").read_text())
    run.update(backend="rknnlite", emulated=False)
    (result / "run.json").write_text(json.dumps(run))
    lsb = quant_steps(default_build)["cls0"]
    if steps:
        _shift(result, "cls0", lsb, 3, steps)
    c = compare(tmp_path / "run", default_build, Tolerance.from_mapping(tolerance))
    assert c.repeatable.ok
    assert c.agrees is not None and c.agrees.reference == "simulator"
    assert c.agrees.ok is agrees and c.exit_code == (0 if agrees else 1), c.verdict
    assert c.agrees.max_lsb == pytest.approx(steps, abs=0.01)
    assert c.agrees.outputs_differing == (8 if steps else 0)
    if not agrees:
        assert "disagrees with the reference" in c.verdict


def test_html_leads_with_both_verdicts_and_a_grid(default_build: Path, tmp_path: Path) -> None:
    """The HTML report: the two verdicts first, then an inputs × outputs grid; the per-record table folds."""
    from rkdet.diff.findings import findings
    from rkdet.diff.html import render_html
    from rkdet.diff.resultset import quant_steps

    result = tmp_path / "run" / "result"
    shutil.copytree(default_build / "golden" / "simulator", result)
    run = json.loads((result / "run.json").read_text())
    run.update(backend="rknnlite", emulated=False)
    (result / "run.json").write_text(json.dumps(run))
    _shift(result, "cls0", quant_steps(default_build)["cls0"], 2, 1)
    html = render_html(findings(compare(tmp_path / "run", default_build)))
    rep, agr, grid, table = (html.index("repeatable: YES"), html.index("agrees with the reference (simulator): NO"),
                             html.index('<table class="grid">'), html.index("<details>"))
    assert rep < agr < grid < table
    grid_html = html[grid:html.index("</table>", grid)]
    assert grid_html.count("<tr>") == 1 + 8  # header + one row per input
    assert grid_html.count('<span class="bad">✗</span>') == 8  # cls0 of every input is outside (bitwise)
    assert grid_html.count("● =") == 8 * 5  # every other output is repeatable and bit-identical to the simulator
    assert html.index("<details>") < html.index("<th>set</th>") < html.index("</details>")


@pytest.mark.parametrize("text", ["", "[1, 2]", '{"rknn": {"header": {"outputs": 5}}}',
                                  '{"rknn": {"header": {"outputs": [5, null, "x"]}}}',
                                  '{"rknn": {"header": {"outputs": [{"name": "cls0", "dtype": "int8", "scale": ["x"]},'
                                  ' {"name": "box0", "dtype": "int8", "scale": [-1.0]}, {"name": 3, "scale": [1.0]},'
                                  ' {"name": "box1", "dtype": "int8", "scale": [0.5, 0.5]},'
                                  ' {"name": "cls1", "dtype": "int8", "scale": [0.25]}]}}}',
                                  '{"fingerprint": "' + "ab" * 32 + '", "platform": "rk3588", "rknn": {"header": '
                                  '{"outputs": [{"name": "box0", "dtype": "int8", "scale": [-1.0]},'
                                  ' {"name": "box1", "dtype": "int8", "scale": [0.5, 0.5]},'
                                  ' {"name": "out0", "dtype": "float16", "scale": [1.0]},'
                                  ' {"name": "cls1", "dtype": "int8", "scale": [0.25]}]}}}'])
def test_quant_steps_from_a_bad_manifest_are_empty_never_a_crash(tmp_path: Path, text: str) -> None:
    """A build's manifest.json is read for the LSB only, through the one strict manifest reader: a
    malformed manifest yields no step (max_lsb then accepts nothing), never a traceback; a well-formed
    one gives the single per-tensor int8 scales only."""
    from rkdet.diff.resultset import quant_steps

    (tmp_path / "manifest.json").write_text(text)
    assert quant_steps(tmp_path) == ({"cls1": 0.25} if '"platform"' in text else {})
