"""Bad input to `rkdet convert`: one-line error, documented exit code, no traceback, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from convert_helpers import run_rkdet
from tiny_models import conv_model


def _assert_clean_failure(proc, code: int, *needles: str, out: Path | None = None) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    error_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert len(error_lines) == 1, proc.stderr
    for needle in needles:
        assert needle in error_lines[0], error_lines[0]
    if out is not None and out.exists():
        assert list(out.iterdir()) == [], f"left behind: {list(out.iterdir())}"
    assert proc.leftovers == [], f"processes of this convert outlived it: {proc.leftovers}"


def _convert(config: Path, out: Path, *extra: str, env: dict | None = None):
    return run_rkdet("convert", "--config", str(config), "--out", str(out), *extra, env=env)


def test_missing_onnx(tiny_config, tmp_path):
    cfg = tiny_config(model={"onnx": str(tmp_path / "absent.onnx")})
    _assert_clean_failure(_convert(cfg, tmp_path / "out"), 2, "absent.onnx: ONNX model not found", out=tmp_path / "out")


def test_corrupt_onnx(tiny_config, tmp_path):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 100)
    cfg = tiny_config(model={"onnx": str(bad)})
    _assert_clean_failure(_convert(cfg, tmp_path / "out"), 2, "corrupt.onnx", out=tmp_path / "out")


def test_dynamic_shape_without_config_shape(tiny_config, tmp_path):
    dyn = conv_model(tmp_path / "dyn.onnx", dynamic=True)
    cfg = tiny_config(model={"onnx": str(dyn)})
    _assert_clean_failure(_convert(cfg, tmp_path / "out"), 2, "dynamic shape", "model.inputs", out=tmp_path / "out")


@pytest.mark.slow
def test_dynamic_shape_with_config_shape_builds(tiny_config, tmp_path):
    dyn = conv_model(tmp_path / "dyn.onnx", dynamic=True)
    cfg = tiny_config(model={"onnx": str(dyn), "inputs": {"x": [1, 3, 32, 32]}})
    proc = _convert(cfg, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "out" / "tiny-rk3588" / "model.rknn").is_file()


def test_empty_calibration_folder(tiny_config, tmp_path):
    (tmp_path / "empty").mkdir()
    cfg = tiny_config(quantize={"dataset": str(tmp_path / "empty")})
    _assert_clean_failure(_convert(cfg, tmp_path / "out"), 2, "quantize.dataset folder has no images", out=tmp_path / "out")


def test_missing_calibration_folder(tiny_config, tmp_path):
    cfg = tiny_config(quantize={"dataset": str(tmp_path / "nowhere")})
    _assert_clean_failure(_convert(cfg, tmp_path / "out"), 2, "quantize.dataset folder not found", out=tmp_path / "out")


def _noise_jpeg() -> bytes:
    """A 200x200 noise JPEG (~48 kB): cut at 5000 bytes, OpenCV still decodes it without an error."""
    import cv2

    ok, data = cv2.imencode(".jpg", np.random.default_rng(0).integers(0, 256, (200, 200, 3), dtype=np.uint8))
    assert ok and len(data) > 20000
    cut = cv2.imdecode(np.frombuffer(data.tobytes()[:5000], np.uint8), cv2.IMREAD_UNCHANGED)
    assert cut is not None  # the trap: it "decodes" (missing rows flat or, measured, uninitialised memory)
    return data.tobytes()


def _folder_with(tmp_path: Path, tiny_assets, name: str, writer) -> Path:
    folder = tmp_path / "cal-bad"
    shutil.copytree(tiny_assets["cal"], folder)
    writer(folder / name)
    return folder


@pytest.mark.parametrize("name, writer, needle", [
    ("zz-gray.png", lambda p: __import__("cv2").imwrite(str(p), np.full((40, 40), 128, np.uint8)), "grayscale"),
    ("zz-thin.png", lambda p: __import__("cv2").imwrite(str(p), np.zeros((8, 400, 3), np.uint8)), "outside"),
    ("zz-broken.png", lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\nnot really"), "cannot decode image"),
    ("zz-cut.jpg", lambda p: p.write_bytes(_noise_jpeg()[:5000]), "JPEG is truncated"),
])
def test_bad_images_are_named(tiny_config, tiny_assets, tmp_path, name, writer, needle):
    folder = _folder_with(tmp_path, tiny_assets, name, writer)
    cfg = tiny_config(quantize={"dataset": str(folder)})
    _assert_clean_failure(_convert(cfg, tmp_path / "out"), 2, name, needle, out=tmp_path / "out")


def test_golden_must_be_held_out(tiny_config, tiny_assets, tmp_path):
    cfg = tiny_config(golden={"inputs": str(tiny_assets["cal"])})
    _assert_clean_failure(_convert(cfg, tmp_path / "out"), 2, "held out of calibration", out=tmp_path / "out")


def test_unknown_platform_flag(tiny_config, tmp_path):
    proc = _convert(tiny_config(), tmp_path / "out", "--target", "rk9999")
    assert proc.returncode == 2 and "rk9999" in proc.stderr and "Traceback" not in proc.stderr


def test_unwritable_output_folder(tiny_config, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    _assert_clean_failure(_convert(tiny_config(), blocker / "out"), 2, "output folder is not writable")


def test_toolkit_not_installed(tiny_config, tmp_path):
    """A Python without rknn-toolkit2 (the system one) as the toolkit interpreter."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    assert python, "needs a system python3"
    proc = _convert(tiny_config(), tmp_path / "out", env={"RKDET_TOOLKIT2_PYTHON": python})
    _assert_clean_failure(proc, 4, "rknn-toolkit2 is not installed", out=tmp_path / "out")


def test_rv1126_without_legacy_toolkit_explains(tiny_config, tmp_path):
    proc = _convert(tiny_config(target={"platforms": ["rv1126"]}), tmp_path / "out")
    _assert_clean_failure(proc, 4, "RKNN-Toolkit 1.7", "RV1126B is a different chip", out=tmp_path / "out")


def test_unquantized_without_force_fp16_is_refused(tiny_config, tmp_path):
    cfg = tiny_config(quantize={"enabled": False})
    _assert_clean_failure(_convert(cfg, tmp_path / "out"), 2, "force_fp16", out=tmp_path / "out")
