"""The emulated board's launcher for a native runner (rkdet-run-c): qemu-user, explicitly, over the test double.

Why: an x86-64 host cannot exec the cross-compiled aarch64/armhf runner and rkdet never registers a
binfmt handler, so the emulated board names this launcher in its session environment
(rkdet.onboard.backend_table.NATIVE_EXEC_ENV; a real board leaves it unset and the runner runs itself).
Before exec'ing qemu it does what the board's runtime stands for: it builds the test-double librknnrt
(rknnrt_double.c, with the board's own cross compiler, once per board home) and computes the model's
outputs for the very inputs the runner will feed, with the emulated board's computation (the emulated
RKNNLite through rkdet-run's own `make_backend`, so C and lite2 read the same numbers), and leaves them
where the double reads them (model.txt, outputs/KEY.bin: capi_runtime.serve's format). Then
`exec qemu-ARCH -L SYSROOT -E LD_LIBRARY_PATH=... -E RKDET_RKNN_DOUBLE=... PROGRAM ARGS` (same pid: the
pinned job's kill and restore see one process).

Runs ON THE BOARD as a script (board python3: stdlib, numpy, the on-board program on PYTHONPATH):
`python3 board_exec.py ARCH API PROGRAM ARGS...`. Errors are one line on stderr, exit 3 (board trouble).

Outputs are served as float32 (what lite2's double computed: with want_float=1 the C runner then reads the
very same floats); a runner that asks for the runtime's own outputs (--want-float 0) gets each output as
INT8 (scale max|v|/127, zero point 0: what an INT8 model's runtime hands out before dequantising).

TEST CONTROLS (never on a real board), the file `$RKDET_EMU_CONTROL_DIR/capi.json`, re-read at every launch:
`{"args": [...], "reject_op": NAME}`: `args` are appended to the runner's arguments, as an application's own
settings would differ from lite2's (e.g. ["--want-float", "0"]: rknn-toolkit2#445; ["--input-fmt", "nchw"]:
NCHW data declared to a runtime that transposes it); `reject_op` makes the double refuse the model at
rknn_init naming that op (an op the C runtime rejects that lite2 runs, rknn-toolkit2#448).
"""

import hashlib
import os
import subprocess
import sys

try:
    from typing import Any, Optional  # noqa: F401  (type comments)
except ImportError:  # pragma: no cover
    pass

HERE = os.path.dirname(os.path.abspath(__file__))
#: architecture -> (cross compiler, qemu-user program, sysroot): Debian's packages
TARGETS = {"aarch64": ("aarch64-linux-gnu-gcc", "qemu-aarch64", "/usr/aarch64-linux-gnu"),
           "armhf": ("arm-linux-gnueabihf-gcc", "qemu-arm", "/usr/arm-linux-gnueabihf")}
#: rknn_tensor_type / rknn_tensor_format numbers of the documented ABI
TENSOR_TYPES = {"float32": 0, "float16": 1, "int8": 2, "uint8": 3, "int16": 4, "uint16": 5, "int32": 6}
FORMATS = {"nchw": 0, "nhwc": 1}
DOUBLE_ENV = "RKDET_RKNN_DOUBLE"  # where the double finds the served folder
EXIT_BOARD = 3


def library_name(rknpu1):
    # type: (bool) -> str
    """RKNPU1's librknn_api.so, RKNPU2's librknnrt.so."""
    return "librknn_api.so" if rknpu1 else "librknnrt.so"


def compile_command(arch, out, grown_abi=False, rknpu1=False, version=None):
    # type: (str, str, bool, bool, str) -> list
    """THE compile line of the test-double library (the emulator's SDK-shaped folder and the board's own)."""
    return [TARGETS[arch][0], "-std=c99", "-O2", "-fPIC", "-shared", "-Wno-misleading-indentation", "-I", HERE] + \
        (["-DRKDET_TEST_ABI_GROWN"] if grown_abi else []) + (["-DRKDET_RKNPU1"] if rknpu1 else []) + \
        (['-DRKDET_DOUBLE_VERSION="%s"' % version] if version else []) + \
        ["-o", out, os.path.join(HERE, "rknnrt_double.c")]


def fnv1a64(data):
    # type: (bytes) -> str
    """The double's key for an input: FNV-1a 64 of its bytes in the model's own type and layout."""
    h = 1469598103934665603
    for byte in bytearray(data):
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def model_lines(model_input, outputs, cores, custom="", version=None, reject_op=None):
    # type: (tuple, list, int, str, str, str) -> list
    """model.txt's lines: `model_input` (name, dtype, fmt, shape), `outputs` [(name, dtype, zp, scale, shape)]."""
    name, dtype, fmt, shape = model_input
    lines = ["input %s %d %d %d %s" % (name, TENSOR_TYPES[dtype], FORMATS[fmt], len(shape), " ".join(map(str, shape)))]
    lines += ["output %s %d %d %r %d %s" % (n, TENSOR_TYPES[t], zp, float(scale), len(s), " ".join(map(str, s)))
              for n, t, zp, scale, s in outputs]
    lines.append("cores %d" % cores)
    if custom:
        lines.append("custom " + " ".join(custom.split()))
    if version:
        lines.append("version " + version)
    if reject_op:
        lines.append("reject " + reject_op)
    return lines


