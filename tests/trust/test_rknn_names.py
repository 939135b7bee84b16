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


# -- finding 17: import-rknn with an input claiming terabytes or gigapixels is one line naming it --

def _png_header(width: int, height: int) -> bytes:
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = lambda kind, data: (struct.pack(">I", len(data)) + kind + data  # noqa: E731
                                + struct.pack(">I", zlib.crc32(kind + data)))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b"")


def _npy_claim(shape: tuple[int, ...]) -> bytes:
    header = repr({"descr": "|u1", "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 64


def test_import_rknn_refuses_huge_claims_in_one_line(default_build: Path, tmp_path: Path) -> None:
    import json

    shape = json.loads((default_build / "model.io.json").read_text())["inputs"][0]["shape"]
    cases = {"huge.npy": _npy_claim((1_000_000, 1_000_000, 3_000)),
             "liar.npy": _npy_claim(tuple(shape)),  # the right shape, but without its bytes
             "giga.png": _png_header(40_000, 40_000)}
    for name, data in cases.items():
        inputs = tmp_path / f"in-{name}"
        inputs.mkdir()
        (inputs / name).write_bytes(data)
        out = tmp_path / f"out-{name}"
        proc = rkdet(["import-rknn", str(default_build / "model.rknn"), "--inputs", str(inputs), "--out", str(out),
                      "--channel-order", "rgb"], timeout=300)
        assert proc.returncode == 2, (name, proc.stderr[-3000:])
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rkdet: ")]
        assert len(lines) == 1 and str(inputs / name) in lines[0], (name, proc.stderr[-3000:])
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
        assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".out-")] == []
