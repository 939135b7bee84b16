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

Like rkdet-run this runs ON THE BOARD: Python 3.6+, stdlib + numpy + the runtime; it is part of
the on-board program (rkdet/onboard/), pushed as one zipapp (`python3 rkdet-onboard.pyz selfcheck
BUNDLE`), and reuses its output hash and backends. From a serving app: put the zipapp on sys.path,
then `from rkdet.onboard import selfcheck; result = selfcheck.check(model, bundle)`.

The bundle (`selfcheck.json` in the build folder, written by `rkdet convert`) is untrusted input:
its size, every array's shape, dtype and decompressed size, and every name are bounded before use.
Format: docs/FORMATS.md ("Self-check bundle").
"""

import argparse
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .backend_table import BACKENDS, DEFAULT_BACKEND, NPU_BACKENDS
from .backend_table import facts as backend_facts
from .backends import make_backend
from .bounded import visible
from .bundle import BUNDLE_FILE, Bundle, BundleError, decode_array
from .decisions import changed_positions, decisions
from .exits import RunnerError
from .hashing import file_sha256, output_hash
from .numpy_or_none import np
from .reference import fp32_input, reference_for
from .resultset import CORE_MASKS

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_BAD_BUNDLE = 2
EXIT_RUNTIME = 3
EPILOG = """exit codes:
  0  identical: every bundled input gave the expected output hashes
  1  differs: the line names input, output, first element index and both values
  2  bad bundle or usage
  3  runtime problem: runtime missing, model not loadable/runnable, or not the bundle's model"""


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
    `mismatch` is the first difference (of the first differing input); `differing` names every input
    whose outputs differ. `declared_changed`: for a bundle with declared rules (config `decision:`) that
    differs, the outputs whose declared decision changed on any differing input ([] none changed; None:
    not judged), and `declared_inputs` the differing inputs on which it changed.
    """

    __slots__ = ("exit_code", "status", "line", "reference", "backend", "emulated", "model", "inputs",
                 "mismatch", "seconds", "decisions", "declared_changed", "differing", "declared_inputs")

    # the facts beside exit code, status and line, each with its default (a list default is a fresh list):
    # reference, backend, model: Optional[str]; emulated: Optional[bool]; inputs: int; mismatch:
    # Optional[Mismatch]; seconds: float; decisions: Optional[Dict[str, Any]]; declared_changed:
    # Optional[List[str]]; differing, declared_inputs: List[str]
    _FACTS = {"reference": None, "backend": None, "emulated": None, "model": None, "inputs": 0,
              "mismatch": None, "seconds": 0.0, "decisions": None, "declared_changed": None,
              "differing": list, "declared_inputs": list}

    def __init__(self, exit_code, status, line, **facts):
        # type: (int, str, str, **Any) -> None
        unknown = sorted(set(facts) - set(self._FACTS))
        if unknown:
            raise TypeError("Result: unknown fact(s) %s" % ", ".join(unknown))
        self.exit_code = exit_code
        self.status = status  # "identical" | "differs" | "bad-bundle" | "usage" | "runtime"
        self.line = line
        for name, default in self._FACTS.items():
            value = facts.get(name)
            setattr(self, name, value if value is not None else (default() if default is list else default))

    @property
    def ok(self):
        # type: () -> bool
        return self.exit_code == EXIT_OK

    def __repr__(self):
        return "Result(exit_code=%d, %s)" % (self.exit_code, self.line)


def _first_difference(actual, expected):
    # type: (Any, Any) -> Tuple[Optional[int], Any, Any, Optional[str]]
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
    top1 = int(np.argmax(np.asarray(outputs[0]).ravel()))
    if top1 == decision.get("top1"):
        return "; top-1 unchanged (%d)" % top1
    return "; top-1 CHANGED: %d, expected %r" % (top1, decision.get("top1"))


MAX_LISTED_INPUTS = 3  # inputs named in the line; the rest are counted (Result.declared_inputs has them all)


def _declared_rows(spec, entry, ref, outputs):
    # type: (Bundle, Dict[str, Any], str, List[Any]) -> Tuple[Optional[List[Tuple[str, int, int, Any, Any]]], str]
    """The declared decisions of one input, decided by the rules (rkdet/onboard/decisions.py) on the
    runtime's outputs and on the bundle's expected ones: (the changed outputs' rows, "") or (None, why not
    judged)."""
    rules = spec.decision_rules
    index = {n: i for i, n in enumerate(spec.outputs)}
    expected = {n: decode_array(entry["expected"][ref][index[n]], "%s.expected.%s.%s" % (entry["where"], ref, n))
                for n in rules}
    try:
        want = decisions(rules, expected)
        got = decisions(rules, {n: np.asarray(outputs[index[n]]) for n in rules})
    except (ValueError, IndexError) as err:
        return None, str(err)
    return changed_positions(want, got), ""


def _rows_text(rows):
    # type: (List[Tuple[str, int, int, Any, Any]]) -> str
    return ", ".join("%s %d/%d" % (n, c, p) + ("" if e is None else " (got %r, expected %r)" % (a, e))
                     for n, c, p, e, a in rows)


def _declared_note(spec, ref, differing):
    # type: (Bundle, str, List[Tuple[Dict[str, Any], List[Any], Mismatch]]) -> Tuple[str, Optional[List[str]], List[str]]
    """For a bundle with declared rules (config `decision:`): whether the app's decision changed, judged on
    EVERY differing input (a later input may flip where the first only moved a box). Returns the line's
    note, the outputs whose decision changed on any of them (None: not judged on any) and the inputs on
    which it changed."""
    rules = spec.decision_rules
    if not rules:
        return "", None, []
    changed, outputs, why_not = [], set(), []  # type: List[Tuple[str, Any]], set, List[str]
    for entry, outs, _ in differing:
        rows, why = _declared_rows(spec, entry, ref, outs)
        if rows is None:
            why_not.append(why)
        elif rows:
            changed.append((entry["name"], rows))
            outputs.update(r[0] for r in rows)
    judged = len(differing) - len(why_not)
    if not judged:
        return "; declared decisions not judged (%s)" % why_not[0], None, []
    also = "" if not why_not else "; %d not judged (%s)" % (len(why_not), why_not[0])
    if len(differing) == 1:
        note = ("; declared decision CHANGED: " + _rows_text(changed[0][1])) if changed else \
            "; declared decisions unchanged (%s)" % ", ".join(sorted(rules))
        return note, sorted(outputs), [n for n, _ in changed]
    if not changed:
        return ("; declared decisions unchanged (%s) on all %d judged differing inputs%s"
                % (", ".join(sorted(rules)), judged, also)), [], []
    listed = "; ".join("input %s: %s" % (n, _rows_text(rows)) for n, rows in changed[:MAX_LISTED_INPUTS])
    more = "" if len(changed) <= MAX_LISTED_INPUTS else "; and %d more" % (len(changed) - MAX_LISTED_INPUTS)
    return ("; declared decision CHANGED on %d of %d differing inputs: %s%s%s"
            % (len(changed), len(differing), listed, more, also)), sorted(outputs), [n for n, _ in changed]


def _first_mismatch(entry, ref, names, outputs, expected):
    # type: (Dict[str, Any], str, List[str], List[Any], List[Dict[str, Any]]) -> Optional[Mismatch]
    """The first output of this input whose hash is not the bundle's, at its first differing element."""
    for name, actual, want in zip(names, outputs, expected):
        if output_hash(actual) == want["hash"]:
            continue
        golden = decode_array(want, "%s.expected.%s.%s" % (entry["where"], ref, name))
        index, got, exp, detail = _first_difference(np.asarray(actual), golden)
        return Mismatch(entry["name"], name, index, exp, got, detail)
    return None


