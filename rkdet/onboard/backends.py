"""The runtimes rkdet-run drives: onnxruntime (CPU, deterministic session) and RKNNLite on the NPU.

Why one module: a backend loads once, `infer()` is the timed call and `own()` makes outputs safe to
keep; rkdet-run and rkdet-selfcheck open them the same way (`make_backend`). Each runtime is imported
lazily, so a board needs only the one it uses.
"""

import os
import platform
import sys
from typing import Any, Dict, List, Optional, Sequence

from .backend_table import ONNXRUNTIME, RKNNLITE
from .bounded import loads_bounded, read_regular
from .exits import EXIT_BOARD, RunnerError
from .numpy_or_none import np
from .reference import GRAPH_OPT_LEVELS, REFERENCE_GRAPH_OPT, REFERENCE_THREADS, cpu_class, session_options


class OnnxRuntimeBackend(object):
    """onnxruntime on CPU with a deterministic session (fixed threads, sequential execution)."""

    name = ONNXRUNTIME.name

    def __init__(self, model, threads=REFERENCE_THREADS, graph_opt=REFERENCE_GRAPH_OPT):
        # type: (str, int, str) -> None
        try:
            import onnxruntime as ort
        except ImportError:
            raise RunnerError("onnxruntime is not installed for %s; install it or use --backend rknnlite"
                              % sys.executable, EXIT_BOARD)
        options = session_options(ort, threads, graph_opt)  # the onnx-fp32 reference's by default
        try:
            self._session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own exception types for bad models
            raise RunnerError("%s: onnxruntime cannot load the model (%s)" % (model, str(err).splitlines()[0] if str(err) else type(err).__name__))
        self.options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1,
                        "execution_mode": "ORT_SEQUENTIAL", "graph_optimization_level": graph_opt,
                        "providers": self._session.get_providers()}
        cpu = cpu_class()  # FP32 kernels follow the CPU's features: a reference of another class is not bitwise
        self.options.update({"cpu_class": cpu["class"], "cpu_features": cpu["features"]})
        self.detail = "onnxruntime %s on %s (CPUExecutionProvider, intra_op=%d, inter_op=1, ORT_SEQUENTIAL, graph_optimization=%s, CPU class %s)" % (
            ort.__version__, platform.machine(), threads, graph_opt, cpu["class"])
        self.emulated = False
        self.emulates_npu = False
        self.stack = {"onnxruntime": str(ort.__version__)}
        self._input_names = [i.name for i in self._session.get_inputs()]
        self.output_names = [o.name for o in self._session.get_outputs()]
        types = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
                 "tensor(uint8)": "uint8", "tensor(int8)": "int8", "tensor(int16)": "int16",
                 "tensor(int32)": "int32", "tensor(int64)": "int64", "tensor(bool)": "bool"}
        self.input_specs = [{"name": i.name, "shape": [d if isinstance(d, int) else -1 for d in i.shape],
                             "dtype": types.get(i.type)} for i in self._session.get_inputs()]

    def infer(self, feed):
        # type: (List[Any]) -> List[Any]
        try:
            return self._session.run(None, dict(zip(self._input_names, feed)))
        except Exception as err:  # onnxruntime's own exception types
            raise RunnerError("onnxruntime inference failed (%s)" % (str(err).splitlines() or [type(err).__name__])[0], EXIT_BOARD)

    @staticmethod
    def own(outputs):
        # type: (List[Any]) -> List[Any]
        return outputs  # onnxruntime returns fresh arrays on every call

    def close(self):
        # type: () -> None
        self._session = None


def _package_version(module, dists):
    # type: (Any, Sequence[str]) -> str
    version = getattr(module, "__version__", None)
    if version:
        return str(version)
    try:
        from importlib.metadata import version as dist_version  # novm (Python 3.8+, guarded)
    except ImportError:
        dist_version = None
    for dist in dists:
        try:
            if dist_version is not None:
                return dist_version(dist)
            import pkg_resources  # older boards (Python 3.6/3.7) have no importlib.metadata
            return pkg_resources.get_distribution(dist).version
        except Exception:
            continue
    return "unknown"


