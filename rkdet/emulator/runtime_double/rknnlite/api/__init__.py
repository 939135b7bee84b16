"""rkdet's TEST DOUBLE of `rknnlite.api.RKNNLite` (rknn-toolkit-lite2): onnxruntime on CPU, not an NPU.

It lets the runner, the deploy and the emulated board be exercised end to end on an x86_64 host,
with the same calling convention as the real RKNNLite 2.5.0: the same methods, parameter names,
order and defaults (tests/runner/test_runner_double.py holds it to the real wheel's
rknnlite/api/rknn_lite.py), methods return 0 / -1 or None instead of raising, and
`inference(reuse_outputs=True)` returns buffers the next call overwrites (the default returns
independent arrays, as 2.5.0 does). Every result it produces is emulated: the module declares
`RKDET_EMULATED`, which rkdet-run records as `"emulated": true` in run.json.

What the deploy puts beside `<stem>.rknn` for it:
  * `<stem>.onnx`: the prepared FP32 model (else the path in env `RKDET_EMU_ONNX`);
  * the build's INT8 emulation (`model.int8emu.onnx`, rkdet.convert.int8emu), named by `"int8emu"` in
    `<stem>.emu.json`: what it computes by default, as the emulated NPU. The instance then says
    `rkdet_emulates_npu = True` (run.json `"emulates_npu": true`: judged against the simulator). TEST
    CONTROL `RKDET_EMU_COMPUTE=fp32` (env; else `"compute"` in the board image's control below, else in
    `<stem>.emu.json`) computes the FP32 model instead; `int8` is the default;
  * `<stem>.emu.json` (optional): `{"mean": [..], "std": [..], "input_layout": "nchw"}`, the
    normalisation the real .rknn has baked in. Inputs arrive as the board gets them (uint8 NHWC)
    and become the ONNX's float input as `(x - mean) / std` per channel, transposed to NCHW when
    the ONNX is NCHW. Defaults: mean 0, std 255, input_layout nchw.

Latency follows the emulated NPU clock: after computing, it sleeps so that the call takes
`compute_time * max_freq / cur_freq`, reading `$RKDET_ROOT/sys/class/devfreq/*.npu/cur_freq` and
`available_frequencies` (no slow-down when they are not readable).

TEST CONTROL, emulated NPU mode (never present on a real board): a `"npu"` section in `<stem>.emu.json`,
`{"golden": DIR, "inputs": DIR, "lsb_k": K, "steps": {output: scale}, "output": NAME or null}`, makes the
double return the build's RKNN simulator outputs (DIR: a copy of golden/simulator; inputs: the golden
inputs, matched by the sha256 of their raw bytes) instead of computing the FP32 ONNX: the outputs an NPU
gives, not the FP32 reference. K > 0 moves K evenly spaced elements of one output (NAME, else the first
with a step) up by one quantization step: an NPU one LSB off the simulator, the same on every call. The
instance then says `rkdet_emulates_npu = True`; rkdet-run records `"emulates_npu": true` in run.json, so
the reference rule (rkdet.onboard.reference.reference_for) judges it against the simulator. An input that is not
a golden input fails the call (None), as nothing stands for it.

The runtime stack it reports is the emulated board's, read as the real runtime finds it: the librknnrt
version string in `$RKDET_ROOT/usr/lib/librknnrt.so` (the library RKNNLite loads) and the driver version
in `$RKDET_ROOT/sys/kernel/debug/rknpu/version` (else `/sys/module/rknpu/version`). `get_sdk_version()`
gives both, as lite2 2.5.0 does ("API: ... DRV: ..."). Like the real librknnrt, `init_runtime` fails
for a model of container format 6 (toolkit2 >= 2.0) when that library is 1.x ("Invalid RKNN model
version 6", ultralytics/ultralytics#18928), and, like lite2 on a single-core SoC, a core mask naming a
core the SoC lacks (the cores counted in `$RKDET_ROOT/sys/kernel/debug/rknpu/load`) fails init_runtime.
RKNNLite 2.5.0 has no method returning the model's custom string; neither has the double.

TEST CONTROL, hold (never present on a real board): while the file `$RKDET_EMU_CONTROL_DIR/hold` exists,
an inference call waits (it writes `holding` there first, so a test knows the runner is mid-run and
the board lock held); it goes on when the test removes `hold`, and fails after 600 s. A test proves
what happens while a run is under way without betting on how long a run takes.

TEST CONTROL, fault injection (never present on a real board): env `RKDET_EMU_FAULT`, or the file
`$RKDET_EMU_CONTROL_DIR/fault.json` (re-read at every call, so a test can arm it mid-run), holds
`{"occurrence": R, "input_sha256": H or null, "output": K, "index": I, "bit": B}`: on the R-th
(0-based) inference call whose input hashes to H, bit B of flat element I of output K (position,
or output name) is flipped. H is the sha256 of the raw bytes of the input arrays as passed
(concatenated in input order); null matches every call. rkdet-run first makes `warmup` unrecorded
passes over the inputs, so to hit measured run r of one input use `occurrence = warmup + r`.
Optional filters: `"core_mask": M` (only an instance initialised with that core mask value, e.g. 7 for
NPU_CORE_0_1_2: the rknn-toolkit2 #228 pattern, one mask differing from another), `"instance": K` (only
the K-th RKNNLite initialised in this process, 0-based: one context of several, the #474 pattern), and
`"all_calls": true` (every matching call from `occurrence` on, not only that one: a mask or context that
differs the same way every time).
TEST CONTROL, per-board image (never present on a real board): the emulated board's image may hold
`$RKDET_ROOT/etc/rkdet-emulator/runtime.json` (written by the emulator from `SocProfile.runtime_control`,
so it is the board's own setting, whatever the deploy's flags or sudo's env_reset):
`{"library_version": V, "drift": {"output": K, "index": I}, "core_drift": {"core_masks": [M..], "output": K,
"index": I}, "signal_dir": DIR, "hold_until_removed": FILE, "heat": {"control_dir": DIR, "millicelsius": T},
"compute": "int8"|"fp32", "multicore_split": {"core_masks": [M..], "cores": N}}` (every key optional). `library_version` is the librknnrt this board's
runtime reports (get_sdk_version). `drift` flips the lowest bit of flat element I of output K on every call
(another runtime build: one element differs, the same on every call); `core_drift` does so only when
init_runtime was given one of the core masks (numeric, e.g. 7 = NPU_CORE_0_1_2), the rknn-toolkit2 #228
pattern. `signal_dir`: after a successful init_runtime the double writes `DIR/runtime.started` holding
"PID PGID" (the emulated fleet's watcher drops the board's link, or notes the heat). `hold_until_removed`:
init_runtime then waits while FILE exists (failing, -1, after HOLD_LIMIT s): a drop board's fleet removes it
once it has cut the link, so the run cannot finish before its link goes, however fast it is. `heat`: the first
inference call of the process writes T to `DIR/forced_millicelsius` (the emulated sysfs' thermal test
control: every zone at T, the SoC's thermal caps engage), removed when the process exits: a board that
throttles during the run, after the runner's "before" snapshot. `multicore_split` (opt-in multi-core
numerics): an instance initialised with one of the core masks (default [7], NPU_CORE_0_1_2) computes every
Conv as N cores would split it (default 3): per-core partial sums over slices of the input channels, added
in another order than one core adds them (`_split_accumulation`), so that mask's results differ from a
single core's for real, in the computation (rknn-toolkit2 #228), not as one flipped bit.


TEST CONTROL, a fault at a named tensor (never present on a real board): env `RKDET_EMU_FAULT_TENSOR`,
`NAME` or `NAME:run=K` (set by `rkdet emulator start --fault-tensor`), makes the double compute a copy of
the model in which tensor NAME is perturbed before anything reads it, so the error propagates downstream
like a real one: its largest element moves up by one int8 step of the tensor's range (max|x| / 127, the
smallest step an INT8 NPU tensor of that range has; up, so a following Relu or MaxPool passes it on). It
applies in every mode (the INT8 emulation, FP32, and the NPU replay mode, where the change it makes to the
FP32 model is added to the stored answer). A model without NAME makes init_runtime raise ValueError naming
tensor and model (the runner reports it in one line), except a bisection's cut model (`"cut": true` in
`<stem>.emu.json`) that ends before NAME, which computes unchanged. With `:run=K` only the K-th (0-based) call for each
distinct input is perturbed (rkdet-run with --warmup 0: measured run K), else every call.
"""

