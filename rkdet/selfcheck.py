"""rkdet-selfcheck: check before you serve. Runs a build's self-check bundle on the board's runtime.

A serving app (or a systemd `ExecStartPre=`) calls this before it takes traffic: it loads the model
the app will serve, runs the few golden inputs the bundle carries, and compares every output hash
with the reference the board is judged against (the RKNN simulator for rknnlite on an NPU; onnx-fp32
for onnxruntime and for the emulated rknnlite, which computes with onnxruntime FP32). One line, one
exit code, in seconds:

    0  identical: every output of every bundled input has the expected hash
    1  differs: names the input, the output, the first differing element and both values
    2  bad bundle or usage: unreadable, wrong schema, out of bounds, inconsistent
    3  runtime problem: runtime missing, model cannot load or run, or the model is not the bundle's

Like rkdet/runner.py this runs ON THE BOARD: Python 3.6+, stdlib + numpy + the runtime. It reuses
the runner's output hash and backends, importing `rkdet.runner` when it is part of the installed
package and the sibling file `runner.py` when deployed as two files (`rkdet deploy` puts them side by
side). From a serving app: `import selfcheck; result = selfcheck.check(model, bundle)`.

The bundle (`selfcheck.json` in the build folder, written by `rkdet convert`) is untrusted input:
its size, every array's shape, dtype and decompressed size, and every name are bounded before use.
Format: docs/FORMATS.md ("Self-check bundle").
"""

import argparse
import base64
import binascii
import json
import os
import re
import sys
import threading
import time
import zlib

try:
    from typing import Any, Dict, List, Optional, Sequence, Tuple
except ImportError:  # pragma: no cover - typing is stdlib from 3.5 on
    pass

if __package__:  # part of the installed rkdet package (host, or a wheel on the board)
    from rkdet import runner as _runner
else:  # deployed as the files selfcheck.py + runner.py side by side (also under python -I)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import runner as _runner  # noqa: E402

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_BAD_BUNDLE = 2
EXIT_RUNTIME = 3

BUNDLE_SCHEMA = "rkdet.selfcheck/1"
BUNDLE_FILE = "selfcheck.json"
REFERENCES = ("simulator", "onnx-fp32")
# Bounds on the untrusted bundle (the writer refuses to exceed them too).
MAX_BUNDLE_BYTES = 64 << 20
MAX_INPUTS = 64
MAX_OUTPUTS = 64
MAX_NDIM = 8
MAX_ARRAY_BYTES = 64 << 20
DTYPES = ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "int64", "float16", "float32", "float64")
_NAME = re.compile(r"^[^\x00-\x1f\x7f/\\]{1,200}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")

EPILOG = """exit codes:
  0  identical: every bundled input gave the expected output hashes
  1  differs: the line names input, output, first element index and both values
  2  bad bundle or usage
  3  runtime problem: runtime missing, model not loadable/runnable, or not the bundle's model"""


class BundleError(Exception):
    """The bundle is unreadable, out of bounds or inconsistent (exit 2)."""


class Mismatch(object):
    """Where the first difference is: input, output, flat element index, and the two values."""

    __slots__ = ("input", "output", "index", "expected", "actual", "detail")

    def __init__(self, input, output, index=None, expected=None, actual=None, detail=None):
        # type: (str, str, Optional[int], Any, Any, Optional[str]) -> None
        self.input = input
        self.output = output
        self.index = index
        self.expected = expected
        self.actual = actual
        self.detail = detail

    def describe(self):
        # type: () -> str
        where = "input %s, output %s" % (self.input, self.output)
        if self.index is None:
            return "%s: %s" % (where, self.detail)
        return "%s, element %d: got %r, expected %r" % (where, self.index, self.actual, self.expected)

    def __repr__(self):
        return "Mismatch(%s)" % self.describe()


