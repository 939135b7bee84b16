"""THE reference rule, and the float input of the onnx-fp32 reference.

Why on the board side: deploy, `rkdet diff` and rkdet-selfcheck (on the board) must pick the same
golden set for a board's outputs, and the host's golden data, deploy's onnxruntime inputs and the
self-check must feed the FP32 model the same tensor; one definition each, importable by both.
"""
from typing import Any, Optional, Sequence

from .backend_table import BACKENDS, REFERENCE_FP32, REFERENCE_NPU, facts, reference
from .numpy_or_none import np

REFERENCES = (REFERENCE_NPU, REFERENCE_FP32)  # the golden result sets a build holds (golden/<reference>/)

def reference_for(backend_name, emulated, emulates_npu=False):
    # type: (str, bool, bool) -> str
    """THE rule (deploy, `rkdet diff` and this self-check all call it): the golden set a board's outputs
    are judged against, by the backend's facts (rkdet.onboard.backend_table.reference): the simulator for
    an NPU backend on an NPU, and for an emulated NPU backend that emulates an NPU's INT8 outputs (its
    test-control NPU mode; run.json `emulates_npu`); onnx-fp32 for a CPU backend and for the emulated
    double's default mode (it computes with onnxruntime FP32)."""
    return reference(facts(backend_name), emulated, emulates_npu)


def reference_for_run(run_info):
    # type: (Any) -> Optional[str]
    """The rule applied to a result set's run.json; None when it names no board backend (a golden set,
    an array file): then nothing can be picked."""
    if not isinstance(run_info, dict) or run_info.get("backend") not in BACKENDS:
        return None
    return reference_for(run_info["backend"], run_info.get("emulated") is True, run_info.get("emulates_npu") is True)


def fp32_input(tensor, mean, std):
    # type: (Any, Sequence[float], Sequence[float]) -> Any
    """uint8 NHWC as fed to the NPU -> float32 NCHW, (x - mean) / std: the transform of the build's
    onnx-fp32 reference. The one definition: the host's golden data (rkdet.convert.golden) and deploy's
    --backend onnxruntime inputs import it from here."""
    x = np.ascontiguousarray(tensor.transpose(0, 3, 1, 2)).astype(np.float32)
    m = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
    return (x - m) / s