import glob
import hashlib
import json
import os
import re
import sys
import time

import numpy as np

#: the clock an inference's compute time is measured with and how the slower clock is served
#: (module attributes so a test can hold the latency rule against a clock of its own)
_clock = time.perf_counter
_sleep = time.sleep

RKDET_EMULATED = "rkdet emulated RKNNLite: onnxruntime on CPU, not an NPU"

_DATA_TYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "float16": np.float16,
               "float32": np.float32}  # inference(data_type=...): what the 2.5.0 docstring lists

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
              "tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(int32)": np.int32,
              "tensor(int64)": np.int64}


def _log(message):
    # The real runtime prints its errors and returns a code; the double does the same.
    sys.stderr.write("E RKNNLite(emulated): %s\n" % message)


def _npu_clock_ratio():
    """max_freq / cur_freq of the first `*.npu` devfreq node under $RKDET_ROOT, or 1.0."""
    root = os.environ.get("RKDET_ROOT", "") or "/"
    for node in sorted(glob.glob(os.path.join(root, "sys/class/devfreq/*.npu"))):
        try:
            with open(os.path.join(node, "cur_freq")) as handle:
                cur = int(handle.read().split()[0])
            with open(os.path.join(node, "available_frequencies")) as handle:
                top = max(int(f) for f in handle.read().split())
        except (OSError, IOError, ValueError, IndexError):
            return 1.0
        return float(top) / cur if cur > 0 else 1.0
    return 1.0