def _accepts_core_mask(init_runtime):
    # type: (Any) -> Optional[bool]
    """Whether init_runtime takes core_mask (RKNNLite 2.x) or not (legacy v1); None if unknown."""
    try:
        import inspect
        return "core_mask" in inspect.signature(init_runtime).parameters
    except (TypeError, ValueError):
        return None


class RknnLiteBackend(object):
    """RKNNLite (rknn-toolkit-lite2, or the legacy v1 Lite without core_mask) on the board's NPU.

    RKNNLite reports failure by returning non-zero or None instead of raising, so every return
    is checked; its output buffers may be reused by the next call, so outputs are copied.
    """

    name = RKNNLITE.name

    def __init__(self, model, core_mask="auto", io_spec=None):
        # type: (str, str, Optional[Dict[str, Any]]) -> None
        try:
            import rknnlite
            import rknnlite.api as api
        except ImportError:
            raise RunnerError("rknnlite (rknn-toolkit-lite2) is not installed for %s; install its wheel on the board or use --backend onnxruntime"
                              % sys.executable, EXIT_BOARD)
        emulation = getattr(api, "RKDET_EMULATED", None) or getattr(rknnlite, "RKDET_EMULATED", None)
        self.emulated = bool(emulation)
        version = _package_version(rknnlite, ("rknn-toolkit-lite2", "rknn_toolkit_lite2", "rknn-toolkit-lite", "rknn_toolkit_lite"))
        try:
            self._lite = api.RKNNLite()
            loaded = self._lite.load_rknn(model)
        except Exception as err:  # the runtime normally returns codes, but guard its exceptions too
            raise RunnerError("%s: RKNNLite.load_rknn raised %s: %s" % (model, type(err).__name__, err), EXIT_BOARD)
        if loaded != 0:
            raise RunnerError("%s: RKNNLite.load_rknn failed; the model may be for another SoC or runtime version" % model, EXIT_BOARD)
        self._legacy = False
        try:
            ret = self._init_runtime(api.RKNNLite, core_mask, _accepts_core_mask(self._lite.init_runtime))
        except RunnerError:
            raise
        except Exception as err:
            raise RunnerError("%s: RKNNLite.init_runtime raised %s: %s" % (model, type(err).__name__, err), EXIT_BOARD)
        if ret != 0:
            raise RunnerError("%s: RKNNLite.init_runtime(core_mask=%s) failed (returned %r); check the NPU driver and core mask"
                              % (model, core_mask, ret), EXIT_BOARD)
        # Only rkdet's emulated runtime says this (its test-control NPU mode: the simulator's outputs).
        self.emulates_npu = bool(emulation) and getattr(self._lite, "rkdet_emulates_npu", False) is True
        if self.emulates_npu:
            emulation = "%s; %s" % (emulation, getattr(self._lite, "rkdet_npu_detail", None)
                                     or "EMULATED NPU mode: the RKNN simulator's outputs, not onnxruntime")
        self.detail = "rknnlite %s%s%s" % (version, " (legacy v1 API, no core_mask)" if self._legacy else "",
                                            " (EMULATED: %s)" % emulation if emulation else "")
        io_spec = io_spec or {}
        self.input_specs = io_spec.get("inputs")
        self.output_names = io_spec.get("outputs")
        self._formats = [s.get("layout", "nhwc") for s in self.input_specs] if self.input_specs else None
        self.stack = {"rknn_toolkit_lite": version, "sdk_version": self._sdk_version()}
        self.options = {"core_mask": core_mask, "legacy_api": self._legacy,
                        "io_spec": "from io.json" if io_spec else "none (inputs checked for consistency only)"}

    def _sdk_version(self):
        # type: () -> Optional[str]
        """RKNNLite.get_sdk_version() (the runtime library and driver as the runtime reports them), or None."""
        try:
            text = self._lite.get_sdk_version()
        except Exception:
            return None
        return " ".join(str(text).split())[:400] if text else None

    def _init_runtime(self, cls, core_mask, accepts):
        # type: (Any, str, Optional[bool]) -> Any
        """init_runtime with the core mask; the legacy v1 API (no core_mask) only with auto."""
        masks = {"auto": "NPU_CORE_AUTO", "0": "NPU_CORE_0", "1": "NPU_CORE_1", "2": "NPU_CORE_2",
                 "0_1": "NPU_CORE_0_1", "0_1_2": "NPU_CORE_0_1_2"}
        constant = getattr(cls, masks[core_mask], None)
        if accepts is not False and constant is not None:
            try:
                return self._lite.init_runtime(core_mask=constant)
            except TypeError:
                if accepts:
                    raise
        elif accepts and constant is None:
            raise RunnerError("this RKNNLite has no %s; use another --core-mask" % masks[core_mask])
        self._legacy = True
        if core_mask not in ("auto", "0"):  # RKNPU1 has one core, core 0: what its runtime runs on
            raise RunnerError("the legacy RKNN Toolkit Lite (v1) API has no core_mask; use --core-mask 0 or auto")
        return self._lite.init_runtime()

    def infer(self, feed):
        # type: (List[Any]) -> List[Any]
        formats = self._formats or ["nhwc" if a.ndim == 4 else "nchw" for a in feed]
        try:
            outputs = self._lite.inference(inputs=feed, data_format=formats)
        except Exception as err:
            raise RunnerError("RKNNLite.inference raised %s: %s" % (type(err).__name__, err), EXIT_BOARD)
        if outputs is None or not isinstance(outputs, (list, tuple)):
            raise RunnerError("RKNNLite.inference returned %r instead of outputs; see the runtime log above" % (outputs,), EXIT_BOARD)
        return list(outputs)

    @staticmethod
    def own(outputs):
        # type: (List[Any]) -> List[Any]
        return [np.array(o, copy=True) for o in outputs]

    def close(self):
        # type: () -> None
        try:
            self._lite.release()
        except Exception:
            pass


