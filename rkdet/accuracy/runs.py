"""The outputs each variant gives for the labelled images: FP32, the INT8 emulation, a board's pulled results.

FP32 and the INT8 emulation run with onnxruntime under the onnx-fp32 reference's one session definition
(rkdet.onboard.reference.session_options, through rkdet.convert.golden), fed the same uint8 tensors. A
board's results are a result set (rkdet-run's format) read through the diff's bounded loader; its input
names must be the labelled images' names (rkdet-run names an input by its file stem), run 0 of each is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rkdet.accuracy.inputs import BuildModel, FedImage
from rkdet.convert.golden import onnxruntime_reference
from rkdet.diff.resultset import open_source
from rkdet.errors import InputError
from rkdet.layers.rebuild import BuildSource, from_build, rebuild_and_simulate
from rkdet.log import Log
from rkdet.records.accuracy import BOARD_PREFIX, EMULATED_BOARD

Outputs = dict[str, dict[str, np.ndarray]]  # input name -> output name -> array


@dataclass(frozen=True)
class VariantOutputs:
    """One row's outputs: what computed them, and for every labelled image its outputs in model order."""

    name: str  # the table's row: "FP32", "INT8 (emulation)", "board: rknnlite_npu"
    detail: str  # how it was computed
    outputs: Outputs


def onnx_outputs(model: BuildModel, onnx_bytes: bytes, fed: dict[str, FedImage]) -> tuple[Outputs, str]:
    """Outputs of an ONNX (the FP32 model or the INT8 emulation) for the fed tensors, the reference's session."""
    tensors = {name: f.tensor for name, f in fed.items()}
    return onnxruntime_reference(onnx_bytes, tensors, model.input_name, model.preprocess.mean, model.preprocess.std)


def fp32(model: BuildModel, fed: dict[str, FedImage]) -> VariantOutputs:
    outputs, detail = onnx_outputs(model, model.onnx_bytes, fed)
    return VariantOutputs("FP32", f"model.onnx, {detail}", outputs)


def emulation(model: BuildModel, fed: dict[str, FedImage]) -> VariantOutputs | None:
    """The build's INT8 emulation (model.int8emu.onnx: close to the simulator, not bitwise); None without one."""
    if model.emulation_bytes is None:
        return None
    outputs, detail = onnx_outputs(model, model.emulation_bytes, fed)
    return VariantOutputs(f"{model.quantized} (emulation)", f"model.int8emu.onnx, {detail}", outputs)


def simulator(model: BuildModel, fed: dict[str, FedImage], config: Path | None, progress: Log,
              log_to: Path | None = None) -> tuple[VariantOutputs, bool | None]:
    """The toolkit's simulator on the labelled images: the build rebuilt in the hermetic worker with its
    recorded options (rkdet.layers.rebuild, as `rkdet layers` does), the labelled tensors simulated beside the
    golden inputs; (the row, whether the rebuilt fingerprint equals the build's). `config`: where a
    published build's model and images are (it records names only)."""
    src = from_build(model.folder, config, "rkdet accuracy {build} --simulator")
    match, outputs = rebuild_and_simulate(src, {name: f.tensor for name, f in fed.items()}, progress, log_to)
    said = ("the rebuilt fingerprint equals the build's" if match else
            "WARNING: the rebuilt fingerprint differs from the build's: these are the rebuild's outputs")
    return VariantOutputs(f"{model.quantized} (simulator)", f"rknn-toolkit2 simulator, hermetic rebuild: {said}",
                          outputs), match


def float16_made(model: BuildModel, fed: dict[str, FedImage], config: Path | None, progress: Log,
                 log_to: Path | None = None) -> VariantOutputs:
    """A float16 build made from the build's own config with quantization off (`quantize.enabled: false,
    force_fp16: true`: what a float16 build folder is) in the hermetic worker, the labelled images simulated;
    its prepared graph is checked to be the build's. No build folder is written: the row is the simulator's."""
    src = from_build(model.folder, config, "rkdet accuracy {build} --float16")
    quantize = src.cfg.quantize.model_copy(update={"enabled": False, "force_fp16": True, "float_layers": []})
    made = BuildSource(src.cfg.model_copy(update={"quantize": quantize}), src.platform, None, src.manifest)
    _, outputs = rebuild_and_simulate(made, {name: f.tensor for name, f in fed.items()}, progress, log_to)
    return VariantOutputs("float16 (simulator, made)", "rknn-toolkit2 simulator, a float16 build made from the "
                          "build's config (quantize.enabled false, force_fp16 true) in the hermetic worker", outputs)


def board_results(model: BuildModel, folder: Path, names: tuple[str, ...]) -> VariantOutputs:
    """A pulled result set (or a run folder holding one) for the labelled images; each must be in it."""
    source = open_source(folder, role="--results")
    if source.single_file:
        raise InputError(f"--results {folder}: a result set folder is needed (run.json, index.jsonl), not one array file")
    first: dict[str, dict[str, np.ndarray]] = {}
    wanted = set(names)
    for rec in source.records():
        if rec.run != 0 or rec.input not in wanted:
            continue
        got = {o.name: source.load(o) for o in rec.outputs}
        missing = [n for n in model.output_names if n not in got]
        if missing:
            raise InputError(f"--results {folder}: input {rec.input!r} has no output {missing[0]!r}; the results are of "
                             "another model")
        first[rec.input] = got
    absent = sorted(wanted - set(first))
    if absent:
        raise InputError(f"--results {folder}: no result for labelled image {absent[0]!r} ({len(absent)} missing); run the "
                         "board on the labelled images (rkdet-run names each input by its file stem)")
    info = source.run_info
    backend = (info.backend or "unknown backend")[:40]  # a board's word: bounded before it names a row
    emulated = EMULATED_BOARD if info.emulated else ""
    return VariantOutputs(f"{BOARD_PREFIX}{backend}{emulated}", f"{folder}: {info.backend_detail or backend}", first)