class Result(object):
    """The outcome of one self-check: `exit_code` (0/1/2/3), `line` (what the CLI prints), and the facts.

    `ok` is True only for exit 0. `reference` is the result set the outputs were held against
    ("simulator" or "onnx-fp32"); `decisions` the bundle's expected decision summary per input for
    that reference (YOLOv8 detections or a top-1), for a serving app to log or compare.
    """

    __slots__ = ("exit_code", "status", "line", "reference", "backend", "emulated", "model", "inputs",
                 "mismatch", "seconds", "decisions")

    def __init__(self, exit_code, status, line, reference=None, backend=None, emulated=None, model=None,
                 inputs=0, mismatch=None, seconds=0.0, decisions=None):
        # type: (int, str, str, Optional[str], Optional[str], Optional[bool], Optional[str], int, Optional[Mismatch], float, Optional[Dict[str, Any]]) -> None
        self.exit_code = exit_code
        self.status = status  # "identical" | "differs" | "bad-bundle" | "usage" | "runtime"
        self.line = line
        self.reference = reference
        self.backend = backend
        self.emulated = emulated
        self.model = model
        self.inputs = inputs
        self.mismatch = mismatch
        self.seconds = seconds
        self.decisions = decisions

    @property
    def ok(self):
        # type: () -> bool
        return self.exit_code == EXIT_OK

    def __repr__(self):
        return "Result(exit_code=%d, %s)" % (self.exit_code, self.line)


# --------------------------------------------------------------------------------------------
# The bundle: one JSON file; arrays as zlib + base64 with dtype, shape and output hash.


def encode_array(array):
    # type: (Any) -> Dict[str, Any]
    """An array as the bundle stores it (the writer's side of decode_array)."""
    np = _runner.np
    arr = np.ascontiguousarray(array)
    return {"dtype": arr.dtype.name, "shape": [int(d) for d in arr.shape], "hash": _runner.output_hash(arr),
            "zlib": base64.b64encode(zlib.compress(arr.tobytes(), 6)).decode("ascii")}


def _need(cond, where, what):
    # type: (bool, str, str) -> None
    if not cond:
        raise BundleError("%s: %s" % (where, what))


def _check_name(value, where):
    # type: (Any, str) -> str
    _need(isinstance(value, str) and bool(_NAME.match(value)), where,
          "expected a name of 1-200 printable characters without slashes")
    return value


def _check_hash(value, where):
    # type: (Any, str) -> str
    _need(isinstance(value, str) and bool(_HEX64.match(value)), where, "expected 64 lowercase hex digits")
    return value


def _check_meta(entry, where):
    # type: (Any, str) -> Tuple[str, List[int], int]
    """dtype, shape and byte size of an array entry, bounded before anything is decoded."""
    _need(isinstance(entry, dict), where, "expected an object")
    dtype = entry.get("dtype")
    _need(dtype in DTYPES, where + ".dtype", "expected one of " + ", ".join(DTYPES))
    shape = entry.get("shape")
    _need(isinstance(shape, list) and len(shape) <= MAX_NDIM
          and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_ARRAY_BYTES for d in shape),
          where + ".shape", "expected at most %d non-negative integers" % MAX_NDIM)
    size = _runner.np.dtype(dtype).itemsize
    for d in shape:
        size *= d
        _need(size <= MAX_ARRAY_BYTES, where + ".shape", "array larger than %d MiB" % (MAX_ARRAY_BYTES >> 20))
    _check_hash(entry.get("hash"), where + ".hash")
    return dtype, shape, size


def decode_array(entry, where):
    # type: (Dict[str, Any], str) -> Any
    """The array of a bundle entry; its size is bounded before inflating and its hash verified after."""
    np = _runner.np
    dtype, shape, size = _check_meta(entry, where)
    text = entry.get("zlib")
    _need(isinstance(text, str), where + ".zlib", "expected base64 text")
    try:
        packed = base64.b64decode(text.encode("ascii"), validate=True)
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, size + 1)  # never inflates more than the shape allows
        complete = inflater.eof and not inflater.unconsumed_tail
    except (ValueError, binascii.Error, zlib.error, UnicodeEncodeError) as err:
        raise BundleError("%s.zlib: not base64 zlib data (%s)" % (where, err))
    _need(complete and len(raw) == size, where + ".zlib", "holds %s bytes, %s %s needs %d"
          % ("more" if len(raw) > size or not complete else len(raw), dtype, shape, size))
    array = np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape)
    _need(_runner.output_hash(array) == entry["hash"], where, "data does not match its hash (bundle corrupt)")
    return array


