"""Issue 30 findings 10 and 11: names from an `.rknn` file (its file name, the folder it lands in) reach
the terminal and compare-builds' HTML page only through the one sanitiser (`rkdet.textsafe`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from trust_helpers import rkdet

from rkdet.textsafe import html_text

HOSTILE = "x\x1b]0;owned\x07\u202eevil"


def _raw(text: str) -> bool:
    return any(c in text for c in ("\x1b", "\x07", "\u202e"))


def test_import_rknn_prints_a_hostile_file_name_escaped(default_build: Path, tmp_path: Path) -> None:
    rknn = tmp_path / f"{HOSTILE}.rknn"
    shutil.copy(default_build / "model.rknn", rknn)
    proc = rkdet(["import-rknn", str(rknn), "--inputs", str(default_build / "golden" / "inputs"),
                  "--channel-order", "rgb"], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not _raw(proc.stdout) and not _raw(proc.stderr), (proc.stdout, proc.stderr[-2000:])
    assert "imported " in proc.stdout and "\\x1b" in proc.stdout and "\\u202e" in proc.stdout


def test_compare_builds_html_uses_the_one_sanitiser(default_build: Path, tmp_path: Path) -> None:
    from rkdet.buildcompare import report

    assert report.escape is html_text
    a = tmp_path / HOSTILE
    shutil.copytree(default_build, a)
    page = tmp_path / "cmp.html"
    proc = rkdet(["compare-builds", str(a), str(default_build), "--html", str(page)], timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    text = page.read_text()
    assert not _raw(text) and "\\x1b" in text and "\\u202e" in text
    assert not _raw(proc.stdout) and not _raw(proc.stderr)
