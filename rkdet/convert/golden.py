"""Golden data: inputs exactly as fed, and reference outputs stored as result sets (docs/FORMATS.md).

Storing the references in the same format the board runner writes means `rkdet diff` reads a build's
golden folder and a board's results with one loader, and every output is named by the same hash.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np

from rkdet.records.io import write_json_atomic
from rkdet.runner import output_hash, summarize
# uint8 NHWC as fed to the NPU -> float32 NCHW with mean/std: defined once, in the board-side self-check,
# so the golden reference, deploy's --backend onnxruntime inputs and the self-check use the same transform
from rkdet.selfcheck import fp32_input as to_model_input


def onnxruntime_reference(onnx_bytes: bytes, inputs: dict[str, np.ndarray], input_name: str,
                          mean: tuple[float, ...], std: tuple[float, ...]) -> tuple[dict[str, dict[str, np.ndarray]], str]:
    """FP32 outputs from onnxruntime with deterministic settings (one thread, sequential, fixed opt level)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(onnx_bytes, sess_options=opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    results = {}
    for key, tensor in inputs.items():
        outs = session.run(names, {input_name: to_model_input(tensor, mean, std)})
        results[key] = dict(zip(names, outs))
    return results, f"onnxruntime {ort.__version__} CPU, 1 thread, sequential, ORT_ENABLE_ALL"


def write_result_set(folder: Path, *, backend: str, backend_detail: str, model_path: str, model_sha256: str,
                     inputs: dict[str, tuple[str, str, np.ndarray]], outputs: dict[str, dict[str, np.ndarray]],
                     output_names: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Write one run of reference outputs as a result set; return {input: {output: hash}}.

    `inputs` maps input name -> (file name under golden/inputs, file sha256, tensor).
    Called on a staging folder that is renamed into place as a whole, so plain writes suffice here.
    """
    (folder / "outputs").mkdir(parents=True, exist_ok=True)
    hashes: dict[str, dict[str, str]] = {}
    index = []
    for name in sorted(inputs):
        records, hashes[name] = [], {}
        for out_name in output_names:
            array = np.ascontiguousarray(outputs[name][out_name])
            digest = output_hash(array)
            hashes[name][out_name] = digest
            target = folder / "outputs" / f"{digest}.npy"
            if not target.exists():
                np.save(target, array, allow_pickle=False)
            records.append({"name": out_name, "hash": digest, "shape": list(array.shape), "dtype": str(array.dtype)})
        index.append({"run": 0, "input": name, "latency_ms": None, "t_unix": None, "backend": backend,
                      "outputs": records})
    (folder / "index.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in index), encoding="utf-8")
    write_json_atomic(str(folder / "run.json"), {
        "schema": "rkdet.run/1", "backend": backend, "backend_detail": backend_detail, "emulated": False,
        "model": {"path": model_path, "sha256": model_sha256},
        "inputs": [{"name": n, "file": f, "sha256": h, "shape": list(t.shape), "dtype": str(t.dtype)}
                   for n, (f, h, t) in sorted(inputs.items())],
        "outputs": list(output_names), "repeats": 1, "warmup": 0, "core_mask": None, "affinity": None,
        "python": platform.python_version(), "platform": f"{sys.platform}-{platform.machine()}",
        "started_unix": None, "finished_unix": None, "status": "complete", "error": None,
    })
    write_json_atomic(str(folder / "summary.json"), summarize(index, backend))
    return hashes
