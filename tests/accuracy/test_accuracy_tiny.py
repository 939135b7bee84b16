"""`rkdet accuracy` on tiny models whose right answers are known (tests/accuracy/tiny_labelled.py): a
classifier and a per-pixel segmenter that FP32 gets 100 % right, labels that are wrong on a known part
give the known lower value, and the table, the record and the exit code follow the MLPerf lines."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np

from rkdet.records.accuracy import read_accuracy

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "convert"))
from convert_helpers import run_rkdet  # noqa: E402
from tiny_labelled import region_images, solid_images  # noqa: E402


def _class_folders(root: Path, truth: dict[str, int], images: Path) -> Path:
    for name, cls in truth.items():
        (root / str(cls)).mkdir(parents=True, exist_ok=True)
        shutil.copy(images / f"{name}.png", root / str(cls) / f"{name}.png")
    return root


def test_a_classifier_right_on_every_image_scores_100_percent_in_every_row(colour_builds, tmp_path) -> None:
    truth = solid_images(tmp_path / "images", 2, seed=7)
    labels = _class_folders(tmp_path / "labels", truth, tmp_path / "images")
    proc = run_rkdet("accuracy", str(colour_builds["classifier"]), "--labels", str(labels), "--out", str(tmp_path / "o"),
                     "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = read_accuracy(tmp_path / "o" / "accuracy.json")
    assert json.loads(proc.stdout) == json.loads((tmp_path / "o" / "accuracy.json").read_text())
    assert record.samples == 6 and [r.variant for r in record.rows] == ["FP32", "INT8 (emulation)"]
    for row in record.rows:
        assert (row.metric, row.value, row.others["top-5"], row.delta) == ("top-1", 1.0, 1.0, 0.0)
        assert all(ok for _, ok in row.lines)
    assert "top-1" in proc.stderr and "(reference)" in proc.stderr  # the table, on the report console


def test_a_csv_with_two_wrong_labels_gives_four_of_six(colour_builds, tmp_path) -> None:
    truth = solid_images(tmp_path / "images", 2, seed=8)
    rows = ["file,class"] + [f"{n}.png,{(c + 1) % 3 if i < 2 else c}" for i, (n, c) in enumerate(sorted(truth.items()))]
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    proc = run_rkdet("accuracy", str(colour_builds["classifier"]), "--labels", str(tmp_path / "labels.csv"),
                     "--images", str(tmp_path / "images"), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    fp32 = read_accuracy(tmp_path / "o" / "accuracy.json").rows[0]
    assert fp32.value == 4 / 6
    assert fp32.others["top-5"] == 1.0  # 3 classes: the truth is always among the top 5


def test_a_segmenter_right_at_every_pixel_has_miou_1_and_a_known_mislabel_its_known_iou(colour_builds, tmp_path) -> None:
    maps = region_images(tmp_path / "images", tmp_path / "maps", 3, seed=9)
    proc = run_rkdet("accuracy", str(colour_builds["segmenter"]), "--labels", str(tmp_path / "maps"),
                     "--images", str(tmp_path / "images"), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    for row in read_accuracy(tmp_path / "o" / "accuracy.json").rows:
        assert (row.metric, row.value, row.others["pixel accuracy"], row.others["classes judged"]) == ("mIoU", 1.0, 1.0, 3)
    # relabel every class-2 pixel of the first map as class 0, and mark its first row 255 (not judged)
    first = sorted(maps)[0]
    wrong = maps[first].copy()
    moved = int((wrong[1:] == 2).sum())
    wrong[wrong == 2] = 0
    wrong[0, :] = 255
    cv2.imwrite(str(tmp_path / "maps" / f"{first}.png"), wrong)
    proc = run_rkdet("accuracy", str(colour_builds["segmenter"]), "--labels", str(tmp_path / "maps"),
                     "--images", str(tmp_path / "images"), "--out", str(tmp_path / "o"), "--require", "99.9")
    assert proc.returncode == 0, proc.stderr[-2000:]
    fp32 = read_accuracy(tmp_path / "o" / "accuracy.json").rows[0]
    # the expected value, summed over the data set by hand: predictions are the true maps (FP32 is exact)
    judged = [(m[1:] if n == first else m, (wrong[1:] if n == first else m)) for n, m in maps.items()]
    inter = {c: sum(int(((p == c) & (t == c)).sum()) for p, t in judged) for c in range(3)}
    union = {c: sum(int(((p == c) | (t == c)).sum()) for p, t in judged) for c in range(3)}
    expected = np.mean([inter[c] / union[c] for c in range(3)])
    assert moved > 0 and abs(fp32.value - expected) < 1e-12 and fp32.value < 1.0


def test_a_row_below_the_line_exits_1(colour_builds, tmp_path) -> None:
    """A board result set that answers class 0 for every image: top-1 1/3 of FP32's, below both lines."""
    truth = solid_images(tmp_path / "images", 1, seed=10)
    labels = _class_folders(tmp_path / "labels", truth, tmp_path / "images")
    sys.path.insert(0, str(Path(__file__).parents[1] / "diff"))
    from diff_helpers import ResultSetBuilder

    board = ResultSetBuilder(tmp_path / "board", sorted(truth), ["y"], backend="rknnlite_npu")
    for name in sorted(truth):
        board.add(0, name, [np.array([[9.0, 0.0, 0.0]], np.float32)])
    board.close()
    proc = run_rkdet("accuracy", str(colour_builds["classifier"]), "--labels", str(labels), "--results",
                     str(tmp_path / "board"), "--out", str(tmp_path / "o"), "--html", str(tmp_path / "acc.html"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    record = read_accuracy(tmp_path / "o" / "accuracy.json")
    rows = record.rows
    assert rows[-1].variant.startswith("board: ") and abs(rows[-1].value - 1 / 3) < 1e-12
    assert [ok for _, ok in rows[-1].lines] == [False, False] and "FAIL" in proc.stdout
    # the measurement's page (--html): the same rows, the board's below both lines
    page = (tmp_path / "acc.html").read_text()
    assert f"<td>{rows[-1].variant}</td>" in page and page.count(">FAIL<") == 2 and record.labels_sha256 in page


def test_a_float16_build_and_the_simulator_add_their_rows(colour_builds, tmp_path) -> None:
    """`--variant` (the float16 build of the same model) and `--simulator` (a hermetic rebuild of each,
    fingerprint checked): FP32, INT8 emulation, INT8 simulator, float16 simulator, all right on every image."""
    truth = solid_images(tmp_path / "images", 1, seed=11)
    labels = _class_folders(tmp_path / "labels", truth, tmp_path / "images")
    proc = run_rkdet("accuracy", str(colour_builds["classifier"]), "--variant", str(colour_builds["classifier16"]),
                     "--simulator", "--config", str(colour_builds["root"] / "cls.yaml"), "--labels", str(labels),
                     "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_accuracy(tmp_path / "o" / "accuracy.json").rows
    assert [r.variant for r in rows] == ["FP32", "INT8 (emulation)", "INT8 (simulator)", "float16 (simulator)"]
    assert all(r.value == 1.0 for r in rows)
    assert all("the rebuilt fingerprint equals the build's" in r.detail for r in rows[2:])
    assert (tmp_path / "o" / f"toolkit-accuracy-{colour_builds['classifier16'].name}.log").is_file()


def test_a_variant_of_another_model_is_refused_in_one_line(colour_builds, tmp_path) -> None:
    truth = solid_images(tmp_path / "images", 1, seed=12)
    labels = _class_folders(tmp_path / "labels", truth, tmp_path / "images")
    proc = run_rkdet("accuracy", str(colour_builds["classifier"]), "--variant", str(colour_builds["segmenter"]),
                     "--labels", str(labels), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"rkdet: --variant {colour_builds['segmenter']}: not a build of {colour_builds['classifier'].name}'s model "
        "(its prepared model.onnx differs); compare builds of one model with the same preprocessing"]


def test_saved_inputs_run_by_rkdet_run_score_as_a_board_row(colour_builds, tmp_path) -> None:
    """--save-inputs writes the fed tensors rkdet-run takes; its result set (here the on-board program on this
    host, onnxruntime backend: the reference's session) scored with --results gives exactly FP32's row."""
    import subprocess

    from rkdet.onboard.reference import fp32_input

    truth = solid_images(tmp_path / "images", 2, seed=13)
    labels = _class_folders(tmp_path / "labels", truth, tmp_path / "images")
    build = colour_builds["classifier"]
    proc = run_rkdet("accuracy", str(build), "--labels", str(labels), "--save-inputs", str(tmp_path / "fed"),
                     "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.stem for p in (tmp_path / "fed").glob("*.npy")) == sorted(truth)
    # the onnxruntime backend is fed the FP32 model's input, as deploy stages it (the NPU backends take these files)
    (tmp_path / "fed32").mkdir()
    for f in (tmp_path / "fed").glob("*.npy"):
        np.save(tmp_path / "fed32" / f.name, fp32_input(np.load(f), (0, 0, 0), (255, 255, 255)))
    run = subprocess.run([sys.executable, "-m", "rkdet.onboard", "run", "--model", str(build / "model.onnx"),
                          "--inputs", str(tmp_path / "fed32"), "--repeats", "2", "--backend", "onnxruntime",
                          "--out", str(tmp_path / "board")], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    proc = run_rkdet("accuracy", str(build), "--labels", str(labels), "--results", str(tmp_path / "board"),
                     "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    fp32, _, board = read_accuracy(tmp_path / "o" / "accuracy.json").rows
    assert board.variant == "board: onnxruntime" and (board.value, board.delta) == (fp32.value, 0.0) == (1.0, 0.0)
    # the folder is new or empty: a second save there is refused in one line
    proc = run_rkdet("accuracy", str(build), "--labels", str(labels), "--save-inputs", str(tmp_path / "fed"),
                     "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == (
        f"rkdet: --save-inputs {tmp_path / 'fed'}: exists and is not an empty folder; name a new folder")


def test_float16_makes_a_float16_build_from_the_config_and_scores_it(colour_builds, tmp_path) -> None:
    """--float16 without a float16 build folder: one made from the build's config in the hermetic worker (its
    prepared graph checked against the build's), simulated; it gives the float16 build folder's simulator row."""
    truth = solid_images(tmp_path / "cimages", 1, seed=14)
    labels = _class_folders(tmp_path / "labels", truth, tmp_path / "cimages")
    proc = run_rkdet("accuracy", str(colour_builds["classifier"]), "--float16", "--config",
                     str(colour_builds["root"] / "cls.yaml"), "--labels", str(labels), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_accuracy(tmp_path / "o" / "accuracy.json").rows
    assert [r.variant for r in rows] == ["FP32", "INT8 (emulation)", "float16 (simulator, made)"]
    assert rows[-1].value == 1.0 and "made from the build's config" in rows[-1].detail
    assert (tmp_path / "o" / "toolkit-accuracy-float16.log").is_file()


def test_two_builds_measured_on_the_same_labels_line_up_in_history(colour_builds, tmp_path) -> None:
    """Two real records (the INT8 build and its float16 build, same labels): the same labels' hash, so
    `rkdet history accuracy` compares their FP32 rows (same model: change 0) and keeps each build's rows."""
    truth = solid_images(tmp_path / "images", 1, seed=15)
    labels = _class_folders(tmp_path / "labels", truth, tmp_path / "images")
    (tmp_path / "results").mkdir()
    records = []
    for name in ("classifier", "classifier16"):
        proc = run_rkdet("accuracy", str(colour_builds[name]), "--labels", str(labels), "--out", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr[-2000:]
        records.append(tmp_path / name / "accuracy.json")
    first, second = (read_accuracy(r) for r in records)
    assert first.labels_sha256 == second.labels_sha256 and len(first.labels_sha256 or "") == 64
    assert first.fingerprint != second.fingerprint
    proc = run_rkdet("history", "import", "--results", str(tmp_path / "results"), "--accuracy", str(records[0]),
                     "--accuracy", str(records[1]))
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = run_rkdet("history", "accuracy", "--results", str(tmp_path / "results"), "--json")
    rows = json.loads(proc.stdout)["accuracy"]
    fp32 = [(r["build"], r["value"], r["change_vs_previous_build"]) for r in rows if r["variant"] == "FP32"]
    assert fp32 == [(first.fingerprint, 1.0, None), (second.fingerprint, 1.0, 0.0)]
    assert {(r["build"], r["variant"]) for r in rows} == {(first.fingerprint, "FP32"), (first.fingerprint, "INT8 (emulation)"),
                                                          (second.fingerprint, "FP32")}
