"""Issue 29: an onnx-fp32 reference made on another CPU class is compared numerically, with a line that says
why it is not bitwise; made on the same class (or either class unknown) it is still demanded bitwise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from rkdet.cli import main
from rkdet.diff.api import compare
from rkdet.errors import EXIT_DIFFERENT, EXIT_OK
from rkdet.records.verdict import record_from_json
from rkdet.tolerance import CROSS_CPU_REL, Tolerance

from diff_helpers import repeated_set

FMA = "x86-64 FMA3 (AVX2 or AVX-512)"
NO_FMA = "x86-64 AVX without FMA"


def _outputs() -> list[np.ndarray]:
    rng = np.random.default_rng(29)
    return [rng.standard_normal((1, 8, 4, 4)).astype(np.float32), rng.random((1, 3), dtype=np.float32)]


def _last_bits(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The same outputs with a few elements moved by a few ULP: what another CPU class's kernels give."""
    out = [a.copy() for a in arrays]
    for a in out:
        flat = a.reshape(-1)
        for i in range(0, flat.size, 5):
            for _ in range(3):
                flat[i] = np.nextafter(flat[i], np.float32(np.inf))
    return out


def _set(path: Path, arrays: list[np.ndarray], cpu: str | None) -> Path:
    builder = repeated_set(path, {"img": arrays}, 2, ["feat", "scores"])
    if cpu is not None:  # as rkdet-run --backend onnxruntime records it (rkdet.onboard.backends)
        builder.run["backend_options"] = {"cpu_class": cpu, "cpu_features": ["SSE41"]}
    return builder.close()


def _pair(tmp_path: Path, cpu_a: str | None, cpu_b: str | None, arrays_a: list[np.ndarray] | None = None) -> tuple[Path, Path]:
    ref = _outputs()
    return (_set(tmp_path / "a", arrays_a if arrays_a is not None else _last_bits(ref), cpu_a),
            _set(tmp_path / "b", ref, cpu_b))


def test_other_cpu_class_agrees_numerically_with_the_line(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, FMA, NO_FMA)
    c = compare(a, b)
    assert c.agrees is not None and c.agrees.ok and c.exit_code == EXIT_OK
    assert c.agrees.outputs_differing == 2 and c.agrees.outputs_outside == 0 and c.agrees.max_ulp == 3
    line = c.agrees.line()
    assert line.startswith("agrees with the reference (") and "b): YES [bitwise, or within the cross-CPU bound]" in line
    assert f"reference made on CPU class {NO_FMA!r}, this run on {FMA!r}: compared numerically" in line
    assert f"{CROSS_CPU_REL:g} x max |reference output|" in line and "not bitwise" in line
    assert "cross-CPU" in c.agrees.tolerance and "within tolerance" in c.verdict and "not bitwise" in c.verdict
    assert c.repeatable.ok and c.repeatable.tolerance == "bitwise"  # run-to-run stays bitwise


def test_same_cpu_class_is_still_bitwise(tmp_path: Path) -> None:
    for cpus in ((FMA, FMA), (FMA, None), (None, NO_FMA), (None, None)):  # equal, or one side unknown
        folder = tmp_path / "-".join(str(c) for c in cpus).replace(" ", "_").replace("/", "")
        a, b = _pair(folder, *cpus)
        c = compare(a, b)
        assert c.agrees is not None and not c.agrees.ok and c.exit_code == EXIT_DIFFERENT, cpus
        assert c.agrees.outputs_outside == 2 and not c.agrees.cross_cpu and c.cross_cpu is None
        assert "b): NO [bitwise]: 2 output(s) not bit-identical" in c.agrees.line()
        assert "compared numerically" not in c.agrees.line() and "compared numerically" not in c.verdict


def test_beyond_the_bound_disagrees_even_across_classes(tmp_path: Path) -> None:
    ref = _outputs()
    far = [a.copy() for a in ref]
    peak = float(np.abs(ref[0]).max())
    far[0].reshape(-1)[3] += np.float32(10 * CROSS_CPU_REL * peak)
    a, b = _pair(tmp_path, FMA, NO_FMA, far)
    c = compare(a, b)
    assert c.agrees is not None and not c.agrees.ok and c.exit_code == EXIT_DIFFERENT
    assert c.agrees.outputs_outside == 1 and "input img output feat outside tolerance" in c.agrees.reason
    assert "compared numerically" in c.agrees.line()  # still says why it was judged numerically


def test_declared_tolerance_is_kept_and_widened(tmp_path: Path) -> None:
    """A declared bound still judges; the cross-CPU bound only adds an element-wise acceptance."""
    a, b = _pair(tmp_path, FMA, NO_FMA)
    c = compare(a, b, Tolerance(min_cosine=0.9999999999))  # the few-ULP moves stay above this cosine
    assert c.agrees is not None and c.agrees.ok
    assert c.agrees.tolerance == "min_cosine=1, or within the cross-CPU bound"


def test_report_json_and_record_carry_the_reason(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, FMA, NO_FMA)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["diff", str(a), str(b), "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    assert "compared numerically" in result.output
    report = json.loads(out.read_text())
    assert report["agrees"]["ok"] is True and "compared numerically" in report["agrees"]["cross_cpu"]
    assert report["repeatable"]["cross_cpu"] is None
    assert any("not bitwise" in n for n in report["notes"])
    assert record_from_json(report["agrees"]).cross_cpu == report["agrees"]["cross_cpu"]
    older = {k: v for k, v in report["agrees"].items() if k != "cross_cpu"}  # written before the field existed
    assert record_from_json(older).cross_cpu is None


def test_a_hostile_cpu_class_is_shown_as_plain_text(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, FMA, "evil\x1b[2J\nclass")
    c = compare(a, b)
    assert c.agrees is not None and c.agrees.ok
    assert "\x1b" not in c.agrees.line() and "\n" not in c.agrees.line()


def _build(tmp_path: Path, cpu: str | None) -> Path:
    """A hand-made build whose golden/onnx-fp32 set is the reference; its CPU class only in the manifest's
    environment.cpu (a golden set's run.json records none), as convert writes it."""
    from rkdet.records.manifest import Manifest, write_manifest

    build = tmp_path / "build"
    _set(build / "golden" / "onnx-fp32", _outputs(), None)
    environment = {"cpu": {"class": cpu, "features": ["SSE41"]}} if cpu else None
    write_manifest(build / "manifest.json", Manifest(fingerprint="ab" * 32, platform="rk3588", environment=environment))
    return build


def test_a_builds_golden_set_takes_its_class_from_the_manifest(tmp_path: Path) -> None:
    a = _set(tmp_path / "a", _last_bits(_outputs()), FMA)
    c = compare(a, _build(tmp_path / "other", NO_FMA))
    assert c.agrees is not None and c.agrees.ok and c.agrees.reference == "onnx-fp32"
    assert f"reference made on CPU class {NO_FMA!r}, this run on {FMA!r}" in c.agrees.line()
    c = compare(a, _build(tmp_path / "same", FMA))
    assert c.agrees is not None and not c.agrees.ok and not c.agrees.cross_cpu
    c = compare(a, _build(tmp_path / "older", None))  # a build made before rkdet recorded the class
    assert c.agrees is not None and not c.agrees.ok and not c.agrees.cross_cpu
