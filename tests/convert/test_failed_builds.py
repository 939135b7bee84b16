"""A failed build never passes for a good one (issue 24 §1, §4, §7), with real rknn-toolkit2 builds of the
tiny conv model: the manifest's `gates` record, the whole fidelity line and the kept fidelity.json on a
failed gate, `rkdet diff` against a failed build's golden set (caveat; decisions not judged without a
decoder), and a build folder of another fingerprint never replaced without --force."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from convert_helpers import run_rkdet
from tiny_models import conv_model, image_folder, write_config

from rkdet.records.build import load_build
from rkdet.records.gates import from_manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plain_words import html_visible_text, python_spellings  # noqa: E402

pytestmark = pytest.mark.slow

STRICT = {"min_cosine": 1.0, "min_slice_cosine": 1.0}  # no INT8 build reaches cosine 1.0: the cosine gate fails


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("failed-builds")
    return {"root": root, "onnx": conv_model(root / "tiny.onnx"), "onnx2": conv_model(root / "tiny2.onnx", seed=3),
            "cal": image_folder(root / "cal", 6, seed=1), "gold": image_folder(root / "gold", 2, seed=2)}


@pytest.fixture(scope="module")
def failed(assets) -> dict[str, object]:
    """`rkdet convert --keep-failed` of a config whose cosine gate cannot pass (built with mmse: the advice
    must not tell it to try mmse, issue 36 §3)."""
    root = assets["root"]
    cfg = write_config(root / "strict.yaml", assets["onnx"], assets["cal"], assets["gold"], fidelity=STRICT,
                       quantize={"algorithm": "mmse"})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(root / "out"), "--keep-failed")
    return {"proc": proc, "folder": root / "out" / "tiny-rk3588.failed", "out": root / "out", "cfg": cfg}


def test_failed_gate_is_recorded_typed_in_the_manifest(failed):
    proc, folder = failed["proc"], failed["folder"]
    assert proc.returncode == 4, proc.stderr[-3000:]
    doc = json.loads((folder / "manifest.json").read_text())
    assert doc["gates"]["passed"] is False and doc["gates"]["failed_gate"] == "cosine"
    assert doc["gates"]["subject"] == "y" and "fidelity gate failed" in doc["gates"]["message"]
    record = load_build(folder, complete=False).gates  # read with the build, once
    assert not record.passed and record.gate == "cosine" and record.subject == "y"
    # an older manifest (no `gates` key) is judged from its fidelity.gates
    del doc["gates"]
    older = from_manifest(doc)
    assert not older.passed and older.gate == "cosine"
    assert (folder / "selfcheck.json").is_file()  # --allow-failed-build --install-selfcheck can run it


def test_failed_gate_prints_the_whole_fidelity_line_and_keeps_fidelity_json(failed):
    proc, out = failed["proc"], failed["out"]
    err = proc.stderr
    assert "rk3588: fidelity: cosine y" in err and "FAIL" in err, err[-3000:]
    assert "rk3588: fidelity per output: cosine (>= 1): y " in err
    kept = out / "tiny-rk3588.failed-fidelity.json"
    assert f"fidelity.json kept: {kept}" in " ".join(err.split())
    assert json.loads(kept.read_text())["gates"] == json.loads((failed["folder"] / "fidelity.json").read_text())["gates"]
    # the advice: what the build did not use (it used mmse), in words, not Python spellings (issue 36 §2, §3)
    [line] = [ln for ln in err.splitlines() if ln.startswith("rkdet: ")]
    assert "quantize.algorithm: kl_divergence" in line and "quantize.force_fp16: true" in line, line
    assert "quantize.algorithm: mmse" not in line, line
    assert python_spellings(err) == [], python_spellings(err)


def test_fidelity_json_is_kept_without_keep_failed(assets, tmp_path):
    cfg = write_config(tmp_path / "strict.yaml", assets["onnx"], assets["cal"], assets["gold"], fidelity=STRICT)
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert not (tmp_path / "out" / "tiny-rk3588.failed").exists() and not (tmp_path / "out" / "tiny-rk3588").exists()
    fid = json.loads((tmp_path / "out" / "tiny-rk3588.failed-fidelity.json").read_text())
    assert any(g["gate"] == "cosine" and g["passed"] is False for g in fid["gates"])


def test_diff_against_a_failed_build_says_so_and_judges_no_decision(failed, tmp_path):
    """`rkdet diff` of the failed build's FP32 golden against its simulator golden: the outputs differ, no
    decoder knows the conv model, so decisions are 'not judged', never '0 decision(s) changed'; every verdict
    line (terminal, JSON, HTML) names the failed build."""
    folder = failed["folder"]
    html = tmp_path / "r.html"
    proc = run_rkdet("diff", str(folder / "golden" / "onnx-fp32"), str(folder / "golden" / "simulator"),
                     "--json-out", str(tmp_path / "r.json"), "--html", str(html))
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = " ".join(proc.stdout.split())
    assert "decoder: no known layout recognised" in out
    assert "decision(s) changed" not in out and "decisions not judged" in out
    verdict_lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("repeatable:", "agrees", "DIFFERENT", "SAME"))]
    assert verdict_lines and all("FAILED its gates" in ln for ln in verdict_lines), proc.stdout
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["agrees"]["decisions_changed"] is None and rep["agrees"]["decisions_judged"] is False
    assert "tiny-rk3588.failed FAILED its gates (the cosine gate (y))" in rep["build_failed_gates"]
    assert "FAILED its gates" in rep["verdict"] and "FAILED its gates" in rep["agrees"]["caveat"]
    text = html.read_text()
    assert "FAILED its gates" in text and "decisions not judged" in text and "decision(s) changed" not in text
    for shown in (proc.stdout, proc.stderr, html_visible_text(text)):  # issue 36 §2
        assert python_spellings(shown) == [], python_spellings(shown)


def test_a_build_of_another_fingerprint_is_not_replaced_without_force(assets, tiny_build, tmp_path):
    out = tmp_path / "out"
    first = write_config(tmp_path / "a.yaml", assets["onnx"], assets["cal"], assets["gold"])
    second = write_config(tmp_path / "b.yaml", assets["onnx2"], assets["cal"], assets["gold"])
    # the first build: the run's shared tiny build (the same model and images as `first`), copied to `out`
    _, shared = tiny_build
    shutil.copytree(shared["folder"], out / "tiny-rk3588")
    fp1 = shared["fingerprint"]
    again = run_rkdet("convert", "--config", str(first), "--out", str(out), "--json")  # same fingerprint: silent
    assert again.returncode == 0 and json.loads(again.stdout)["builds"][0]["fingerprint"] == fp1, again.stderr[-2000:]
    assert "--force" not in again.stderr
    assert sorted(p.name for p in out.iterdir()) == ["tiny-rk3588"]  # replaced in place, nothing else left
    refused = run_rkdet("convert", "--config", str(second), "--out", str(out))
    assert refused.returncode == 2, refused.stderr[-3000:]
    lines = [ln for ln in refused.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert len(lines) == 1 and "Traceback" not in refused.stderr
    doc = json.loads((out / "tiny-rk3588" / "manifest.json").read_text())
    assert doc["fingerprint"] == fp1  # untouched
    assert fp1[:16] in lines[0] and doc["model_fingerprint"][:16] in lines[0] and "--force" in lines[0]
    forced = run_rkdet("convert", "--config", str(second), "--out", str(out), "--json", "--force")
    assert forced.returncode == 0, forced.stderr[-3000:]
    fp2 = json.loads(forced.stdout)["builds"][0]["fingerprint"]
    assert fp2 != fp1 and json.loads((out / "tiny-rk3588" / "manifest.json").read_text())["fingerprint"] == fp2
    assert json.loads((out / "tiny-rk3588" / "manifest.json").read_text())["gates"]["passed"] is True


# -- issue 30 findings 9, 12, 18: what a failed convert writes beside its build, and what it leaves --

def test_planted_links_beside_a_failed_build_are_never_written_through(assets, tmp_path):
    """A symlinked `<name>.failed-fidelity.json` and `<name>.failed`: neither is followed, the gate's exit 4
    stays (not 2), no staging folder is left, and the hermetic folder keeps no lock file per convert."""
    cfg = write_config(tmp_path / "strict.yaml", assets["onnx"], assets["cal"], assets["gold"], fidelity=STRICT)
    out, outside, tmp = tmp_path / "out", tmp_path / "outside", tmp_path / "tmp"
    out.mkdir(), outside.mkdir(), tmp.mkdir()
    (outside / "shadow").write_text("root:x:0:\n")
    (out / "tiny-rk3588.failed-fidelity.json").symlink_to(outside / "shadow")
    (out / "tiny-rk3588.failed").symlink_to(outside)
    hermetic = tmp / f"rkdet-hermetic-{os.getuid()}"
    hermetic.mkdir(mode=0o700)
    for i in range(5):  # empty lock files of earlier converts, unused for two hours: swept
        (hermetic / f"{i:024x}.lock").touch()
        os.utime(hermetic / f"{i:024x}.lock", (time.time() - 7200, time.time() - 7200))
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(out), "--keep-failed", env={"TMPDIR": str(tmp)})
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert (outside / "shadow").read_text() == "root:x:0:\n" and sorted(p.name for p in outside.iterdir()) == ["shadow"]
    assert "fidelity.json not kept" in proc.stderr and "is a symlink" in proc.stderr
    assert "the failed build was not kept" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["tiny-rk3588.failed", "tiny-rk3588.failed-fidelity.json"]
    assert len(list(tmp.rglob("*.lock"))) == 1  # finding 18: this convert's own; earlier ones are swept
    assert not proc.leftovers


def test_a_fifo_where_the_failed_fidelity_file_goes_is_not_waited_on(assets, tmp_path):
    cfg = write_config(tmp_path / "strict.yaml", assets["onnx"], assets["cal"], assets["gold"], fidelity=STRICT)
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "tiny-rk3588.failed-fidelity.json")
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(out), timeout=300)
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert "fidelity.json not kept" in proc.stderr and "is a FIFO" in proc.stderr
    assert stat.S_ISFIFO(os.lstat(out / "tiny-rk3588.failed-fidelity.json").st_mode)
    assert not proc.leftovers