def _read_json(path):
    # type: (str) -> Any
    """The bundle, bounded (the runner's board-side reader: a regular file, MAX_BUNDLE_BYTES, depth):
    a FIFO, /dev/zero or 100k brackets are a bad bundle (exit 2), never a hang or a runtime problem."""
    try:
        data = _runner.read_regular(path, MAX_BUNDLE_BYTES)
    except (OSError, IOError) as err:
        raise BundleError("%s: cannot read the bundle (%s)" % (path, err.strerror or err))
    except ValueError:
        raise BundleError("%s: more than the %d MiB a bundle may have" % (path, MAX_BUNDLE_BYTES >> 20))
    try:
        return _runner.loads_bounded(data, path)
    except ValueError as err:
        raise BundleError("%s: not a JSON bundle (%s)" % (path, str(err).splitlines()[0][:200]))


class Bundle(object):
    """A validated bundle: models by backend, input spec, output names and the bundled inputs."""

    def __init__(self, path):
        # type: (str) -> None
        self.path = path
        doc = _read_json(path)
        _need(isinstance(doc, dict), path, "expected a JSON object")
        schema = doc.get("schema")
        _need(schema == BUNDLE_SCHEMA, path + ": schema", "is %r, this rkdet-selfcheck reads %s; use the "
              "selfcheck.py of the rkdet that wrote the bundle" % (schema if isinstance(schema, str) else type(schema).__name__, BUNDLE_SCHEMA))
        self.fingerprint = _check_hash(doc.get("fingerprint"), path + ": fingerprint")
        self.platform = doc.get("platform") if isinstance(doc.get("platform"), str) else "?"
        models = doc.get("models")
        _need(isinstance(models, dict), path + ": models", "expected an object")
        self.models = {}  # type: Dict[str, Dict[str, str]]
        for backend in ("rknnlite", "onnxruntime"):
            if backend in models:
                m = models[backend]
                _need(isinstance(m, dict), path + ": models." + backend, "expected an object")
                self.models[backend] = {"file": _check_name(m.get("file"), path + ": models.%s.file" % backend),
                                        "sha256": _check_hash(m.get("sha256"), path + ": models.%s.sha256" % backend)}
        fed = doc.get("fed_input")
        _need(isinstance(fed, dict) and fed.get("layout") == "NHWC" and all(
            isinstance(fed.get(k), list) and 1 <= len(fed[k]) <= 16 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in fed[k])
            for k in ("mean", "std")), path + ": fed_input", "expected {layout: NHWC, mean: [numbers], std: [numbers]}")
        self.mean, self.std = [float(v) for v in fed["mean"]], [float(v) for v in fed["std"]]
        io = doc.get("io")
        _need(isinstance(io, dict) and isinstance(io.get("inputs"), list) and isinstance(io.get("outputs"), list)
              and 1 <= len(io["outputs"]) <= MAX_OUTPUTS and 1 <= len(io["inputs"]) <= MAX_OUTPUTS,
              path + ": io", "expected {inputs: [...], outputs: [names]} (at most %d each)" % MAX_OUTPUTS)
        self.outputs = [_check_name(n, path + ": io.outputs") for n in io["outputs"]]
        for i, spec in enumerate(io["inputs"]):
            _need(isinstance(spec, dict) and isinstance(spec.get("shape"), list), path + ": io.inputs[%d]" % i,
                  "expected {name, shape, dtype}")
            _check_name(spec.get("name"), path + ": io.inputs[%d].name" % i)
        self.io = {"inputs": io["inputs"], "outputs": self.outputs}
        entries = doc.get("inputs")
        _need(isinstance(entries, list) and 1 <= len(entries) <= MAX_INPUTS, path + ": inputs",
              "expected 1 to %d inputs" % MAX_INPUTS)
        self.inputs = [self._input(e, "%s: inputs[%d]" % (path, i)) for i, e in enumerate(entries)]

    def _input(self, entry, where):
        # type: (Any, str) -> Dict[str, Any]
        _need(isinstance(entry, dict), where, "expected an object")
        name = _check_name(entry.get("name"), where + ".name")
        where = "%s (%s)" % (where, name)
        _check_meta(entry.get("tensor"), where + ".tensor")
        expected = entry.get("expected")
        _need(isinstance(expected, dict) and expected and all(k in REFERENCES for k in expected),
              where + ".expected", "expected an object keyed by " + " and/or ".join(REFERENCES))
        for ref, outs in expected.items():
            _need(isinstance(outs, list) and len(outs) == len(self.outputs), where + ".expected." + ref,
                  "expected %d outputs (%s)" % (len(self.outputs), ", ".join(self.outputs)))
            for i, out in enumerate(outs):
                _check_meta(out, "%s.expected.%s[%d]" % (where, ref, i))
                _need(out.get("name") == self.outputs[i], "%s.expected.%s[%d].name" % (where, ref, i),
                      "is not %s (io.outputs order)" % self.outputs[i])
        decisions = entry.get("decisions")
        _need(decisions is None or isinstance(decisions, dict), where + ".decisions", "expected an object")
        return {"name": name, "tensor": entry["tensor"], "expected": expected, "decisions": decisions or {},
                "where": where}


