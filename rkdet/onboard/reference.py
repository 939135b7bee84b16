"""THE reference rule, and the float input of the onnx-fp32 reference.

Why on the board side: deploy, `rkdet diff` and rkdet-selfcheck (on the board) must pick the same
golden set for a board's outputs, and the host's golden data, deploy's onnxruntime inputs and the
self-check must feed the FP32 model the same tensor; one definition each, importable by both.
"""
import platform
from typing import Any, Dict, List, Optional, Sequence

from .backend_table import BACKENDS, REFERENCE_FP32, REFERENCE_NPU, facts, reference
from .numpy_or_none import np

REFERENCES = (REFERENCE_NPU, REFERENCE_FP32)  # the golden result sets a build holds (golden/<reference>/)

GRAPH_OPT_LEVELS = ("disable", "basic", "extended", "all")  # onnxruntime's graph optimization levels
# THE onnx-fp32 reference's onnxruntime session: one intra-op thread, sequential, graph optimization
# "extended". Measured (bench/results/cross_cpu_reference.md, docs/FORMATS.md "CPU class"): "all" adds the
# NCHWc layout kernels, whose block follows the vector width, so AVX2 and AVX-512 hosts give other bits;
# "extended" gives the same bits on every x86-64 CPU with FMA3 (AVX2 and AVX-512 alike).
REFERENCE_THREADS = 1
REFERENCE_GRAPH_OPT = "extended"

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


def session_options(ort, threads=REFERENCE_THREADS, graph_opt=REFERENCE_GRAPH_OPT):
    # type: (Any, int, str) -> Any
    """onnxruntime SessionOptions: `threads` intra-op, one inter-op, sequential, `graph_opt`; the defaults are
    the onnx-fp32 reference's (the golden data, `--backend onnxruntime`, the self-check, the emulated runtime)."""
    levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
              "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = levels[graph_opt]
    return options


def reference_detail(ort_version):
    # type: (str) -> str
    """How the onnx-fp32 reference was computed, and on which CPU class (a golden set's backend_detail)."""
    return "onnxruntime %s CPU, %d thread, sequential, graph optimization %s, on %s" % (
        ort_version, REFERENCE_THREADS, REFERENCE_GRAPH_OPT, cpu_class()["class"])


def fp32_input(tensor, mean, std):
    # type: (Any, Sequence[float], Sequence[float]) -> Any
    """uint8 NHWC as fed to the NPU -> float32 NCHW, (x - mean) / std: the transform of the build's
    onnx-fp32 reference. The one definition: the host's golden data (rkdet.convert.golden) and deploy's
    --backend onnxruntime inputs import it from here."""
    x = np.ascontiguousarray(tensor.transpose(0, 3, 1, 2)).astype(np.float32)
    m = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
    return (x - m) / s


# The x86-64 features onnxruntime's CPU kernels (MLAS) dispatch on for FP32 work, as numpy's run-time
# detection names them: the kernels, and so an output's last bits, follow these and not the CPU's name.
DISPATCH_FEATURES = ("SSE41", "AVX", "FMA3", "AVX2", "AVX512F", "AVX512BW", "AVX512DQ", "AVX512VL", "AVX512VNNI")


def cpu_features():
    # type: () -> List[str]
    """The DISPATCH_FEATURES this process's CPU reports (CPUID, as numpy's run-time dispatch reads it, so
    under `qemu-x86_64 -cpu MODEL` the emulated model's); [] off x86-64 or without numpy."""
    if np is None:
        return []
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as found  # numpy >= 2
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as found  # numpy 1.20 .. 1.26
        except ImportError:
            return []
    return [f for f in DISPATCH_FEATURES if found.get(f)]


def cpu_class():
    # type: () -> Dict[str, Any]
    """{"class": NAME, "features": [...]}: NAME says which FP32 kernels the onnx-fp32 reference ran on
    (docs/FORMATS.md "CPU class"); two references of one class are bit-identical under
    REFERENCE_SESSION, references of two classes are compared numerically."""
    machine = platform.machine().lower()
    features = cpu_features()
    if machine not in ("x86_64", "amd64"):
        name = machine or "unknown"
    elif not features:
        name = "x86-64 (features unknown)"
    elif "FMA3" in features and "AVX2" in features:
        name = "x86-64 FMA3 (AVX2 or AVX-512)"
    elif "AVX" in features:
        name = "x86-64 AVX without FMA"
    else:
        name = "x86-64 SSE"
    return {"class": name, "features": features}