def _sha_prefix(digest):
    # type: (str) -> str
    return digest[:16]


def _fail(code, status, line, started, **facts):
    # type: (int, str, str, float, Any) -> Result
    return Result(code, status, " ".join(line.split()), seconds=time.time() - started, **facts)


def check(model=None, bundle=BUNDLE_FILE, core_mask="auto", backend=DEFAULT_BACKEND):
    # type: (Optional[str], str, str, str) -> Result
    """Run the bundle on `model` with the runtime of `backend`; never raises for a bad bundle, a
    missing runtime or a wrong model: the Result says which (exit_code 2 or 3)."""
    started = time.time()
    if np is None:
        return _fail(EXIT_RUNTIME, "runtime", "numpy is not installed for %s; install python3-numpy" % sys.executable, started)
    if backend not in BACKENDS or core_mask not in CORE_MASKS:
        return _fail(EXIT_BAD_BUNDLE, "usage", "backend %r, core mask %r: expected %s and one of %s"
                     % (backend, core_mask, "|".join(BACKENDS), "|".join(CORE_MASKS)), started)
    if not backend_facts(backend).on_npu and core_mask != "auto":
        return _fail(EXIT_BAD_BUNDLE, "usage", "--core-mask %s applies only to --backend %s" % (core_mask, NPU_BACKENDS), started)
    default_name = backend_facts(backend).model_file
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
        digest = hashing() if hashing is not None and model == guess else file_sha256(model)
    except (OSError, IOError) as err:
        return _fail(EXIT_RUNTIME, "runtime", "%s: cannot read the model (%s)" % (model, err.strerror or err), started, **facts)
    if digest != expected_model["sha256"]:
        return _fail(EXIT_RUNTIME, "runtime", "%s: wrong model: sha256 %s is not the bundle's %s %s (build %s, %s); "
                     "serve the model this bundle was built with, or use its build's selfcheck.json"
                     % (model, _sha_prefix(digest), expected_model["file"], _sha_prefix(expected_model["sha256"]),
                        spec.fingerprint[:16], spec.platform), started, **facts)
    try:
        runtime = _open_backend(backend, model, core_mask, spec.io)
    except RunnerError as err:
        return _fail(EXIT_RUNTIME, "runtime", str(err), started, **facts)
    try:
        return _run(spec, runtime, inputs, started, facts)
    except RunnerError as err:
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
            box["sha256"] = file_sha256(path)
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
    return make_backend(backend, model, core_mask, io_spec=io_spec)