# --------------------------------------------------------------------------------------------
# The check.


def reference_for(backend_name, emulated, emulates_npu=False):
    # type: (str, bool, bool) -> str
    """THE rule (deploy, `rkdet diff` and this self-check all call it): the golden set a board's outputs
    are judged against. The simulator for rknnlite on an NPU, and for an emulated rknnlite that emulates
    an NPU's INT8 outputs (its test-control NPU mode; run.json `emulates_npu`); onnx-fp32 for onnxruntime
    and for the emulated rknnlite's default mode (it computes with onnxruntime FP32)."""
    if backend_name != "rknnlite":
        return "onnx-fp32"
    return "simulator" if (not emulated or emulates_npu) else "onnx-fp32"


def reference_for_run(run_info):
    # type: (Any) -> Optional[str]
    """The rule applied to a result set's run.json; None when it names no board backend (a golden set,
    an array file): then nothing can be picked."""
    if not isinstance(run_info, dict) or run_info.get("backend") not in ("rknnlite", "onnxruntime"):
        return None
    return reference_for(run_info["backend"], run_info.get("emulated") is True, run_info.get("emulates_npu") is True)


def fp32_input(tensor, mean, std):
    # type: (Any, Sequence[float], Sequence[float]) -> Any
    """uint8 NHWC as fed to the NPU -> float32 NCHW, (x - mean) / std: the transform of the build's
    onnx-fp32 reference. The one definition: the host's golden data (rkdet.convert.golden) and deploy's
    --backend onnxruntime inputs import it from here."""
    np = _runner.np
    x = np.ascontiguousarray(tensor.transpose(0, 3, 1, 2)).astype(np.float32)
    m = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
    return (x - m) / s


def _first_difference(actual, expected):
    # type: (Any, Any) -> Tuple[Optional[int], Any, Any, Optional[str]]
    np = _runner.np
    if actual.dtype.str != expected.dtype.str or tuple(actual.shape) != tuple(expected.shape):
        return None, None, None, "got %s %s, expected %s %s" % (actual.dtype.name, list(actual.shape),
                                                                 expected.dtype.name, list(expected.shape))
    width = "u%d" % actual.dtype.itemsize if actual.dtype.itemsize in (1, 2, 4, 8) else None
    a = np.ascontiguousarray(actual).reshape(-1)
    e = np.ascontiguousarray(expected).reshape(-1)
    differs = (a.view(width) != e.view(width)) if width else (a != e)
    where = np.flatnonzero(differs)
    if not where.size:
        return None, None, None, "same bytes, different hash (internal error)"
    index = int(where[0])
    return index, a[index].item(), e[index].item(), None


def _top1_note(decision, outputs):
    # type: (Any, List[Any]) -> str
    """For a classifier's bundle: whether the differing outputs still give the bundle's top-1 (the
    argmax of the one score output, as rkdet/decode.py reads it). Detector decisions are not
    re-decoded on the board: identical hashes imply identical detections, a difference is reported as is."""
    if not isinstance(decision, dict) or decision.get("kind") != "classification" or len(outputs) != 1:
        return ""
    top1 = int(_runner.np.argmax(_runner.np.asarray(outputs[0]).ravel()))
    if top1 == decision.get("top1"):
        return "; top-1 unchanged (%d)" % top1
    return "; top-1 CHANGED: %d, expected %r" % (top1, decision.get("top1"))


def _sha_prefix(digest):
    # type: (str) -> str
    return digest[:16]


def _fail(code, status, line, started, **facts):
    # type: (int, str, str, float, Any) -> Result
    return Result(code, status, " ".join(line.split()), seconds=time.time() - started, **facts)