_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def _root_file(*rels):
    root = os.environ.get("RKDET_ROOT", "") or "/"
    for rel in rels:
        path = os.path.join(root, rel)
        if os.path.isfile(path):
            return path
    return None


def _library_version():
    """The 'librknnrt version: X (...)' string in the library file the runtime would load, or None."""
    path = _root_file("usr/lib/librknnrt.so", "usr/lib64/librknnrt.so", "usr/lib/aarch64-linux-gnu/librknnrt.so")
    if path is None:
        return None
    with open(path, "rb") as handle:
        data = handle.read(1 << 22)
    found = re.search(rb"librknnrt version: [ -~]+", data)
    return found.group(0).decode("ascii") if found else None


def _driver_version():
    path = _root_file("sys/kernel/debug/rknpu/version", "sys/module/rknpu/version")
    if path is None:
        return None
    with open(path) as handle:
        return handle.read().strip() or None


def _npu_cores():
    """Cores the emulated NPU has (its debugfs load line lists one per core), or None when unknown."""
    path = _root_file("sys/kernel/debug/rknpu/load")
    if path is None:
        return None
    with open(path) as handle:
        return len(re.findall(r"Core\d+", handle.read())) or None


def _container_version(path):
    with open(path, "rb") as handle:
        head = handle.read(16)
    if len(head) < 16 or head[:8] != b"RKNN\0\0\0\0":
        return None
    return int.from_bytes(head[8:16], "little") & 0xFFF


_INSTANCES = [0]  # RKNNLite objects whose init_runtime succeeded in this process (fault "instance")


def _read_fault():
    """The armed fault (dict) or None; a malformed control is an error, never silently ignored."""
    text = os.environ.get("RKDET_EMU_FAULT")
    control = os.environ.get("RKDET_EMU_CONTROL_DIR")
    if not text and control:
        try:
            with open(os.path.join(control, "fault.json")) as handle:
                text = handle.read()
        except (OSError, IOError):
            return None
    if not text:
        return None
    fault = json.loads(text)
    for key in ("occurrence", "output", "index", "bit"):
        if key not in fault:
            raise ValueError("fault control lacks %r" % key)
    return fault


IMAGE_CONTROL = "etc/rkdet-emulator/runtime.json"  # TEST CONTROL in an emulated board's image


HOLD_LIMIT = 600


def _wait_while_held():
    """False when the hold control (see the docstring) is still there after HOLD_LIMIT seconds."""
    control = os.environ.get("RKDET_EMU_CONTROL_DIR")
    if not control or not os.path.exists(os.path.join(control, "hold")):
        return True
    try:
        with open(os.path.join(control, "holding"), "w") as handle:
            handle.write("%d\n" % os.getpid())
    except (OSError, IOError):
        pass
    return _wait_for_removal(os.path.join(control, "hold"))


def _wait_for_removal(path):
    """Wait while the file `path` exists (a test control the emulator or a test removes to let the
    runtime go on); False when it is still there after HOLD_LIMIT seconds."""
    deadline = time.monotonic() + HOLD_LIMIT
    while os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _read_image_control():
    """The board image's runtime test control (dict; empty when the image has none, as real boards)."""
    root = os.environ.get("RKDET_ROOT", "")
    if not root:
        return {}
    try:
        with open(os.path.join(root, IMAGE_CONTROL)) as handle:
            control = json.load(handle)
    except (OSError, IOError):
        return {}
    if not isinstance(control, dict):
        raise ValueError("%s is not a JSON object" % IMAGE_CONTROL)
    return control


def _signal_started(directory):
    """Tell the emulator this process runs the runtime now: DIR/runtime.started = "PID PGID"."""
    path = os.path.join(directory, "runtime.started")
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        handle.write("%d %d\n" % (os.getpid(), os.getpgid(0)))
    os.rename(tmp, path)


