"""Compose one measurement: labels read and checked first, then every variant on the same fed tensors."""

from __future__ import annotations

from pathlib import Path

from rkdet.accuracy import runs, table
from rkdet.accuracy.inputs import feed, load_model
from rkdet.accuracy.labels import read_labels
from rkdet.accuracy.metrics import Score, metric_for
from rkdet.decode.tasks import semantic
from rkdet.log import Log
from rkdet.records.accuracy import AccuracyRecord
from rkdet.records.build import BuildRecord


def measure(build: BuildRecord, labels_path: Path, images: Path | None, results: tuple[Path, ...],
            progress: Log, *, simulate: bool = False, config: Path | None = None,
            toolkit_log: Path | None = None) -> AccuracyRecord:
    """FP32, the build's emulation, the simulator (`simulate`: a hermetic rebuild) and each board result set
    against the labels, as one record."""
    model = load_model(build)
    labels = read_labels(labels_path, images, classes=model.layout.nc or None, per_pixel=model.task is semantic.TASK)
    metric = metric_for(model)
    names = tuple(s.name for s in labels.samples)
    boards = [runs.board_results(model, folder, names) for folder in results]  # refused before anything runs
    progress(f"{len(names)} labelled image(s): preprocessing as {build.folder.name} is fed")
    fed = feed(model, labels.samples)
    variants = [runs.fp32(model, fed)]
    emulated = runs.emulation(model, fed)
    notes = []
    if emulated is not None:
        variants.append(emulated)
    else:
        notes.append(f"{build.folder.name} has no INT8 emulation (model.int8emu.onnx): no quantized row")
    if simulate:
        simulated, match = runs.simulator(model, fed, config, progress, toolkit_log)
        variants.append(simulated)
        if not match:
            notes.append(f"the simulator row is a rebuild whose fingerprint differs from {build.folder.name}'s")
    variants += boards
    scored: list[tuple[str, str, Score]] = []
    for v in variants:
        progress(f"{v.name}: scoring against {labels_path.name}")
        scored.append((v.name, v.detail, metric(model, labels, v, fed)))
    notes.append("the emulation rounds every tensor to the build's quantization grid: close to the simulator and "
                 "the NPU, not bitwise (docs/EMULATOR.md)")
    return AccuracyRecord(build.folder.name, model.fingerprint, labels_path.name, len(names),
                          tuple(table.rows(scored)), tuple(notes))