def check(model=None, bundle=BUNDLE_FILE, core_mask="auto", backend="rknnlite"):
    # type: (Optional[str], str, str, str) -> Result
    """Run the bundle on `model` with the runtime of `backend`; never raises for a bad bundle, a
    missing runtime or a wrong model: the Result says which (exit_code 2 or 3)."""
    started = time.time()
    np = _runner.np
    if np is None:
        return _fail(EXIT_RUNTIME, "runtime", "numpy is not installed for %s; install python3-numpy" % sys.executable, started)
    if backend not in ("rknnlite", "onnxruntime") or core_mask not in _runner.CORE_MASKS:
        return _fail(EXIT_BAD_BUNDLE, "usage", "backend %r, core mask %r: expected rknnlite|onnxruntime and one of %s"
                     % (backend, core_mask, "|".join(_runner.CORE_MASKS)), started)
    if backend == "onnxruntime" and core_mask != "auto":
        return _fail(EXIT_BAD_BUNDLE, "usage", "--core-mask %s applies only to --backend rknnlite" % core_mask, started)
    default_name = "model.rknn" if backend == "rknnlite" else "model.onnx"
    guess = model if model is not None else os.path.join(os.path.dirname(os.path.abspath(bundle)), default_name)
    hashing = _hash_in_background(guess)  # sha256 runs (GIL released) while the bundle is parsed
    try:
        spec = Bundle(bundle)
        if backend not in spec.models:
            raise BundleError("%s: no model for --backend %s in the bundle" % (bundle, backend))
        inputs = [(e, decode_array(e["tensor"], e["where"] + ".tensor")) for e in spec.inputs]
    except BundleError as err:
        return _fail(EXIT_BAD_BUNDLE, "bad-bundle", str(err), started, backend=backend, model=model)
    expected_model = spec.models[backend]
    if model is None:
        model = os.path.join(os.path.dirname(os.path.abspath(bundle)), expected_model["file"])
    facts = {"backend": backend, "model": model}
    if not os.path.isfile(model):
        return _fail(EXIT_RUNTIME, "runtime", "%s: model file not found; pass --model" % model, started, **facts)
    try:
        digest = hashing() if hashing is not None and model == guess else _runner.file_sha256(model)
    except (OSError, IOError) as err:
        return _fail(EXIT_RUNTIME, "runtime", "%s: cannot read the model (%s)" % (model, err.strerror or err), started, **facts)
    if digest != expected_model["sha256"]:
        return _fail(EXIT_RUNTIME, "runtime", "%s: wrong model: sha256 %s is not the bundle's %s %s (build %s, %s); "
                     "serve the model this bundle was built with, or use its build's selfcheck.json"
                     % (model, _sha_prefix(digest), expected_model["file"], _sha_prefix(expected_model["sha256"]),
                        spec.fingerprint[:16], spec.platform), started, **facts)
    try:
        runtime = _open_backend(backend, model, core_mask, spec.io)
    except _runner.RunnerError as err:
        return _fail(EXIT_RUNTIME, "runtime", str(err), started, **facts)
    try:
        return _run(spec, runtime, inputs, started, facts)
    except _runner.RunnerError as err:
        return _fail(EXIT_RUNTIME, "runtime", str(err), started, **facts)
    except BundleError as err:
        return _fail(EXIT_BAD_BUNDLE, "bad-bundle", str(err), started, **facts)
    finally:
        runtime.close()


def _hash_in_background(path):
    # type: (str) -> Any
    """Start file_sha256(path) on a thread; returns a function that waits and gives the digest (or
    raises the OSError), or None when there is no such file to hash."""
    if not os.path.isfile(path):
        return None
    box = {}  # type: Dict[str, Any]

    def work():
        # type: () -> None
        try:
            box["sha256"] = _runner.file_sha256(path)
        except (OSError, IOError) as err:
            box["error"] = err

    worker = threading.Thread(target=work, name="rkdet-selfcheck-sha256")
    worker.daemon = True
    worker.start()

    def result():
        # type: () -> str
        worker.join()
        if "error" in box:
            raise box["error"]
        return box["sha256"]
    return result


def _open_backend(backend, model, core_mask, io_spec):
    # type: (str, str, str, Dict[str, Any]) -> Any
    if backend == "onnxruntime":
        return _runner.OnnxRuntimeBackend(model)
    return _runner.RknnLiteBackend(model, core_mask=core_mask, io_spec=_runner.load_io_spec(model) or io_spec)


