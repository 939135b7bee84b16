"""THE registry of board backends: what each runtime rkdet-run can drive IS, as facts both sides read.

Why here, stdlib only: the on-board program (Python 3.6, stdlib + numpy) must know a backend's model
file, whether it takes an NPU core mask, which input it is fed and which golden set judges it, and
the host must know the very same facts (deploy, fleet, bisection, self-check, `rkdet diff`); one
table, imported by both, so they cannot disagree. The host's descriptors (rkdet/backends/: preflight
rows, emulator staging, runner environment) are built on these facts. Adding a backend is one entry
here (and its host module in rkdet/backends/); nothing else names a backend.
"""

from typing import Dict, NamedTuple, Tuple

REFERENCE_NPU = "simulator"  # the golden set of the toolkit's simulator: what an NPU's INT8 outputs are judged by
REFERENCE_FP32 = "onnx-fp32"  # the golden set of the prepared ONNX on onnxruntime FP32

BackendFacts = NamedTuple("BackendFacts", [
    ("name", str),  # run.json "backend", `--backend` value
    ("model_file", str),  # the build file the runner loads (model.rknn, model.onnx)
    ("on_npu", bool),  # runs on the NPU: takes an NPU core mask, needs the RKNN runtime, may be the emulated double
    ("fp32_input", bool),  # fed the model's float32 NCHW input (mean/std applied), not the NPU's uint8 NHWC
])


def reference(facts, emulated, emulates_npu=False):
    # type: (BackendFacts, bool, bool) -> str
    """THE reference rule (deploy, `rkdet diff`, bisection and the on-board self-check all call it): the
    simulator for an NPU backend on a real NPU, and for the emulated double in its test-control NPU mode
    (run.json `emulates_npu`); onnx-fp32 for a CPU backend and for the emulated double's default mode
    (it computes with onnxruntime FP32)."""
    if not facts.on_npu:
        return REFERENCE_FP32
    return REFERENCE_NPU if (not emulated or emulates_npu) else REFERENCE_FP32


RKNNLITE = BackendFacts("rknnlite", "model.rknn", on_npu=True, fp32_input=False)
ONNXRUNTIME = BackendFacts("onnxruntime", "model.onnx", on_npu=False, fp32_input=True)
RKNN_C = BackendFacts("rknn_c", "model.rknn", on_npu=True, fp32_input=False)  # rkdet-run-c on librknnrt (its own runner)

TABLE = {f.name: f for f in (RKNNLITE, ONNXRUNTIME, RKNN_C)}  # type: Dict[str, BackendFacts]
BACKENDS = tuple(TABLE)  # type: Tuple[str, ...]  # run.json "backend", `--backend` choices, in this order
NPU_BACKENDS = "|".join(f.name for f in TABLE.values() if f.on_npu)  # for a message: the backends a core mask applies to
DEFAULT_BACKEND = RKNNLITE.name  # what rkdet-run, deploy and the config run when no backend is named
# The runtime settings a backend's runner chooses without saying so (rkdet-run-c records every one of them
# in run.json `backend_options`): lite2 dequantises INT8 outputs itself (rknn-toolkit2#445: want_float),
# feeds 4-D input as NHWC (transposing NCHW silently) and never passes input through untouched. A
# backend-pair cell (rkdet.diff.backend_pair) compares these with what the other runner recorded.
IMPLICIT_OPTIONS = {RKNNLITE.name: {"want_float": 1, "pass_through": 0, "input_fmt": "nhwc"}}  # type: Dict[str, Dict[str, object]]
#: the settings a backend-pair cell compares (rkdet-run-c's flags --want-float, --pass-through, --input-fmt)
PAIR_SETTINGS = ("want_float", "pass_through", "input_fmt", "input_type")

# A native runner (rkdet-run-c) is started as `exec ${RKDET_NATIVE_EXEC:+"$RKDET_NATIVE_EXEC"} PROGRAM ARGS`:
# unset on a real board (the program runs itself); rkdet's emulated board sets it to its qemu-user
# launcher (rkdet/emulator/capi_double/board_exec.py), as an x86-64 host cannot exec an aarch64 binary.
NATIVE_EXEC_ENV = "RKDET_NATIVE_EXEC"


def facts(name):
    # type: (str) -> BackendFacts
    """The facts of backend `name` (KeyError for a name not in the table: callers check BACKENDS first)."""
    return TABLE[name]