def _run(spec, runtime, inputs, started, facts):
    # type: (Bundle, Any, List[Tuple[Dict[str, Any], Any]], float, Dict[str, Any]) -> Result
    ref = reference_for(runtime.name, runtime.emulated, getattr(runtime, "emulates_npu", False))
    facts = dict(facts, reference=ref, emulated=runtime.emulated, inputs=len(inputs),
                 decisions={e["name"]: e["decisions"].get(ref) for e, _ in inputs})
    missing = [e["name"] for e, _ in inputs if ref not in e["expected"]]
    if missing:
        return _fail(EXIT_BAD_BUNDLE, "bad-bundle", "%s: no %s reference for input %s (the %s runtime is judged against "
                     "it); this platform's build has none" % (spec.path, ref, missing[0], runtime.name), started, **facts)
    names = spec.outputs
    differing = []  # type: List[Tuple[Dict[str, Any], List[Any], Mismatch]]
    for entry, tensor in inputs:  # every input runs: the declared decisions are judged on each that differs
        feed = [fp32_input(tensor, spec.mean, spec.std) if backend_facts(runtime.name).fp32_input else tensor]
        outputs = runtime.own(runtime.infer(feed))
        expected = entry["expected"][ref]
        if len(outputs) != len(expected):
            return _fail(EXIT_DIFFERENT, "differs", "DIFFERS from %s: input %s: the runtime returned %d outputs, the "
                         "bundle expects %d (%s)" % (ref, entry["name"], len(outputs), len(expected), ", ".join(names)),
                         started, **facts)
        miss = _first_mismatch(entry, ref, names, outputs, expected)
        if miss is not None:
            differing.append((entry, outputs, miss))
    if differing:
        entry, outputs, miss = differing[0]
        declared, changed, on = _declared_note(spec, ref, differing)
        count = "" if len(differing) == 1 else "; %d of %d inputs differ" % (len(differing), len(inputs))
        return _fail(EXIT_DIFFERENT, "differs", "DIFFERS from %s: %s%s%s%s (%s, model %s)"
                     % (ref, miss.describe(), _top1_note(entry["decisions"].get(ref), outputs), count, declared,
                        runtime.detail, os.path.basename(facts["model"])), started, mismatch=miss,
                     declared_changed=changed, differing=[e["name"] for e, _, _ in differing], declared_inputs=on,
                     **facts)
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
    parser.add_argument("--core-mask", default="auto", choices=CORE_MASKS, help="NPU cores (rknnlite only)")
    parser.add_argument("--backend", default=DEFAULT_BACKEND, choices=BACKENDS)
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
                         % (type(err).__name__, visible(" ".join(str(err).split()))))
        return EXIT_RUNTIME
    stream = sys.stdout if result.ok else sys.stderr
    stream.write("rkdet-selfcheck: %s\n" % visible(result.line))  # bundle text is untrusted
    stream.flush()
    return result.exit_code
