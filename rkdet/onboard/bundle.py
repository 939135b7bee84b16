"""The self-check bundle's codec (`selfcheck.json`, docs/FORMATS.md "Self-check bundle"): read and validate.

Why its own module: the bundle is untrusted input on the board (its size, every array's shape,
dtype and decompressed size, and every name are bounded before use), and the host's writer
(rkdet/convert/selfcheck_bundle.py) encodes arrays with this module's `encode_array` and bounds.
"""

import base64
import binascii
import re
import zlib
from typing import Any, Dict, List, Tuple

from .backend_table import BACKENDS
from .bounded import loads_bounded, read_regular
from .decisions import check_rules
from .hashing import output_hash
from .identity import HEX64
from .numpy_or_none import np
from .reference import REFERENCES

BUNDLE_SCHEMA = "rkdet.selfcheck/1"
BUNDLE_FILE = "selfcheck.json"
# Bounds on the untrusted bundle (the writer refuses to exceed them too).
MAX_BUNDLE_BYTES = 64 << 20
MAX_INPUTS = 64
MAX_OUTPUTS = 64
MAX_NDIM = 8
MAX_ARRAY_BYTES = 64 << 20
DTYPES = ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "int64", "float16", "float32", "float64")
_NAME = re.compile(r"^[^\x00-\x1f\x7f/\\]{1,200}$")


class BundleError(Exception):
    """The bundle is unreadable, out of bounds or inconsistent (exit 2)."""


def encode_array(array):
    # type: (Any) -> Dict[str, Any]
    """An array as the bundle stores it (the writer's side of decode_array)."""
    arr = np.ascontiguousarray(array)
    return {"dtype": arr.dtype.name, "shape": [int(d) for d in arr.shape], "hash": output_hash(arr),
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
    _need(isinstance(value, str) and bool(HEX64.match(value)), where, "expected 64 lowercase hex digits")
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
    size = np.dtype(dtype).itemsize
    for d in shape:
        size *= d
        _need(size <= MAX_ARRAY_BYTES, where + ".shape", "array larger than %d MiB" % (MAX_ARRAY_BYTES >> 20))
    _check_hash(entry.get("hash"), where + ".hash")
    return dtype, shape, size


def decode_array(entry, where):
    # type: (Dict[str, Any], str) -> Any
    """The array of a bundle entry; its size is bounded before inflating and its hash verified after."""
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
    _need(output_hash(array) == entry["hash"], where, "data does not match its hash (bundle corrupt)")
    return array


def _read_json(path):
    # type: (str) -> Any
    """The bundle, bounded (the runner's board-side reader: a regular file, MAX_BUNDLE_BYTES, depth):
    a FIFO, /dev/zero or 100k brackets are a bad bundle (exit 2), never a hang or a runtime problem."""
    try:
        data = read_regular(path, MAX_BUNDLE_BYTES)
    except (OSError, IOError) as err:
        raise BundleError("%s: cannot read the bundle (%s)" % (path, err.strerror or err))
    except ValueError:
        raise BundleError("%s: more than the %d MiB a bundle may have" % (path, MAX_BUNDLE_BYTES >> 20))
    try:
        return loads_bounded(data, path)
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
              "rkdet-selfcheck (rkdet-onboard.pyz) of the rkdet that wrote the bundle" % (schema if isinstance(schema, str) else type(schema).__name__, BUNDLE_SCHEMA))
        self.fingerprint = _check_hash(doc.get("fingerprint"), path + ": fingerprint")
        self.platform = doc.get("platform") if isinstance(doc.get("platform"), str) else "?"
        models = doc.get("models")
        _need(isinstance(models, dict), path + ": models", "expected an object")
        self.models = {}  # type: Dict[str, Dict[str, str]]
        for backend in BACKENDS:
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
        why, self.decision_rules = check_rules(doc.get("decision_rules"), self.outputs, path + ": decision_rules")
        if why is not None:
            raise BundleError(why)
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
