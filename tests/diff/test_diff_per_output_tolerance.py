"""Per-output tolerances and the minimum that would pass (issue 28; Polygraphy's per-output tolerances and
"Minimum Required Tolerance"): one `Tolerance` with a default entry and `outputs`, in the config and on
`rkdet diff --tolerance OUTPUT:KEY=VALUE`; per compared output one terminal line and one report.json entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from diff_helpers import repeated_set

from rkdet.config import load_tolerances
from rkdet.diff.api import compare
from rkdet.diff.report import to_json
from rkdet.errors import ConfigError, InputError
from rkdet.tolerance import Tolerance

ROOT = Path(__file__).resolve().parents[2]
REF = [np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.array([0.25, 0.75], np.float32)]
# x differs by exactly 0.5 at one element (2.0 -> 2.5: 2**21 ULP); y by 2 ULP at one element
CAND = [np.array([1.0, 2.5, 3.0, 4.0], np.float32),
        np.array([0.25, np.nextafter(np.nextafter(np.float32(0.75), np.float32(1)), np.float32(1))], np.float32)]


def _sets(tmp_path: Path) -> tuple[Path, Path]:
    b = repeated_set(tmp_path / "b", {"p": REF}, 1, ["x", "y"]).close()
    a = repeated_set(tmp_path / "a", {"p": CAND}, 2, ["x", "y"]).close()
    return a, b


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_one_tolerance_resolves_per_output() -> None:
    t = Tolerance.from_pairs(["max_abs=1e-3", "scores:min_cosine=0.99", "a:b:max_ulp=3"])
    assert t.for_output("scores") == Tolerance(max_abs=1e-3, min_cosine=0.99)  # the entry's key over the default's
    assert t.for_output("other") == Tolerance(max_abs=1e-3) == t.default
    assert t.for_output("a:b") == Tolerance(max_abs=1e-3, max_ulp=3)  # the last ':' splits OUTPUT from KEY
    assert Tolerance.from_mapping(t.to_json()) == t  # round-trips through deploy's record
    assert "outputs" not in Tolerance(max_abs=1e-3).to_json()  # the old form dumps as it always did
    assert not t.bitwise and Tolerance().bitwise and not Tolerance.from_pairs(["x:max_ulp=1"]).bitwise
    assert t.describe() == ("max_abs=0.001; scores: max_abs=0.001, min_cosine=0.99; "
                            "a:b: max_abs=0.001, max_ulp=3")


@pytest.mark.parametrize("pair,named", [("x:max_abs=nope", "'x:max_abs'"), ("x:max_abss=1", "'x:max_abss=1'"),
                                        (":max_abs=1", "':max_abs=1'"), ("x:max_ulp=1.5", "'x:max_ulp'"),
                                        ("x:min_cosine=2", "'x:min_cosine'")])
def test_a_bad_flag_entry_is_one_line_naming_it(pair: str, named: str) -> None:
    with pytest.raises(InputError) as err:
        Tolerance.from_pairs([pair])
    assert str(err.value).startswith(f"--tolerance {named}") and "\n" not in str(err.value)


def test_config_section_keeps_its_form_and_takes_outputs(tmp_path: Path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text("tolerances:\n  max_abs: 1e-3\n")
    assert load_tolerances(old) == Tolerance(max_abs=1e-3)
    new = tmp_path / "new.yaml"
    new.write_text("tolerances:\n  max_abs: 1e-3\n  outputs:\n    scores:\n      min_cosine: 0.999\n")
    assert load_tolerances(new).for_output("scores") == Tolerance(max_abs=1e-3, min_cosine=0.999)
    bad = tmp_path / "bad.yaml"
    bad.write_text("tolerances:\n  outputs:\n    scores:\n      max_ulp: true\n")
    with pytest.raises(ConfigError) as err:
        load_tolerances(bad)
    assert "tolerances.outputs.scores.max_ulp" in str(err.value) and str(bad) in str(err.value)
    nested = tmp_path / "nested.yaml"
    nested.write_text("tolerances:\n  outputs:\n    scores:\n      outputs: {}\n")
    with pytest.raises(ConfigError):
        load_tolerances(nested)


def test_each_output_is_judged_by_its_own_entry(tmp_path: Path) -> None:
    a, b = _sets(tmp_path)
    assert compare(a, b, Tolerance.from_pairs(["x:max_abs=0.6", "y:max_ulp=2"])).exit_code == 0
    judged = compare(a, b, Tolerance.from_pairs(["x:max_abs=0.6"]))  # y stays bitwise by the default
    assert judged.exit_code == 1 and {f.output for f in judged.failures} == {"y"}
    judged = compare(a, b, Tolerance.from_pairs(["max_ulp=2", "x:max_abs=0.4"]))
    assert judged.exit_code == 1 and {f.output for f in judged.failures} == {"x"}
    typo = compare(a, b, Tolerance.from_pairs(["x:max_abs=0.6", "yy:max_ulp=2"]))
    assert any("yy" in n and "lack" in n for n in typo.notes)


def test_minimum_required_tolerance_per_output(tmp_path: Path) -> None:
    a, b = _sets(tmp_path)
    report = to_json(compare(a, b, Tolerance()))
    need = {(r["set"], r["against"], r["output"]): r for r in report["minimum_tolerance"]}
    assert set(need) == {("A", "B", "x"), ("A", "B", "y")}  # run-to-run: identical, nothing needed
    x, y = need["A", "B", "x"], need["A", "B", "y"]
    assert x["max_abs"] == 0.5 and x["max_ulp"] == 2 ** 21
    assert y["max_ulp"] == 2 and y["max_abs"] == pytest.approx(2 * 2.0 ** -24)
    assert x["line"] == f"would pass with max_abs ≥ 0.5 / max_ulp ≥ {2 ** 21} / min_cosine ≤ {x['min_cosine']:.6f}"
    r, c = REF[0].astype(np.float64), CAND[0].astype(np.float64)
    expected_cos = float(np.dot(r, c) / np.linalg.norm(r) / np.linalg.norm(c))
    assert x["min_cosine"] == pytest.approx(expected_cos, abs=1e-9)
    # the minimum is what passes: exactly it passes, just below it fails
    assert compare(a, b, Tolerance.from_pairs(["x:max_abs=0.5", "y:max_ulp=2"])).exit_code == 0
    assert compare(a, b, Tolerance.from_pairs(["x:max_abs=0.49", "y:max_ulp=2"])).exit_code == 1
    assert compare(a, b, Tolerance.from_pairs(["x:max_abs=0.5", "y:max_ulp=1"])).exit_code == 1


def test_terminal_and_json_on_the_command_line(tmp_path: Path) -> None:
    a, b = _sets(tmp_path)
    proc = _cli("diff", str(a), str(b), "--tolerance", "x:max_abs=0.5", "--tolerance", "y:max_ulp=2")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("minimum tolerance")]
    assert lines == [f"minimum tolerance, A vs B, output x: would pass with max_abs ≥ 0.5 / max_ulp ≥ {2 ** 21} / "
                     f"min_cosine ≤ {lines[0].rsplit('≤ ', 1)[1]}",
                     lines[1]] and "output y: would pass with max_abs ≥ 1.19e-07 / max_ulp ≥ 2" in lines[1]
    same = _cli("diff", str(a), str(a), "--json")
    assert same.returncode == 0 and json.loads(same.stdout)["minimum_tolerance"] == []
    assert "minimum tolerance" not in _cli("diff", str(a), str(a)).stdout  # equal sets: no such line
    bad = _cli("diff", str(a), str(b), "--tolerance", "x:max_ulp=x")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "x:max_ulp" in bad.stderr