def _run(spec, runtime, inputs, started, facts):
    # type: (Bundle, Any, List[Tuple[Dict[str, Any], Any]], float, Dict[str, Any]) -> Result
    np = _runner.np
    ref = reference_for(runtime.name, runtime.emulated, getattr(runtime, "emulates_npu", False))
    facts = dict(facts, reference=ref, emulated=runtime.emulated, inputs=len(inputs),
                 decisions={e["name"]: e["decisions"].get(ref) for e, _ in inputs})
    missing = [e["name"] for e, _ in inputs if ref not in e["expected"]]
    if missing:
        return _fail(EXIT_BAD_BUNDLE, "bad-bundle", "%s: no %s reference for input %s (the %s runtime is judged against "
                     "it); this platform's build has none" % (spec.path, ref, missing[0], runtime.name), started, **facts)
    names = spec.outputs
    for entry, tensor in inputs:
        feed = [fp32_input(tensor, spec.mean, spec.std) if runtime.name == "onnxruntime" else tensor]
        outputs = runtime.own(runtime.infer(feed))
        expected = entry["expected"][ref]
        if len(outputs) != len(expected):
            return _fail(EXIT_DIFFERENT, "differs", "DIFFERS from %s: input %s: the runtime returned %d outputs, the "
                         "bundle expects %d (%s)" % (ref, entry["name"], len(outputs), len(expected), ", ".join(names)),
                         started, **facts)
        for name, actual, want in zip(names, outputs, expected):
            if _runner.output_hash(actual) == want["hash"]:
                continue
            golden = decode_array(want, "%s.expected.%s.%s" % (entry["where"], ref, name))
            index, got, exp, detail = _first_difference(np.asarray(actual), golden)
            miss = Mismatch(entry["name"], name, index, exp, got, detail)
            return _fail(EXIT_DIFFERENT, "differs", "DIFFERS from %s: %s%s (%s, model %s)"
                         % (ref, miss.describe(), _top1_note(entry["decisions"].get(ref), outputs), runtime.detail,
                            os.path.basename(facts["model"])), started, mismatch=miss, **facts)
    seconds = time.time() - started
    line = "IDENTICAL to %s: %d input%s x %d outputs, bit for bit (%s; build %s, %s; %.2f s)" % (
        ref, len(inputs), "" if len(inputs) == 1 else "s", len(names), runtime.detail, spec.fingerprint[:16],
        spec.platform, seconds)
    return Result(EXIT_OK, "identical", line, seconds=seconds, **facts)


def parse_args(argv):
    # type: (Optional[Sequence[str]]) -> argparse.Namespace
    parser = argparse.ArgumentParser(
        prog="rkdet-selfcheck", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Check before you serve: run a build's self-check bundle on this board's runtime and "
                    "compare every output hash with the bundle's reference.")
    parser.add_argument("bundle", metavar="BUNDLE", help="selfcheck.json from the build folder")
    parser.add_argument("--model", default=None, help="the model to check (default: the bundle's model file beside it)")
    parser.add_argument("--core-mask", default="auto", choices=_runner.CORE_MASKS, help="NPU cores (rknnlite only)")
    parser.add_argument("--backend", default="rknnlite", choices=("rknnlite", "onnxruntime"))
    return parser.parse_args(argv)


def main(argv=None):
    # type: (Optional[Sequence[str]]) -> int
    """Console entry point (`rkdet-selfcheck`): one line on stdout (exit 0) or stderr, the exit code."""
    args = parse_args(argv)
    try:
        result = check(args.model, args.bundle, core_mask=args.core_mask, backend=args.backend)
    except KeyboardInterrupt:
        sys.stderr.write("rkdet-selfcheck: interrupted\n")
        return 130
    except Exception as err:  # a bug: still one line
        sys.stderr.write("rkdet-selfcheck: internal error %s: %s; please report it\n"
                         % (type(err).__name__, _runner.visible(" ".join(str(err).split()))))
        return EXIT_RUNTIME
    stream = sys.stdout if result.ok else sys.stderr
    stream.write("rkdet-selfcheck: %s\n" % _runner.visible(result.line))  # bundle text is untrusted
    stream.flush()
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
