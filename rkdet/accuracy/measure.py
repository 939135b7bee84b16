"""Compose one measurement: labels read and checked first, then every variant on the same fed tensors.

The rows: FP32 (the build's model.onnx), then for the build and each other build of the same model
(`--variant`, e.g. a float16 build) its emulation when it has one and, with `simulate`, the toolkit's
simulator on a hermetic rebuild; then each board result set. Another build counts as the same model only
when its prepared graph, input size and preprocessing are the build's (the same FP32 row and fed tensors).
"""

from __future__ import annotations

from pathlib import Path

from rkdet.accuracy import runs, table
from rkdet.accuracy.inputs import BuildModel, FedImage, feed, load_model, save_fed
from rkdet.accuracy.labels import labels_digest, read_labels
from rkdet.accuracy.metrics import Score, metric_for
from rkdet.decode.tasks import semantic
from rkdet.errors import InputError
from rkdet.log import Log
from rkdet.records.accuracy import AccuracyRecord
from rkdet.records.build import BuildRecord


def _same_model(model: BuildModel, other: BuildModel) -> None:
    if other.onnx_bytes != model.onnx_bytes or other.input_hw != model.input_hw or other.preprocess != model.preprocess:
        what = ("its prepared model.onnx" if other.onnx_bytes != model.onnx_bytes else
                "its input size" if other.input_hw != model.input_hw else "its preprocess section")
        raise InputError(f"--variant {other.folder}: not a build of {model.folder.name}'s model ({what} differs); "
                         "compare builds of one model with the same preprocessing")


def _quantized_rows(model: BuildModel, fed: dict[str, FedImage], simulate: bool, config: Path | None,
                    progress: Log, toolkit_logs: Path | None, notes: list[str]) -> list[runs.VariantOutputs]:
    """One build's rows: its emulation (when it has one) and, with `simulate`, its simulator."""
    out = []
    emulated = runs.emulation(model, fed)
    if emulated is not None:
        out.append(emulated)
    elif not simulate:
        notes.append(f"{model.folder.name} has no emulation (model.int8emu.onnx): pass --simulator for its "
                     f"{model.quantized} row")
    if simulate:
        log = None if toolkit_logs is None else toolkit_logs / f"toolkit-accuracy-{model.folder.name}.log"
        simulated, match = runs.simulator(model, fed, config, progress, log)
        out.append(simulated)
        if not match:
            notes.append(f"the {simulated.name} row is a rebuild whose fingerprint differs from {model.folder.name}'s")
    return out


def measure(build: BuildRecord, labels_path: Path, images: Path | None, results: tuple[Path, ...],
            progress: Log, *, others: tuple[BuildRecord, ...] = (), simulate: bool = False,
            config: Path | None = None, toolkit_logs: Path | None = None,
            save_inputs: Path | None = None, float16: bool = False) -> AccuracyRecord:
    """FP32, then each build's quantized rows (`others`: more builds of the same model), a float16 build made
    from the build's config (`float16`), then each board result set, against the labels, as one record.
    `toolkit_logs`: the folder for each simulator rebuild's log; `save_inputs`: a new folder for the fed
    tensors (rkdet-run's `--inputs`)."""
    model = load_model(build)
    extra = [load_model(b) for b in others]
    for other in extra:
        _same_model(model, other)
    labels = read_labels(labels_path, images, classes=model.layout.nc or None, per_pixel=model.task is semantic.TASK)
    metric = metric_for(model)
    names = tuple(s.name for s in labels.samples)
    boards = [runs.board_results(model, folder, names) for folder in results]  # refused before anything runs
    progress(f"{len(names)} labelled image(s): preprocessing as {build.folder.name} is fed")
    fed = feed(model, labels.samples)
    if save_inputs is not None:  # for rkdet-run on a board (--inputs), then scored here with --results
        save_fed(fed, save_inputs)
        progress(f"wrote the {len(fed)} fed tensor(s) to {save_inputs} (rkdet-run --inputs)")
    notes: list[str] = []
    variants = [runs.fp32(model, fed)]
    for each in (model, *extra):
        variants += _quantized_rows(each, fed, simulate, config, progress, toolkit_logs, notes)
    if float16:
        log = None if toolkit_logs is None else toolkit_logs / "toolkit-accuracy-float16.log"
        variants.append(runs.float16_made(model, fed, config, progress, log))
    variants += boards
    scored: list[tuple[str, str, Score]] = []
    for v in variants:
        progress(f"{v.name}: scoring against {labels_path.name}")
        scored.append((v.name, v.detail, metric(model, labels, v, fed)))
    if any(v.name.endswith("(emulation)") for v in variants):
        notes.append("an emulation row rounds every tensor to its build's quantization grid: close to the simulator "
                     "and the NPU, not bitwise (docs/EMULATOR.md)")
    return AccuracyRecord(build.folder.name, model.fingerprint, labels_path.name, len(names),
                          tuple(table.rows(scored)), tuple(notes), labels_digest(labels))