_HEATED = []  # the forced-temperature files this process wrote (removed at exit)


def _heat(heat):
    """Hold every thermal zone at heat["millicelsius"] from now until this process exits (once)."""
    if _HEATED:
        return
    path = os.path.join(heat["control_dir"], "forced_millicelsius")
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        handle.write("%d\n" % int(heat["millicelsius"]))
    os.rename(tmp, path)
    _HEATED.append(path)
    import atexit
    atexit.register(_cool)


def _cool():
    for path in _HEATED:
        try:
            os.remove(path)
        except OSError:
            pass
    del _HEATED[:]


def _flip_lowest_bit(outputs, which, index):
    flat = outputs[which].reshape(-1)
    bits = flat.view("u%d" % flat.dtype.itemsize)
    bits[int(index)] ^= bits.dtype.type(1)


def _fault_tensor():
    """(NAME, run K or None) from env RKDET_EMU_FAULT_TENSOR, or None; a malformed value raises ValueError."""
    text = os.environ.get("RKDET_EMU_FAULT_TENSOR", "").strip()
    if not text:
        return None
    name, sep, rest = text.rpartition(":run=")
    if not sep:
        return text, None
    if not name or not rest.isdigit():
        raise ValueError("RKDET_EMU_FAULT_TENSOR %r: expected NAME or NAME:run=K" % text)
    return name, int(rest)


def _split_accumulation(model_bytes_or_path, cores):
    """Serialized copy of the model in which every Conv (group 1, weights an initializer, at least `cores`
    input channels) accumulates as `cores` NPU cores would split it: one partial Conv per slice of the
    input channels, the partial sums added last core first ((P[n-1] + P[n-2]) + ...) + P[0], the bias on
    the last. Float addition is not associative, so results differ from one core's in the last bits, and
    after the INT8 emulation's rounding by whole LSBs where a value sits at a rounding boundary."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if isinstance(model_bytes_or_path, bytes):
        model = onnx.load_from_string(model_bytes_or_path)
    else:
        model = onnx.load(model_bytes_or_path)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    nodes = []
    for node in graph.node:
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        weight = inits.get(node.input[1]) if node.op_type == "Conv" and len(node.input) > 1 else None
        if weight is None or group != 1 or len(weight.dims) < 3 or weight.dims[1] < cores:
            nodes.append(node)
            continue
        w = numpy_helper.to_array(weight)
        bounds = np.linspace(0, w.shape[1], cores + 1).astype(np.int64)
        t = lambda what, k: "%s__rkdet_core%d_%s" % (node.output[0], k, what)  # noqa: E731
        partial = []
        for k in range(cores):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            graph.initializer.extend([
                numpy_helper.from_array(np.ascontiguousarray(w[:, lo:hi]), t("w", k)),
                helper.make_tensor(t("starts", k), TensorProto.INT64, [1], [lo]),
                helper.make_tensor(t("ends", k), TensorProto.INT64, [1], [hi]),
                helper.make_tensor(t("axes", k), TensorProto.INT64, [1], [1])])
            nodes.append(helper.make_node("Slice", [node.input[0], t("starts", k), t("ends", k), t("axes", k)], [t("x", k)]))
            inputs = [t("x", k), t("w", k)] + ([node.input[2]] if k == cores - 1 and len(node.input) > 2 else [])
            conv = helper.make_node("Conv", inputs, [t("p", k)])
            conv.attribute.extend(node.attribute)
            nodes.append(conv)
            partial.append(t("p", k))
        total = partial[-1]
        for k in range(cores - 2, -1, -1):
            out = node.output[0] if k == 0 else t("sum", k)
            nodes.append(helper.make_node("Add", [total, partial[k]], [out]))
            total = out
    del graph.node[:]
    graph.node.extend(nodes)
    used = set(i for n in graph.node for i in n.input) | set(o.name for o in graph.output)
    kept = [i for i in graph.initializer if i.name in used]  # the split weights' originals: unused now
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model.SerializeToString()


def _faulted_model(onnx_path, name):
    """Serialized copy of the ONNX at `onnx_path` whose tensor `name` is perturbed (see the module doc),
    or None when the model has no node producing `name`."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load_from_string(onnx_path) if isinstance(onnx_path, bytes) else onnx.load(onnx_path)
    graph = model.graph
    nodes = list(graph.node)
    at = next((i for i, n in enumerate(nodes) if name in n.output), None)
    if at is None:
        return None
    clean = name + "__rkdet_clean"
    producer = nodes[at]
    producer.output[list(producer.output).index(name)] = clean
    t = lambda suffix: "%s__rkdet_%s" % (name, suffix)  # noqa: E731
    extra = [  # the largest element, up by max|x| / 127: it survives a following Relu or MaxPool
        helper.make_node("ReduceMax", [clean], [t("top")], keepdims=1),
        helper.make_node("Equal", [clean, t("top")], [t("at")]),
        helper.make_node("Cast", [t("at")], [t("mask")], to=TensorProto.FLOAT),
        helper.make_node("Abs", [clean], [t("abs")]),
        helper.make_node("ReduceMax", [t("abs")], [t("range")], keepdims=1),
        helper.make_node("Div", [t("range"), t("levels")], [t("step")]),
        helper.make_node("Mul", [t("mask"), t("step")], [t("delta")]),
        helper.make_node("Add", [clean, t("delta")], [name]),
    ]
    graph.initializer.append(helper.make_tensor(t("levels"), TensorProto.FLOAT, [], [127.0]))
    del graph.node[:]
    graph.node.extend(nodes[:at + 1] + extra + nodes[at + 1:])
    return model.SerializeToString()