def load_io_spec(model):
    # type: (str) -> Optional[Dict[str, Any]]
    """<model stem>.io.json written by deploy beside the .rknn: input names/shapes/dtypes, output names.

    RKNNLite cannot tell the runner its tensors, so this is how inputs are checked on a board.
    """
    path = os.path.splitext(model)[0] + ".io.json"
    if not os.path.exists(path):
        return None
    try:
        spec = loads_bounded(read_regular(path, 16 << 20), path)  # a FIFO or 100k brackets: this one line
        for item in spec.get("inputs") or []:
            if not isinstance(item.get("name"), str) or not isinstance(item.get("shape"), list):
                raise ValueError("every inputs[] entry needs name and shape")
        if spec.get("outputs") is not None and not all(isinstance(n, str) for n in spec["outputs"]):
            raise ValueError("outputs must be a list of names")
        return spec
    except (OSError, IOError, ValueError, AttributeError) as err:
        raise RunnerError("%s: invalid io spec (%s); expected {\"inputs\": [{\"name\", \"shape\", \"dtype\"}], \"outputs\": [names]}" % (path, err))


def make_backend(backend, model, core_mask="auto", threads=REFERENCE_THREADS, graph_opt=REFERENCE_GRAPH_OPT, io_spec=None):
    # type: (str, str, str, int, str, Optional[Dict[str, Any]]) -> Any
    """The backend named `backend` with `model` loaded; rknnlite takes `<model>.io.json` beside the
    model when there is one, else `io_spec`."""
    runtime = RUNTIMES.get(backend)
    if runtime is None:  # a backend of the table with a runner of its own (not this program)
        raise RunnerError("--backend %s is not run by this program" % backend)
    if runtime is OnnxRuntimeBackend:
        return OnnxRuntimeBackend(model, threads=threads, graph_opt=graph_opt)
    return RknnLiteBackend(model, core_mask=core_mask, io_spec=load_io_spec(model) or io_spec)


RUNTIMES = {ONNXRUNTIME.name: OnnxRuntimeBackend, RKNNLITE.name: RknnLiteBackend}  # the table's backends, implemented
