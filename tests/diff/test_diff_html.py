"""The HTML report: self-contained, verdict first, every plot present, and it renders in a real
headless Chromium to a non-blank page (a detection comparison on a real page with board snapshots)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from diff_helpers import ResultSetBuilder, build_manifest
from PIL import Image

from rkdet.diff.api import compare
from rkdet.diff.report import write_reports

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _build_case(root: Path, doc_outputs: dict) -> tuple[Path, Path]:
    """A build folder (golden simulator set + golden inputs) and a 40-run board set whose class scores
    swap two channels after the NPU clock drops at run 25 (so boxes flip class)."""
    names = doc_outputs["names"]
    arrays = [doc_outputs["split"][n] for n in names]
    build = build_manifest(root / "build" / "doclaynet-rk3588")
    golden = ResultSetBuilder(build / "golden" / "simulator", ["page-101"], names, backend="rknn-simulator")
    golden.add(0, "page-101", arrays)
    golden.close()
    (build / "golden" / "inputs").mkdir(parents=True)
    np.save(build / "golden" / "inputs" / "page-101.npy", doc_outputs["image"][None])
    swapped = [a.copy() for a in arrays]
    for i, n in enumerate(names):
        if n.startswith("cls"):
            swapped[i][:, [8, 9]] = arrays[i][:, [9, 8]]
    board = ResultSetBuilder(root / "board", ["page-101"], names, backend="rknnlite", core_mask="0_1_2")
    for run in range(40):
        board.add(run, "page-101", swapped if run >= 25 else arrays, latency_ms=21.0 + (run % 5) * 0.3 + (run >= 25) * 4)
    board.snapshot("before", None, 1_000_000_000, 52000)
    for run in range(4, 39, 5):
        board.snapshot("periodic", run, 1_000_000_000 if run < 24 else 700_000_000, 52000 + run * 900)
    board.snapshot("after", 39, 700_000_000, 88000)
    board.close()
    return root / "board", build


@pytest.mark.slow
def test_html_report_renders_in_headless_chromium(doc_outputs: dict, tmp_path: Path) -> None:
    board, build = _build_case(tmp_path, doc_outputs)
    c = compare(board, build)
    assert c.exit_code == 1
    assert c.overlay is not None and c.overlay["image"] is not None
    paths = write_reports(c, tmp_path / "report")
    html = paths["html"].read_text()
    assert not re.search(r"https?://", html), "the report must not reference anything online"
    assert not re.search(r"<(script|link)\b", html)
    body = html.split("<body>", 1)[1]
    assert body.lstrip().startswith('<div class="verdict different">DIFFERENT')
    assert html.count("data:image/png;base64,") == 4
    for title in ("latency over runs", "temperature and NPU frequency", "histogram of absolute differences", "detections"):
        assert f'alt="{title}' in html
    assert "class flip" in html and "fdab0000.npu frequency" in html

    assert CHROMIUM, "chromium is installed by .ci/setup (apt-get install -y chromium)"
    shot = tmp_path / "shot.png"
    profile = tmp_path / "profile"
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", "--no-first-run",
                           f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1280,2000",
                           paths["html"].resolve().as_uri()], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.is_file() and shot.stat().st_size > 20_000
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 2000)
    colours = img.getcolors(maxcolors=1 << 22)
    assert colours is not None and len(colours) > 300, "a blank page has a handful of colours"
    pixels = np.asarray(img)
    red_banner = np.all(np.abs(pixels[:200].astype(int) - (0xC6, 0x28, 0x28)) < 8, axis=-1)
    assert red_banner.sum() > 5000, "the red DIFFERENT verdict banner is at the top"
    keep = Path(__file__).resolve().parents[2] / "bench" / "work"
    if keep.parent.is_dir():  # for a human look: bench/work/ is git-ignored
        keep.mkdir(exist_ok=True)
        shutil.copy(shot, keep / "diff_report_screenshot.png")


def test_same_report_is_green_and_complete(tmp_path: Path) -> None:
    b = ResultSetBuilder(tmp_path / "s", ["x"], ["prob"])
    arr = np.linspace(0, 1, 1000, dtype=np.float32).reshape(1, 1000)
    for run in range(3):
        b.add(run, "x", [arr])
    b.close()
    c = compare(tmp_path / "s")
    html = write_reports(c, tmp_path / "r")["html"].read_text()
    assert c.exit_code == 0 and '<div class="verdict same">SAME (bitwise)' in html
    assert html.count("data:image/png;base64,") == 3  # no detection plot for a classification output