def _load_npu_outputs(npu):
    """{sha256 of a golden input's raw bytes: {output: simulator output, K elements one LSB up}}."""
    golden, k = npu["golden"], int(npu.get("lsb_k", 0))
    steps = dict(npu.get("steps") or {})
    by_name = {}
    for name in os.listdir(npu["inputs"]):
        if name.endswith(".npy"):
            array = np.load(os.path.join(npu["inputs"], name), allow_pickle=False)
            by_name[name[:-4]] = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
    table = {}
    with open(os.path.join(golden, "index.jsonl")) as handle:
        for line in handle:
            record = json.loads(line)
            if record["input"] not in by_name or by_name[record["input"]] in table:
                continue
            outs = {}
            for out in record["outputs"]:
                outs[out["name"]] = np.load(os.path.join(golden, "outputs", out["hash"] + ".npy"), allow_pickle=False)
            if k > 0:
                which = npu.get("output") or next(o["name"] for o in record["outputs"] if o["name"] in steps)
                flat = outs[which].reshape(-1).copy()
                at = np.linspace(0, flat.size - 1, min(k, flat.size)).astype(np.int64)
                flat[at] = (flat[at].astype(np.float64) + float(steps[which])).astype(flat.dtype)
                outs[which] = flat.reshape(outs[which].shape)
            table[by_name[record["input"]]] = outs
    if not table:
        raise ValueError("no golden input of %s has an output in %s" % (npu["inputs"], golden))
    return table


