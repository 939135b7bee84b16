"""`rkdet diff` end to end on result sets in the runner's format: the acceptance cases."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from diff_helpers import DEFAULT_NAMES, build_manifest, default_outputs, one_ulp_up, repeated_set

from rkdet.cli import main
from rkdet.diff.api import compare
from rkdet.diff.report import SCHEMA, to_json, write_reports
from rkdet.tolerance import Tolerance

RUNS = 1000
FLIP_RUN, FLIP_INPUT, FLIP_OUTPUT, FLIP_INDEX = 731, "page-b", "cls1", 1234


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sets")
    arrays = {"page-a": default_outputs(1), "page-b": default_outputs(2)}
    flipped = list(arrays[FLIP_INPUT])
    k = DEFAULT_NAMES.index(FLIP_OUTPUT)
    flipped[k] = one_ulp_up(flipped[k], FLIP_INDEX)
    clean = repeated_set(root / "clean", arrays, RUNS, DEFAULT_NAMES).close()
    flip = repeated_set(root / "flip", arrays, RUNS, DEFAULT_NAMES,
                        overrides={(FLIP_RUN, FLIP_INPUT): flipped}).close()
    golden = repeated_set(root / "golden", arrays, 1, DEFAULT_NAMES).close()
    return {"clean": clean, "flip": flip, "golden": golden, "root": root}


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["diff", *args])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_one_ulp_flip_in_run_731_is_found_and_named(sets: dict[str, Path]) -> None:
    code, out = _run(str(sets["flip"]), "--json")
    assert code == 1
    report = json.loads(out)
    assert report["schema"] == SCHEMA and report["exit_code"] == 1 and report["same"] is False
    first = report["sets"]["A"]["first_divergence"]
    assert (first["run"], first["input"], first["output"], first["index"]) == (FLIP_RUN, FLIP_INPUT, FLIP_OUTPUT, FLIP_INDEX)
    assert first["max_ulp"] == 1
    expected_ref = float(default_outputs(2)[DEFAULT_NAMES.index(FLIP_OUTPUT)].reshape(-1)[FLIP_INDEX])
    assert first["reference"] == expected_ref and first["candidate"] == float(np.nextafter(np.float32(expected_ref), np.float32(1)))
    fail = report["first_failure"]
    assert fail["runs"] == [[FLIP_RUN, FLIP_RUN]] and fail["stats"]["direction"] == "higher"
    page_b = next(i for i in report["sets"]["A"]["inputs"] if i["name"] == FLIP_INPUT)
    assert page_b["distinct"] == 2 and page_b["runs"] == RUNS
    assert report["tolerance"]["bitwise"] is True
    assert f"run {FLIP_RUN}" in report["verdict"] and FLIP_INPUT in report["verdict"] and FLIP_OUTPUT in report["verdict"]
    assert str(FLIP_INDEX) in report["verdict"]


def test_terminal_report_names_run_input_output_element(sets: dict[str, Path]) -> None:
    code, out = _run(str(sets["flip"]))
    assert code == 1
    assert "DIFFERENT (bitwise)" in out and f"run {FLIP_RUN}" in out and FLIP_OUTPUT in out
    assert f"element {FLIP_INDEX}" in " ".join(out.split())
    assert "tolerance" in out  # echoed


def test_identical_results_exit_0(sets: dict[str, Path]) -> None:
    code, out = _run(str(sets["clean"]))
    assert code == 0 and "SAME (bitwise)" in out
    code, out = _run(str(sets["clean"]), str(sets["golden"]), "--json")
    assert code == 0 and json.loads(out)["mode"] == "a-vs-b"


def test_flip_against_golden_names_run(sets: dict[str, Path]) -> None:
    c = compare(sets["flip"], sets["golden"])
    assert c.exit_code == 1
    assert c.a.first_difference is not None and c.a.first_difference["run"] == FLIP_RUN
    assert [f.against for f in c.failures] == ["B", "run 0"]


def test_tolerance_accepts_one_ulp(sets: dict[str, Path], tmp_path: Path) -> None:
    """The tolerance judges agreement with the reference; repeatability is always bitwise (issue 12): a
    one-ULP flip between runs is within max_ulp=1 of the reference, yet not repeatable (exit 1, named)."""
    code, out = _run(str(sets["flip"]), str(sets["golden"]), "--tolerance", "max_ulp=1")
    assert code == 1 and "max_ulp=1" in out and "DIFFERENT (max_ulp=1): not repeatable" in out
    assert re.search(r"agrees with the reference \(\S*golden\): YES \[max_ulp=1\]", out), out
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("tolerances:\n  max_abs: 1.0e-6\n")
    code, out = _run(str(sets["flip"]), str(sets["golden"]), "--config", str(cfg), "--json")
    report = json.loads(out)
    assert code == 1 and report["tolerance"]["max_abs"] == 1e-6
    assert report["agrees"]["ok"] is True and report["agrees"]["max_ulp"] == 1
    assert report["repeatable"]["ok"] is False and report["repeatable"]["max_ulp"] == 1
    code, out = _run(str(sets["clean"]), str(sets["golden"]), "--tolerance", "max_ulp=1")
    assert code == 0 and "repeatable: YES" in out and "SAME (max_ulp=1)" in out


def test_reports_written_atomically(sets: dict[str, Path], tmp_path: Path) -> None:
    c = compare(sets["flip"], None, Tolerance())
    paths = write_reports(c, tmp_path / "out")
    assert set(paths) == {"json", "html"}
    written = json.loads(paths["json"].read_text())
    assert written == json.loads(json.dumps(to_json(c, (tmp_path / "out").resolve())))
    # paths are shown relative to the report's own folder (a published run folder names no host path)
    assert written["sets"]["A"]["path"] == os.path.relpath(sets["flip"].resolve(), (tmp_path / "out").resolve())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.html", "report.json"]


@pytest.mark.parametrize("breakage", ["missing", "bad-json-line", "corrupt-npy", "no-run-json", "bad-tolerance"])
def test_trouble_exits_2_with_one_line(sets: dict[str, Path], tmp_path: Path, breakage: str) -> None:
    target = tmp_path / "broken"
    b = repeated_set(target, {"p": default_outputs(3)}, 3, DEFAULT_NAMES,
                     overrides={(2, "p"): [a + 1 for a in default_outputs(3)]})
    b.close()
    args = [str(target)]
    if breakage == "missing":
        args = [str(tmp_path / "nope")]
    elif breakage == "bad-json-line":
        lines = (target / "index.jsonl").read_text().splitlines(keepends=True)
        lines.insert(1, "{not json\n")
        (target / "index.jsonl").write_text("".join(lines))
    elif breakage == "corrupt-npy":
        victim = sorted((target / "outputs").iterdir())[-1]
        victim.write_bytes(victim.read_bytes()[:-40] + b"\0" * 40)
    elif breakage == "no-run-json":
        (target / "run.json").unlink()
    elif breakage == "bad-tolerance":
        args += ["--tolerance", "max_ulp=abc"]
    code, out = _run(*args)
    assert code == 2
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("rkdet: ") and "Traceback" not in out


def test_mismatched_shapes_and_names_exit_2(tmp_path: Path) -> None:
    a = repeated_set(tmp_path / "a", {"p": default_outputs(1)}, 2, DEFAULT_NAMES).close()
    b = repeated_set(tmp_path / "b", {"p": default_outputs(1, size=320)}, 1, DEFAULT_NAMES).close()
    c = repeated_set(tmp_path / "c", {"p": default_outputs(1)}, 1, [n.upper() for n in DEFAULT_NAMES]).close()
    code, out = _run(str(a), str(b))
    assert code == 2 and "box0" in out and "[1, 64, 80, 80]" in out
    code, out = _run(str(a), str(c))
    assert code == 2 and "outputs" in out


def test_torn_last_index_line_is_ignored(tmp_path: Path) -> None:
    b = repeated_set(tmp_path / "torn", {"p": default_outputs(1)}, 4, DEFAULT_NAMES)
    b.close(torn_tail='{"run": 4, "input": "p", "outp')
    (tmp_path / "torn" / "run.json").write_text(json.dumps({"status": "failed", "error": "interrupted: SIGINT"}))
    c = compare(tmp_path / "torn")
    assert c.exit_code == 0 and c.a.records == 4
    assert any("status is failed (interrupted: SIGINT)" in n for n in c.notes)


def test_npy_and_npz_files(tmp_path: Path) -> None:
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    np.save(tmp_path / "a.npy", x)
    np.save(tmp_path / "b.npy", one_ulp_up(x, 7))
    np.savez(tmp_path / "a.npz", box0=x, cls0=x * 2)
    np.savez(tmp_path / "b.npz", box0=x, cls0=one_ulp_up(x * 2, 3))
    assert _run(str(tmp_path / "a.npy"), str(tmp_path / "a.npy"))[0] == 0
    code, out = _run(str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--json")
    rep = json.loads(out)
    assert code == 1 and rep["first_failure"]["stats"]["first_index"] == 7 and rep["first_failure"]["stats"]["max_ulp"] == 1
    code, out = _run(str(tmp_path / "a.npz"), str(tmp_path / "b.npz"), "--json")
    assert code == 1 and json.loads(out)["first_failure"]["output"] == "cls0"
    (tmp_path / "junk.npy").write_bytes(b"not an npy")
    code, out = _run(str(tmp_path / "junk.npy"))
    assert code == 2 and "junk.npy" in out


def test_build_folder_uses_simulator_set_and_says_so(tmp_path: Path) -> None:
    build = build_manifest(tmp_path / "build" / "doc-rk3588")
    arrays = {"p": default_outputs(5)}
    repeated_set(build / "golden" / "simulator", arrays, 1, DEFAULT_NAMES, backend="rknn-simulator").close()
    repeated_set(build / "golden" / "onnx-fp32", arrays, 1, DEFAULT_NAMES).close()
    board_builder = repeated_set(tmp_path / "board", arrays, 5, DEFAULT_NAMES, core_mask="0_1_2")
    board_builder.run.update(emulated=True, backend_detail="rknnlite 2.3.2 (EMULATED: onnxruntime on x86_64)")
    board = board_builder.close()
    c = compare(board, build)
    assert c.exit_code == 0
    assert any(n.startswith("A results are EMULATED") for n in c.notes)
    assert any("golden/simulator" in n and "build folder" in n for n in c.notes)
    assert any("core_mask differs" in n for n in c.notes)


def test_divergence_lines_up_with_npu_frequency_change(tmp_path: Path) -> None:
    arrays = {"p": default_outputs(1)}
    changed = [a.copy() for a in arrays["p"]]
    changed[1] = changed[1] * np.float32(0.999)  # cls0 scores lower after the frequency drop
    b = repeated_set(tmp_path / "s", arrays, 100, DEFAULT_NAMES,
                     overrides={(r, "p"): changed for r in range(60, 100)})
    b.snapshot("before", None, 1_000_000_000, 45000)
    for r in range(9, 99, 10):
        b.snapshot("periodic", r, 1_000_000_000 if r < 59 else 800_000_000, 45000 + r * 500)
    b.snapshot("after", 99, 800_000_000, 95000)
    b.close()
    c = compare(tmp_path / "s")
    assert c.exit_code == 1
    text = " ".join(c.a.correlation)
    assert "fdab0000.npu frequency" in text and "800 MHz" in text and "1000 MHz" in text
    var = [v for v in c.a.inputs["p"].outputs["cls0"].variants.values() if v.vs_first][0]
    assert var.vs_first.direction == "lower" and len(var.runs) == 40


def test_real_process_exit_codes(sets: dict[str, Path], tmp_path: Path) -> None:
    exe = str(Path(sys.executable).with_name("rkdet"))
    same = subprocess.run([exe, "diff", str(sets["clean"]), str(sets["golden"])], capture_output=True, text=True)
    diff = subprocess.run([exe, "diff", str(sets["flip"])], capture_output=True, text=True)
    bad = subprocess.run([exe, "diff", str(tmp_path / "absent")], capture_output=True, text=True)
    assert (same.returncode, diff.returncode, bad.returncode) == (0, 1, 2)
    assert "Traceback" not in bad.stderr and bad.stderr.startswith("rkdet: ")