def _tool(name):
    # type: (str) -> str
    """A Debian tool by name, from PATH or /usr/bin (a busybox board's PATH holds only its applets)."""
    import shutil
    return shutil.which(name) or os.path.join("/usr/bin", name)


def _fail(message):
    sys.stderr.write("emulated board (rkdet-run-c launcher): %s\n" % message)
    sys.exit(EXIT_BOARD)


def _flags(args):
    # type: (list) -> dict
    """The runner's flags this launcher needs (the runner itself checks them all)."""
    found = {}
    for at in range(0, len(args) - 1):
        if args[at] in ("--model", "--inputs", "--out", "--input-fmt", "--pass-through", "--want-float",
                        "--core-mask", "--npu-cores"):
            found[args[at]] = args[at + 1]  # the last one given wins, as in the runner
    return found


def _double_library(arch, rknpu1):
    # type: (str, bool) -> str
    """The double built for `arch` in the board user's home (once; keyed by its source)."""
    with open(os.path.join(HERE, "rknnrt_double.c"), "rb") as handle:
        key = hashlib.sha256(handle.read() + arch.encode() + (b"1" if rknpu1 else b"2")).hexdigest()[:16]
    folder = os.path.join(os.path.expanduser("~"), ".cache", "rkdet-capi-double", "%s-%s" % (arch, key))
    lib = os.path.join(folder, library_name(rknpu1))
    if os.path.isfile(lib):
        return folder
    if not os.path.isdir(folder):
        os.makedirs(folder)
    tmp = "%s.%d" % (lib, os.getpid())
    try:
        cmd = compile_command(arch, tmp, rknpu1=rknpu1)
        done = subprocess.run([_tool(cmd[0])] + cmd[1:], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        _fail("cannot build the test-double %s for %s (%s); install gcc-%s" % (library_name(rknpu1), arch, err,
                                                                              TARGETS[arch][0][:-4]))
    if done.returncode != 0:
        _fail("the test-double %s does not compile: %s" % (library_name(rknpu1), done.stderr.decode()[-300:]))
    os.rename(tmp, lib)
    return folder


def _control():
    # type: () -> dict
    """The TEST CONTROL file's settings (empty without one)."""
    import json
    folder = os.environ.get("RKDET_EMU_CONTROL_DIR")
    path = os.path.join(folder, "capi.json") if folder else ""
    if not path or not os.path.isfile(path):
        return {}
    with open(path) as handle:
        doc = json.loads(handle.read(65536))
    if not isinstance(doc, dict) or not all(isinstance(a, str) for a in doc.get("args") or []):
        _fail("%s: expected {\"args\": [strings], \"reject_op\": name}" % path)
    return doc


def _runtime_version():
    # type: () -> str
    """The board's runtime version as its library file says it (what probe.sh reads), numbers only."""
    import re
    root = os.environ.get("RKDET_ROOT", "") or "/"
    for rel in ("usr/lib/librknnrt.so", "usr/lib/librknn_runtime.so", "usr/lib64/librknnrt.so"):
        path = os.path.join(root, rel)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                found = re.search(rb"(?:librknnrt|librknn_runtime) version:? ([0-9][0-9.]*)", handle.read(1 << 22))
            if found:
                return found.group(1).decode("ascii")
    return "unknown"


def _native_input(arr, declared, model_fmt, pass_through):
    """The bytes the double stores for `arr` fed as `declared` layout (the runtime's conversion, as
    rknnrt_double.c does it: a 4-D input declared in the other layout is transposed into the model's)."""
    import numpy as np
    if pass_through or arr.ndim != 4 or declared == model_fmt:
        return np.ascontiguousarray(arr)
    n, a, b, c = arr.shape  # the model's dims (its own layout); the buffer is read as the declared one
    if model_fmt == "nhwc":  # dims N,H,W,C; buffer is NCHW data of C,H,W
        return np.ascontiguousarray(arr.reshape(n, c, a, b).transpose(0, 2, 3, 1))
    return np.ascontiguousarray(arr.reshape(n, b, c, a).transpose(0, 3, 1, 2))


def _int8(values):
    # type: (Any) -> tuple
    """(scale, encode): the output as the runtime's INT8 (scale max|v|/127, zero point 0)."""
    import numpy as np
    top = float(max(np.max(np.abs(v)) for v in values)) if values else 0.0
    scale = float(np.float32(top / 127.0)) if top > 0 else 1.0
    return scale, lambda o: np.clip(np.rint(np.asarray(o, dtype=np.float64) / scale), -128, 127).astype(np.int8).tobytes()


def serve_for(args, folder, reject_op=None):
    # type: (list, str, Optional[str]) -> str
    """Compute the outputs the runner's inputs get on this emulated board and leave them in `folder`."""
    import numpy as np
    from rkdet.onboard.backend_table import RKNNLITE
    from rkdet.onboard.backends import load_io_spec, make_backend
    from rkdet.onboard.identity import read_rknn_facts

    flags = _flags(args)
    model, inputs = flags.get("--model"), flags.get("--inputs")
    if not model or not inputs or not os.path.isdir(inputs):
        return ""  # the runner says what is missing
    spec = load_io_spec(model) or {}
    layouts = [s.get("layout", "nhwc") for s in spec.get("inputs") or []] or ["nhwc"]
    files = sorted(f for f in os.listdir(inputs) if f.endswith(".npy"))
    if not files:
        return ""
    mask = flags.get("--core-mask", "auto")
    try:
        backend = make_backend(RKNNLITE.name, model, mask if mask in ("auto", "0", "1", "2", "0_1", "0_1_2") else "auto")
    except Exception as err:  # the emulated runtime's own refusal: the C double refuses alike, at rknn_init
        _fail("the emulated runtime cannot load %s: %s" % (model, err))
    arrays = [np.load(os.path.join(inputs, f), allow_pickle=False) for f in files]
    model_fmt = layouts[0]
    declared = flags.get("--input-fmt", "model")
    declared = model_fmt if declared == "model" else declared
    raw_outputs = flags.get("--want-float") == "0"
    names = spec.get("outputs")
    computed = []  # (key, [outputs]) per input
    for arr in arrays:
        native = _native_input(arr, declared, model_fmt, flags.get("--pass-through") == "1")
        computed.append((fnv1a64(native.tobytes()), [np.array(o) for o in backend.own(backend.infer([native]))]))
    backend.close()
    outputs, encode = [], []
    for k, first in enumerate(computed[0][1]):
        name = names[k] if names and k < len(names) else "output%d" % k
        if raw_outputs:
            scale, enc = _int8([outs[k] for _, outs in computed])
            outputs.append((name, "int8", 0, scale, first.shape))
            encode.append(enc)
        else:
            outputs.append((name, "float32", 0, 1.0, first.shape))
            encode.append(lambda o: np.ascontiguousarray(o, dtype=np.float32).tobytes())
    facts = read_rknn_facts(model) or {}
    emulates = bool(getattr(backend, "emulates_npu", False))
    version = "%s (rkdet-test-double%s)" % (_runtime_version(), ", emulates-npu" if emulates else "")
    in_name = (spec.get("inputs") or [{}])[0].get("name") or "input0"
    cores = int(flags.get("--npu-cores") or _cores())
    lines = model_lines((in_name, str(arrays[0].dtype), model_fmt, list(arrays[0].shape)), outputs, cores,
                        facts.get("custom_string") or "", version, reject_op)
    os.makedirs(os.path.join(folder, "outputs"))
    with open(os.path.join(folder, "model.txt"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    for key, outs in computed:
        with open(os.path.join(folder, "outputs", key + ".bin"), "wb") as handle:
            handle.write(b"".join(enc(o) for enc, o in zip(encode, outs)))
    return folder


def _cores():
    # type: () -> int
    """The emulated NPU's cores (its debugfs load line lists one per core), as the real runtime finds them."""
    import re
    path = os.path.join(os.environ.get("RKDET_ROOT", "") or "/", "sys/kernel/debug/rknpu/load")
    try:
        with open(path) as handle:
            return len(re.findall(r"Core\d+", handle.read())) or 1
    except (OSError, IOError):
        return 1


def main(argv):
    # type: (list) -> int
    if len(argv) < 4 or argv[1] not in TARGETS or argv[2] not in ("rknpu1", "rknpu2"):
        _fail("usage: board_exec.py aarch64|armhf rknpu1|rknpu2 PROGRAM ARGS...")
    control = _control()
    arch, rknpu1, program = argv[1], argv[2] == "rknpu1", argv[3]
    args = argv[4:] + list(control.get("args") or [])
    qemu, sysroot = _tool(TARGETS[arch][1]), TARGETS[arch][2]
    libdir = _double_library(arch, rknpu1)
    out = _flags(args).get("--out")
    folder = ""
    if out:
        folder = os.path.join(os.path.dirname(os.path.abspath(out)) or ".", "capi-double.%d" % os.getpid())
        folder = serve_for(args, folder, control.get("reject_op"))
    env = ["-E", "LD_LIBRARY_PATH=" + libdir] + (["-E", "%s=%s" % (DOUBLE_ENV, folder)] if folder else [])
    try:
        os.execv(qemu, [qemu, "-L", sysroot] + env + [program] + list(args))
    except OSError as err:
        _fail("cannot run %s (%s); install qemu-user" % (qemu, err))
    return EXIT_BOARD


if __name__ == "__main__":
    sys.exit(main(sys.argv))