class RKNNLite(object):
    """Emulated RKNNLite: same methods and return conventions, computed by onnxruntime on CPU."""

    NPU_CORE_AUTO = 0
    NPU_CORE_0 = 1
    NPU_CORE_1 = 2
    NPU_CORE_2 = 4
    NPU_CORE_0_1 = 3
    NPU_CORE_0_1_2 = 7
    NPU_CORE_ALL = 0xFFFF

    def __init__(self, verbose=False, verbose_file=None):
        self.verbose = verbose
        self._onnx = None
        self._prep = None
        self._session = None
        self._inputs = []
        self._buffers = []
        self._fault_counts = {}
        self._frame_id = 0
        self._format = None
        self._fault_session = None  # fault at a named tensor (TEST CONTROL): the perturbed model's session
        self._fault_run = None
        self._fault_calls = {}
        self._npu = None  # emulated NPU mode: {input sha256: {output name: array}}, see the module doc
        self.rkdet_emulates_npu = False
        self.rkdet_npu_detail = None  # what stands for the NPU's computation (backend_detail says it)
        self._fp32 = None  # the prepared FP32 ONNX beside the model
        self._int8emu = None  # the build's INT8 emulation (model.emu.json "int8emu"), the default computation
        self._cut = False  # a bisection's cut model (model.emu.json "cut"): a fault tensor past its end is fine
        self._drifts = []  # TEST CONTROL (image): [(output, index)] flipped on every call
        self._heat = None  # TEST CONTROL (image): {"control_dir", "millicelsius"} applied at the first inference
        self._library_version = None

    def load_rknn(self, path, key_path=None):
        """Find the ONNX that stands in for `path`; returns 0, or -1 when either is missing.

        `key_path`: the key envelope of an encrypted model; as the real one, -1 when it is given
        and does not exist (the double computes the ONNX, so the key is not used otherwise).
        """
        if not path or not os.path.isfile(path):
            _log("load_rknn: %s not found" % path)
            return -1
        if key_path is not None and not os.path.exists(key_path):
            _log("load_rknn: invalid key envelope path %s" % key_path)
            return -1
        stem = os.path.splitext(path)[0]
        onnx_path = stem + ".onnx" if os.path.isfile(stem + ".onnx") else os.environ.get("RKDET_EMU_ONNX")
        if not onnx_path or not os.path.isfile(onnx_path):
            _log("load_rknn: no %s.onnx beside the model and no RKDET_EMU_ONNX file" % stem)
            return -1
        prep = {"mean": [0.0], "std": [255.0], "input_layout": "nchw"}
        if os.path.isfile(stem + ".emu.json"):
            try:
                with open(stem + ".emu.json") as handle:
                    prep.update(json.load(handle))
            except (OSError, IOError, ValueError) as err:
                _log("load_rknn: %s.emu.json unreadable (%s)" % (stem, err))
                return -1
        if prep.get("npu") is not None:
            try:
                self._npu = _load_npu_outputs(prep["npu"])
            except (OSError, IOError, ValueError, KeyError, TypeError) as err:
                _log("load_rknn: emulated NPU mode: %s" % err)
                return -1
            self.rkdet_emulates_npu = True
            self.rkdet_npu_detail = "EMULATED NPU mode: the RKNN simulator's outputs, not onnxruntime"
        elif prep.get("int8emu"):  # the build's INT8 emulation; init_runtime decides (test control: fp32)
            self._int8emu = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.basename(str(prep["int8emu"])))
            if not os.path.isfile(self._int8emu):
                _log("load_rknn: %s (the INT8 emulation model.emu.json names) not found" % self._int8emu)
                return -1
        self._cut = bool(prep.get("cut"))
        self._onnx = self._fp32 = onnx_path
        self._prep = prep
        self._format = _container_version(path)
        return 0

    def list_devices(self):
        """The real one lists adb/ntb-attached devices; a board running its own runtime has none."""
        return [], []

    def init_runtime(self, target=None, device_id=None, async_mode=False, core_mask=NPU_CORE_AUTO):
        """Open the onnxruntime session (the onnx-fp32 reference's); -1 on a bad core mask or no model."""
        if self._onnx is None:
            _log("init_runtime: load_rknn first")
            return -1
        if core_mask not in (0, 1, 2, 4, 3, 7, 0xFFFF):
            _log("init_runtime: invalid core_mask %r" % (core_mask,))
            return -1
        cores = _npu_cores()
        if cores is not None and core_mask not in (0, 0xFFFF) and core_mask >> cores:
            _log("init_runtime: core_mask %d names a core this %d-core NPU lacks" % (core_mask, cores))
            return -1
        library = _library_version()
        found = _VERSION.search(library or "")
        if self._format is not None and self._format >= 6 and found and int(found.group(1)) < 2:
            _log("RKNN Runtime Information: %s" % library)
            _log("Invalid RKNN model version %d" % self._format)
            _log("rknn_init, load model failed!")
            return -1
        try:
            control = _read_image_control()
        except (OSError, IOError, ValueError) as err:
            _log("init_runtime: bad image test control %s (%s)" % (IMAGE_CONTROL, err))
            return -1
        compute = os.environ.get("RKDET_EMU_COMPUTE") or control.get("compute") or self._prep.get("compute") or "int8"
        if compute not in ("int8", "fp32"):
            _log("init_runtime: RKDET_EMU_COMPUTE %r: expected int8 or fp32" % (compute,))
            return -1
        if self._npu is None:
            self._onnx = self._int8emu if compute == "int8" and self._int8emu else self._fp32
            self.rkdet_emulates_npu = self._onnx == self._int8emu
            self.rkdet_npu_detail = ("INT8 emulation: the build's quantization computed by onnxruntime "
                                     "(close to the RKNN simulator, not bitwise)") if self.rkdet_emulates_npu else None
        split = control.get("multicore_split")  # TEST CONTROL (image): per-core partial sums, see the doc
        try:
            model = self._onnx
            if split and core_mask in [int(m) for m in split.get("core_masks", [7])]:
                model = _split_accumulation(self._onnx, int(split.get("cores", 3)))
            import onnxruntime as ort
            # the onnx-fp32 reference's session, so the double computes the reference's bits on this CPU
            # class (rkdet-run and rkdet-selfcheck load the double from rkdet-onboard.pyz, which holds it)
            from rkdet.onboard.reference import session_options
            options = session_options(ort)
            self._session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
            fault = _fault_tensor()
            faulted = None if fault is None else _faulted_model(model, fault[0])
            if faulted is not None:
                self._fault_session = ort.InferenceSession(faulted, options, providers=["CPUExecutionProvider"])
                self._fault_run = fault[1]
        except Exception as err:  # the real runtime returns a code, so does the double
            _log("init_runtime: %s" % err)
            return -1
        if fault is not None and faulted is None and not self._cut:  # never a run that silently computes unchanged
            raise ValueError("TEST CONTROL RKDET_EMU_FAULT_TENSOR names tensor %r, which model %s does not have"
                             % (fault[0], os.path.basename(self._onnx)))
        self._inputs = self._session.get_inputs()
        self.core_mask = core_mask
        self._instance = _INSTANCES[0]
        _INSTANCES[0] += 1
        try:
            control = _read_image_control()
            self._library_version = control.get("library_version")
            self._drifts = []
            if control.get("drift"):
                self._drifts.append((control["drift"].get("output", 0), int(control["drift"].get("index", 0))))
            core = control.get("core_drift")
            if core and core_mask in [int(m) for m in core.get("core_masks", [3, 7])]:
                self._drifts.append((core.get("output", 0), int(core.get("index", 0))))
            self._heat = control.get("heat")
            if self._heat is not None and not (isinstance(self._heat, dict) and "control_dir" in self._heat):
                raise ValueError("heat needs control_dir")
            if control.get("signal_dir"):
                _signal_started(control["signal_dir"])
            if control.get("hold_until_removed") and not _wait_for_removal(str(control["hold_until_removed"])):
                _log("init_runtime: the image's hold test control was not released within %d s" % HOLD_LIMIT)
                self._session = None
                return -1
        except (OSError, IOError, ValueError, TypeError, AttributeError) as err:
            _log("init_runtime: bad image test control %s (%s)" % (IMAGE_CONTROL, err))
            self._session = None
            return -1
        return 0

    def _to_model_input(self, array, spec, fmt):
        x = np.asarray(array)
        layout = self._prep.get("input_layout", "nchw")
        if x.ndim == 4 and fmt == "nhwc" and layout == "nchw":
            x = x.transpose(0, 3, 1, 2)
        want = [d if isinstance(d, int) else -1 for d in spec.shape]
        if len(want) != x.ndim or any(w > 0 and w != s for w, s in zip(want, x.shape)):
            _log("inference: input %s has shape %s (as %s), model wants %s" % (spec.name, list(np.shape(array)), fmt, want))
            return None
        dtype = _ORT_TYPES.get(spec.type, np.float32)
        if np.issubdtype(dtype, np.floating):
            channel_axis = 1 if layout == "nchw" else x.ndim - 1
            shape = [1] * x.ndim
            shape[channel_axis] = -1
            mean = np.asarray(self._prep.get("mean", [0.0]), dtype=np.float32)
            std = np.asarray(self._prep.get("std", [255.0]), dtype=np.float32)
            x = (x.astype(np.float32) - mean.reshape(shape if mean.size > 1 else [1])) / std.reshape(shape if std.size > 1 else [1])
        return np.ascontiguousarray(x.astype(dtype))

    def inference(self, inputs, data_type=None, data_format=None, inputs_pass_through=None, get_frame_id=False,
                  reuse_outputs=False):
        """Outputs as a list of arrays, or None on error.

        `data_type` (int8, uint8, int16, float16, float32; None: as given) casts the inputs first;
        `reuse_outputs=True` returns buffers the next call overwrites; `get_frame_id=True` appends
        a frame counter, as the real one appends the runtime's frame id.
        """
        if self._session is None:
            _log("inference: init_runtime first")
            return None
        if not _wait_while_held():
            _log("inference: the hold test control was not released within %d s" % HOLD_LIMIT)
            return None
        if not isinstance(inputs, (list, tuple)) or len(inputs) != len(self._inputs):
            _log("inference: expected a list of %d inputs" % len(self._inputs))
            return None
        types = data_type if isinstance(data_type, (list, tuple)) else [data_type] * len(inputs)
        if len(types) != len(inputs) or any(t is not None and t not in _DATA_TYPES for t in types):
            _log("inference: data_type %r: use one of %s" % (data_type, ", ".join(sorted(_DATA_TYPES))))
            return None
        inputs = [np.asarray(a) if t is None else np.asarray(a).astype(_DATA_TYPES[t]) for a, t in zip(inputs, types)]
        formats = data_format if isinstance(data_format, (list, tuple)) else [data_format] * len(inputs)
        if self._heat is not None:
            try:
                _heat(self._heat)
            except (OSError, IOError, ValueError, TypeError) as err:
                _log("inference: heat test control failed (%s)" % err)
                return None
        start = _clock()
        feed = {}
        for array, spec, fmt in zip(inputs, self._inputs, formats):
            converted = self._to_model_input(array, spec, fmt or "nhwc")
            if converted is None:
                return None
            feed[spec.name] = converted
        if self._npu is not None:
            digest = hashlib.sha256()
            for array in inputs:
                digest.update(np.ascontiguousarray(array).tobytes())
            golden = self._npu.get(digest.hexdigest())
            if golden is None:
                _log("inference: emulated NPU mode answers golden inputs only; this input is not one")
                return None
            outputs = [np.array(golden[o.name], copy=True) for o in self._session.get_outputs()]
            session = self._session_for(inputs)
            if session is not self._session:  # a fault at a named tensor: what it moves, added to the answer
                moved = [f - c for f, c in zip(session.run(None, feed), self._session.run(None, feed))]
                outputs = [(o.astype(np.float64) + d).astype(o.dtype) for o, d in zip(outputs, moved)]
        else:
            outputs = self._session_for(inputs).run(None, feed)
        try:
            for which, index in self._drifts:
                if not isinstance(which, int):
                    which = [o.name for o in self._session.get_outputs()].index(which)
                _flip_lowest_bit(outputs, which, index)
            self._maybe_inject_fault(inputs, outputs)
        except (ValueError, IndexError, KeyError, TypeError) as err:
            _log("inference: bad fault control (%s)" % err)
            return None
        elapsed = _clock() - start
        ratio = _npu_clock_ratio()
        if ratio > 1.0:
            _sleep(elapsed * (ratio - 1.0))
        result = self._reuse_buffers(outputs) if reuse_outputs else [np.array(o, copy=True) for o in outputs]
        if get_frame_id:
            self._frame_id += 1
            result.append(self._frame_id)
        return result

    def _session_for(self, inputs):
        """The faulted session when a fault at a named tensor applies to this call, else the plain one."""
        if self._fault_session is None:
            return self._session
        if self._fault_run is None:
            return self._fault_session
        digest = hashlib.sha256()
        for array in inputs:
            digest.update(np.ascontiguousarray(array).tobytes())
        seen = self._fault_calls.get(digest.hexdigest(), 0)
        self._fault_calls[digest.hexdigest()] = seen + 1
        return self._fault_session if seen == self._fault_run else self._session

    def _maybe_inject_fault(self, inputs, outputs):
        fault = _read_fault()
        if fault is None:
            return
        if "core_mask" in fault and int(fault["core_mask"]) != self.core_mask:
            return
        if "instance" in fault and int(fault["instance"]) != self._instance:
            return
        wanted = fault.get("input_sha256")
        if wanted is not None:
            digest = hashlib.sha256()
            for array in inputs:
                digest.update(np.ascontiguousarray(array).tobytes())
            if digest.hexdigest() != wanted:
                return
        key = wanted or "*"
        seen = self._fault_counts.get(key, 0)
        self._fault_counts[key] = seen + 1
        if seen != int(fault["occurrence"]) and not (fault.get("all_calls") and seen >= int(fault["occurrence"])):
            return
        which = fault["output"]
        if not isinstance(which, int):
            which = [o.name for o in self._session.get_outputs()].index(which)
        flat = outputs[which].reshape(-1)
        bits = flat.view("u%d" % flat.dtype.itemsize)
        bit = int(fault["bit"])
        if not 0 <= bit < 8 * flat.dtype.itemsize:
            raise ValueError("bit %d outside a %d-byte element" % (bit, flat.dtype.itemsize))
        bits[int(fault["index"])] ^= bits.dtype.type(1 << bit)

    def _reuse_buffers(self, outputs):
        same = len(self._buffers) == len(outputs) and all(
            b.shape == o.shape and b.dtype == o.dtype for b, o in zip(self._buffers, outputs))
        if not same:
            self._buffers = [np.empty_like(o) for o in outputs]
        for buffer, output in zip(self._buffers, outputs):
            np.copyto(buffer, output)
        return list(self._buffers)

    def get_sdk_version(self):
        """The version string, or None before init_runtime (as the real one)."""
        if self._session is None:
            _log("get_sdk_version: init_runtime first")
            return None
        return "RKNN VERSION:\n  API: %s\n  DRV: %s\n(EMULATED: %s)" % (
            self._library_version or _library_version() or "unknown", _driver_version() or "unknown", RKDET_EMULATED)

    def list_support_target_platform(self, rknn_model=None):
        """Platforms the model runs on (None when the model file does not exist, as the real one)."""
        if rknn_model is not None and not os.path.exists(rknn_model):
            _log("list_support_target_platform: the model %s does not exist" % rknn_model)
            return None
        return {"emulated": ["rk3588", "rk3568", "rk3566", "rk3562", "rk3576"]}

    def release(self):
        self._session = None
        self._fault_session = None
        self._buffers = []
