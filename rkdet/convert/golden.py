"""Golden data: inputs exactly as fed, and reference outputs stored as result sets (docs/FORMATS.md).

Storing the references in the same format the board runner writes means `rkdet diff` reads a build's
golden folder and a board's results with one loader, and every output is named by the same hash.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np

from rkdet.onboard.hashing import output_hash
# uint8 NHWC as fed to the NPU -> float32 NCHW with mean/std: defined once, on the board side, so the
# golden reference, deploy's --backend onnxruntime inputs and the self-check use the same transform
from rkdet.onboard.reference import fp32_input as to_model_input
from rkdet.onboard.reference import reference_detail, session_options
from rkdet.onboard.resultset import index_record, output_record, write_complete


def onnxruntime_reference(onnx_bytes: bytes, inputs: dict[str, np.ndarray], input_name: str,
                          mean: tuple[float, ...], std: tuple[float, ...]) -> tuple[dict[str, dict[str, np.ndarray]], str]:
    """FP32 outputs from onnxruntime with the reference's session (rkdet.onboard.reference.session_options:
    one thread, sequential, the graph optimization measured to give the same bits on AVX2 and AVX-512)."""
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_bytes, sess_options=session_options(ort), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    results = {}
    for key, tensor in inputs.items():
        outs = session.run(names, {input_name: to_model_input(tensor, mean, std)})
        results[key] = dict(zip(names, outs))
    return results, reference_detail(ort.__version__)


def write_result_set(folder: Path, *, backend: str, backend_detail: str, model_path: str, model_sha256: str,
                     inputs: dict[str, tuple[str, str, np.ndarray]], outputs: dict[str, dict[str, np.ndarray]],
                     output_names: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Write one run of reference outputs as a result set; return {input: {output: hash}}.

    `inputs` maps input name -> (file name under golden/inputs, file sha256, tensor).
    Written through the board's result-set writer, so a golden set and a board's run are one format.
    """
    hashes: dict[str, dict[str, str]] = {}
    index = []
    arrays: dict[str, np.ndarray] = {}
    for name in sorted(inputs):
        records, hashes[name] = [], {}
        for out_name in output_names:
            array = np.ascontiguousarray(outputs[name][out_name])
            digest = output_hash(array)
            hashes[name][out_name] = digest
            arrays.setdefault(digest, array)
            records.append(output_record(out_name, digest, array))
        index.append(index_record(0, name, None, None, backend, records))
    write_complete(str(folder), {  # the one result-set writer (rkdet.onboard.resultset), as on a board
        "backend": backend, "backend_detail": backend_detail, "emulated": False,
        "model": {"path": model_path, "sha256": model_sha256},
        "inputs": [{"name": n, "file": f, "sha256": h, "shape": list(t.shape), "dtype": str(t.dtype)}
                   for n, (f, h, t) in sorted(inputs.items())],
        "outputs": list(output_names), "repeats": 1, "warmup": 0, "core_mask": None, "affinity": None,
        "python": platform.python_version(), "platform": f"{sys.platform}-{platform.machine()}",
        "started_unix": None, "finished_unix": None, "status": "complete", "error": None,
    }, index, arrays)
    return hashes
