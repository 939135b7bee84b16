"""rkdet-run: run one model N times over a set of inputs and record every output, provably.

This file is deployed ALONE to the board, so it imports only the standard library, numpy and the
runtime of the chosen backend (rknnlite or onnxruntime, imported lazily), never anything from
rkdet, and it runs on Python 3.6+ (RV1126 boards ship the legacy armhf RKNN Toolkit Lite v1 on
Python 3.6/3.7): no dataclasses, no postponed annotations, no walrus.

The result folder follows docs/FORMATS.md ("Result set"): run.json, index.jsonl (source of
truth, one fsync'd line per inference), snapshots.jsonl, outputs/<hash>.npy (each distinct output
once) and summary.json. Every file is written to a temporary name and renamed, every JSON Lines
record is one write of a whole line, so a run killed with SIGKILL leaves every completed inference
readable (`read_index` ignores a torn last line).

Exit codes (same meaning as the rkdet CLI):
    0    complete, every input gave one distinct output set over all runs
    1    complete, some input gave more than one distinct output set (see summary.json)
    2    bad input: missing/unreadable model or inputs, shape/dtype mismatch, bad flag, out dir
         not writable or not empty
    3    board/runtime trouble: runtime not installed, load/init/inference failed, disk full
    5    model refused: its embedded build fingerprint (or, without one, its sha256) is not the one
         given with --expect-fingerprint / --expect-sha256 (not the build deploy pushed)
  130    interrupted (SIGINT/SIGTERM); completed runs stay readable, run.json says "failed"

With several core masks (--core-mask 0,1,2,0_1_2) every mask is a cell with its own result set in
OUT/core-<mask>/, and OUT/cells.json says which ran, which were skipped and whether they agree.
"""

import argparse
import binascii
import errno
import glob
import hashlib
import json
import os
import platform
import queue
import re
import signal
import stat
import struct
import sys
import threading
import time

try:
    from typing import Any, Dict, List, Optional, Sequence, Tuple
except ImportError:  # pragma: no cover - typing is stdlib from 3.5 on
    pass

try:
    import numpy as np
except ImportError:  # reported as a one-line error by main()
    np = None  # type: ignore

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_BAD_INPUT = 2
EXIT_BOARD = 3
EXIT_MODEL_REFUSED = 5
EXIT_INTERRUPTED = 130

RUN_SCHEMA = "rkdet.run/1"
SUMMARY_SCHEMA = "rkdet.summary/1"
CELLS_SCHEMA = "rkdet.cells/1"
CONTEXTS_SCHEMA = "rkdet.contexts/1"
EMBED_KEY = "rkdet-fp="  # rkdet convert's custom string: "[user text;]rkdet-fp=<64 hex>" (docs/FORMATS.md)
CORE_MASKS = ("auto", "0", "1", "2", "0_1", "0_1_2")
GRAPH_OPT_LEVELS = ("disable", "basic", "extended", "all")

EPILOG = """exit codes:
  0    complete; every input gave one distinct output set over all runs
  1    complete; some input gave more than one distinct output set (see summary.json)
  2    bad input (model/inputs missing or unreadable, shape/dtype mismatch, bad flag,
       out dir not writable or not empty)
  3    board/runtime trouble (runtime not installed, load/init/inference failed, disk full)
  5    model refused: its embedded build fingerprint (or its sha256) is not the expected one
  130  interrupted (SIGINT/SIGTERM); completed runs stay readable

environment: RKDET_ROOT prefixes every sysfs/procfs path read for snapshots (empty on boards)."""


class RunnerError(Exception):
    """A failure with a one-line message and the exit code it maps to (no traceback shown)."""

    def __init__(self, message, exit_code=EXIT_BAD_INPUT):
        # type: (str, int) -> None
        Exception.__init__(self, " ".join(str(message).split()))
        self.exit_code = exit_code


class Interrupted(BaseException):
    """Raised from the SIGTERM handler so the run is closed like a Ctrl-C (a BaseException, like
    KeyboardInterrupt, so no `except Exception` around a runtime call swallows it)."""


# --------------------------------------------------------------------------------------------
# The output hash: the ONE definition (docs/FORMATS.md); the host imports it from here.


def output_hash(array):
    # type: (Any) -> str
    """sha256(dtype.str | shape | C-contiguous bytes), lowercase hex.

    dtype and shape are part of the hash so equal bytes in another layout never compare equal.
    """
    arr = np.asarray(array)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)  # never for 0-d arrays: it would make them 1-d
    digest = hashlib.sha256()
    header = arr.dtype.str + "|" + ",".join(str(int(d)) for d in arr.shape) + "|"
    digest.update(header.encode("ascii"))
    if arr.size:
        digest.update(arr.reshape(-1).view(np.uint8))
    return digest.hexdigest()


def _hashed_bytes(array):
    # type: (Any) -> Any
    """The bytes output_hash covers (C order) as a flat array, in 8-byte words when the size allows
    (fewer elements to compare)."""
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return flat.view(np.uint64) if flat.size % 8 == 0 else flat


def same_bytes(a, b):
    # type: (Any, Any) -> bool
    """True when output_hash(a) == output_hash(b) for sure: same dtype (incl. byte order), shape and
    bytes. A compare, not a hash (~4x cheaper than sha256 here); bytes, not values (-0.0, NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.str != b.dtype.str or a.shape != b.shape:
        return False
    return bool(np.array_equal(_hashed_bytes(a), _hashed_bytes(b)))


def file_sha256(path):
    # type: (str) -> str
    """sha256 of a file's bytes, read in chunks so large models do not sit in memory twice."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# The model's identity: the build fingerprint rkdet convert embeds in the .rknn, else its sha256.

_RKNN_MAGIC = b"RKNN\0\0\0\0"
_RKNN_CUSTOM_SLOT = 11  # root-table slot of config(custom_string=...) in toolkit2 2.x files
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


MAX_RKNN_STRING = 1 << 20  # bytes of the custom string rkdet reads from a .rknn (rkdet's is < 200)
MAX_RKNN_METADATA = 1 << 20  # bytes of the .rknn's trailing metadata JSON


def _fb_string(buf, table, slot):
    # type: (Any, int, int) -> Optional[str]
    """The string in `slot` of the FlatBuffer table at `table`, or None (absent, malformed or longer
    than MAX_RKNN_STRING). `buf` is bytes or a memoryview of a mapped file: nothing is copied but the string."""
    try:
        vtable = table - struct.unpack_from("<i", buf, table)[0]
        vt_size = struct.unpack_from("<H", buf, vtable)[0]
        if 4 + 2 * slot + 2 > vt_size:
            return None
        field_off = struct.unpack_from("<H", buf, vtable + 4 + 2 * slot)[0]
        if not field_off:
            return None
        pos = table + field_off
        target = pos + struct.unpack_from("<I", buf, pos)[0]
        length = struct.unpack_from("<I", buf, target)[0]
        if length > MAX_RKNN_STRING or target + 4 + length > len(buf):
            return None
        return bytes(buf[target + 4:target + 4 + length]).decode("utf-8", "replace")
    except (struct.error, IndexError, ValueError):
        return None


# --------------------------------------------------------------------------------------------
# The board side's bounded reads (the host's one reader is rkdet/records/io.py; these files stay
# standalone, so they carry their own copy of the same rules): a regular file only (O_NONBLOCK: a FIFO
# cannot hang), a size cap before reading, the JSON nesting depth measured before json.loads.

MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(b'"[^"\\\\]*(?:\\\\.[^"\\\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(bytearray(b for b in range(256) if b not in b"[]{}"))
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


def json_depth(data):
    # type: (bytes) -> int
    """The deepest nesting of arrays/objects in JSON text (strings skipped), in C-speed passes."""
    import itertools
    import operator
    steps = _JSON_STRING.sub(b"", bytes(data)).translate(None, _NOT_BRACKET).translate(_DEPTH_STEP)
    return max(itertools.chain((0,), map(operator.sub, itertools.accumulate(steps), itertools.count(1))))


def loads_bounded(data, where, max_depth=MAX_JSON_DEPTH):
    # type: (bytes, str, int) -> Any
    """JSON text with its depth bounded; ValueError naming `where` otherwise."""
    if json_depth(data) > max_depth:
        raise ValueError("%s: JSON nested deeper than %d levels" % (where, max_depth))
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise ValueError("%s: not JSON (%s)" % (where, str(err).splitlines()[0][:200] if str(err) else type(err).__name__))


def open_regular(path):
    # type: (str) -> int
    """A read-only descriptor of `path` if it is a regular file (O_NONBLOCK, checked with fstat: a FIFO
    or device never blocks or is read); OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file (a FIFO or device?)", path)
    return fd


def read_regular(path, limit):
    # type: (str, int) -> bytes
    """At most `limit` bytes of a regular file; ValueError when it holds more (nothing more is read)."""
    with os.fdopen(open_regular(path), "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError("%s: larger than %d MiB" % (path, limit >> 20))
    return data


# Untrusted text (a bundle's platform, names) printed on a board: the same characters as the host's
# rkdet/textsafe.py `visible` (tests/trust/test_selfcheck_trust.py checks both agree).
_CONTROL = re.compile(u"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text):
    # type: (Any) -> str
    """`str(text)` with control and bidi characters shown as escapes (\\x1b, \\u202e)."""
    def escape(match):
        ch = match.group()
        if ch in _NAMED:
            return _NAMED[ch]
        return "\\x%02x" % ord(ch) if ord(ch) <= 0xFF else "\\u%04x" % ord(ch)
    return _CONTROL.sub(escape, str(text))


def read_rknn_facts(path):
    # type: (str) -> Optional[Dict[str, Any]]
    """What a toolkit2 `.rknn` says about itself, read from its bytes (RKNNLite 2.x has no query for
    the custom string): custom_string, embedded_fingerprint (the last `rkdet-fp=<64 hex>` in it, or
    None), toolkit_version (metadata JSON) and format_version. None when the file is no readable
    toolkit2 .rknn (toolkit1, encrypted, truncated): then only its sha256 can identify it.

    Bounded: the file is mapped, not read (a 2 GiB model costs no memory), the strings and the
    metadata JSON are capped in size and depth, and a FIFO or device is never opened blocking."""
    import mmap
    try:
        fd = open_regular(path)
    except (OSError, IOError):
        return None
    try:
        if os.fstat(fd).st_size < 72:
            return None
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, IOError, ValueError):
        return None
    finally:
        os.close(fd)
    data = memoryview(mapped)
    try:
        return _rknn_facts(data)
    finally:
        data.release()
        try:
            mapped.close()
        except BufferError:  # a slice still referenced: unmapped when it is collected
            pass


def _rknn_facts(data):
    # type: (memoryview) -> Optional[Dict[str, Any]]
    if len(data) < 72 or bytes(data[:8]) != _RKNN_MAGIC:
        return None
    version, model_size = struct.unpack_from("<QQ", data, 8)
    if (version & 0xFFF) < 2 or 64 + model_size + 8 > len(data):
        return None
    payload = data[64:64 + model_size]
    try:
        if len(payload) < 8 or bytes(payload[4:8]) != b"RKNN":
            return None
        custom = _fb_string(payload, struct.unpack_from("<I", payload, 0)[0], _RKNN_CUSTOM_SLOT) or ""
    finally:
        payload.release()
    toolkit = None
    json_size = struct.unpack_from("<Q", data, 64 + model_size)[0]
    if json_size <= MAX_RKNN_METADATA:
        try:
            meta = loads_bounded(bytes(data[72 + model_size:72 + model_size + json_size]), "metadata")
            toolkit = str(meta.get("version"))[:64] if isinstance(meta, dict) and meta.get("version") else None
        except ValueError:
            pass
    at = custom.rfind(EMBED_KEY)
    embedded = custom[at + len(EMBED_KEY):at + len(EMBED_KEY) + 64] if at >= 0 else None
    return {"custom_string": custom[:1024], "format_version": int(version),
            "embedded_fingerprint": embedded if embedded and _HEX64.match(embedded) else None,
            "toolkit_version": toolkit}


def check_model(model, expect_fingerprint=None, expect_sha256=None):
    # type: (str, Optional[str], Optional[str]) -> Dict[str, Any]
    """Is this the model deploy pushed? By the embedded build fingerprint when the model carries one
    and one is expected, else by its sha256; raises RunnerError (exit 5) naming both values when not.
    Returns run.json's "model_check": {"by": "embedded-fingerprint" | "sha256" | "none", ...}."""
    facts = read_rknn_facts(model) if model.endswith(".rknn") else None
    found = facts and facts["embedded_fingerprint"]
    if expect_fingerprint and found:
        if found != expect_fingerprint:
            raise RunnerError("%s: refused: it carries build fingerprint %s, expected %s: not the build deploy "
                              "pushed; deploy it again (rkdet deploy pushes the model with its fingerprint)"
                              % (model, found[:16], expect_fingerprint[:16]), EXIT_MODEL_REFUSED)
        return {"by": "embedded-fingerprint", "expected": expect_fingerprint, "found": found}
    why = ("no --expect-fingerprint" if not expect_fingerprint else
           "the model carries no rkdet build fingerprint" if facts is not None else
           "not a toolkit2 .rknn: no embedded fingerprint to read")
    if expect_sha256:
        actual = file_sha256(model)
        if actual != expect_sha256:
            raise RunnerError("%s: refused: sha256 %s, expected %s (%s): not the file deploy pushed; deploy it again"
                              % (model, actual[:16], expect_sha256[:16], why), EXIT_MODEL_REFUSED)
        return {"by": "sha256", "expected": expect_sha256, "found": actual, "why": why}
    return {"by": "none", "why": "nothing expected (no --expect-fingerprint or --expect-sha256)"}


# --------------------------------------------------------------------------------------------
# Atomic files and append-only JSON Lines.


def _remove_quietly(path):
    # type: (str) -> None
    try:
        os.unlink(path)
    except OSError:
        pass


def _write_through(path, write):
    # type: (str, Any) -> str
    """write(handle) into an existing FIFO or character device: no temp, no rename."""
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "wb") as handle:
        write(handle)
    return path


class _FdSink(object):
    """write(bytes) onto an already open descriptor (its offset shared with the process's own use)."""

    def __init__(self, fd):
        # type: (int) -> None
        self.fd = fd

    def write(self, data):
        # type: (Any) -> int
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.write(self.fd, view[done:])
        return done


def _alias_fd(path):
    # type: (str) -> Optional[int]
    """The descriptor `path` names when it (or a symlink on the way) is /dev/stdout, /dev/fd/N, /proc/self/fd/N."""
    p = os.path.abspath(path)
    names = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
    prefixes = ("/dev/fd/", "/proc/self/fd/", "/proc/%d/fd/" % os.getpid())
    for _ in range(40):
        if p in names:
            return names[p]
        for prefix in prefixes:
            if p.startswith(prefix) and p[len(prefix):].isdigit():
                return int(p[len(prefix):])
        if not os.path.islink(p):
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return None


def write_atomic(path, data, perms=None):
    # type: (str, Any, Optional[int]) -> str
    """THE atomic writer of rkdet, host and board (the host imports it from here).

    `data` is bytes, a str (UTF-8) or a callable(handle) writing bytes. What is at `path` decides how:
    /dev/stdout, /dev/fd/N (and /proc/self/fd/N) write to that open descriptor; a FIFO or a character
    device (/dev/null) is opened and written through; neither is ever renamed over. A symlink is
    followed and its target written (a regular target is replaced atomically, the link stays). A
    directory, socket or block device raises OSError. A regular file or a new name gets a unique temp name in the same folder (O_EXCL), fsync, then a rename, so a
    reader never sees half a file and the temp is removed on any error. `perms` sets the new file's
    mode (default: the replaced file's mode, else 0o666 minus umask). Returns the path written.
    """
    if callable(data):
        write = data
    else:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        write = lambda handle: handle.write(raw)  # noqa: E731
    fd_no = _alias_fd(path)
    if fd_no is not None:  # /dev/stdout: this process's own descriptor, in order with what it printed
        for stream in (sys.stdout, sys.stderr):
            if stream is not None and getattr(stream, "fileno", None):
                try:
                    if stream.fileno() == fd_no:
                        stream.flush()
                except (OSError, ValueError):
                    pass
        write(_FdSink(fd_no))
        return path
    try:
        st = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            return _write_through(path, write)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        raise OSError(errno.EINVAL, "not a regular file, FIFO or character device", path)
    target = os.path.realpath(path)  # a symlink's (possibly not yet existing) target
    folder, name = os.path.split(target)
    for _ in range(100):
        tmp = os.path.join(folder, ".%s.%d-%s.tmp" % (name, os.getpid(), binascii.hexlify(os.urandom(4)).decode()))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name", target)
    try:
        with os.fdopen(fd, "wb") as handle:
            if perms is not None or st is not None:
                os.fchmod(handle.fileno(), perms if perms is not None else stat.S_IMODE(st.st_mode))
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        _remove_quietly(tmp)
        raise
    return target


def _write_atomic(path, mode, write):
    # type: (str, str, Any) -> None
    """write(handle) atomically (see write_atomic); `mode` "w" wraps the handle for text."""
    if mode == "w":
        write_atomic(path, lambda handle: write(_TextSink(handle)))
    else:
        write_atomic(path, write)


class _TextSink(object):
    """Just enough of a text file for write(handle) callers: write(str) as UTF-8."""

    def __init__(self, handle):
        # type: (Any) -> None
        self._handle = handle

    def write(self, text):
        # type: (str) -> int
        return self._handle.write(text.encode("utf-8"))


def write_json_atomic(path, obj):
    # type: (str, Any) -> None
    """Write JSON (sorted keys, indent 2) atomically."""
    _write_atomic(path, "w", lambda handle: handle.write(json.dumps(obj, sort_keys=True, indent=2) + "\n"))


def save_array_atomic(path, array):
    # type: (str, Any) -> None
    """np.save atomically: a reader never sees a half-written .npy."""
    _write_atomic(path, "wb", lambda handle: np.save(handle, array, allow_pickle=False))


class JsonlAppender(object):
    """Append-only JSON Lines: one write() of one whole line, then fsync.

    If the write or the fsync fails (ENOSPC, EIO), the file is cut back to its last complete line,
    so the index never holds a half record that a later append would glue onto. (rkdet-run calls
    it for index lines from its Recorder thread, so a slow SD card's fsync never delays inference.)
    """

    def __init__(self, path):
        # type: (str) -> None
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, record):
        # type: (Dict[str, Any]) -> None
        data = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        size = os.fstat(self._fd).st_size
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (short write)", self.path)
            os.fsync(self._fd)
        except BaseException:
            try:
                os.ftruncate(self._fd, size)
            except OSError:
                pass
            raise

    def close(self):
        # type: () -> None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_jsonl(path):
    # type: (str) -> List[Dict[str, Any]]
    """Records of a JSON Lines file; a final line without its newline (torn write) is ignored."""
    with open(path, "rb") as handle:
        data = handle.read()
    records = []
    lines = data.split(b"\n")
    for number, line in enumerate(lines[:-1], 1):  # the last piece has no newline: torn or empty
        if not line.strip():
            continue
        try:
            records.append(json.loads(line.decode("utf-8")))
        except ValueError:
            raise ValueError("%s:%d: not a JSON record; the file is corrupt" % (path, number))
    return records


def read_index(result_dir):
    # type: (str) -> List[Dict[str, Any]]
    """Every completed inference of a result set, in execution order (tolerates a torn last line)."""
    return read_jsonl(os.path.join(result_dir, "index.jsonl"))


class Summary(object):
    """summary.json built one index record at a time, so memory does not grow with the run count
    (a 100k-run soak on a 2 GB board must not keep every record).

    A run "diverges" when its output hashes differ from that input's run 0; the output named is
    the first (in model order) whose hash differs.
    """

    def __init__(self, backend=None):
        # type: (Optional[str]) -> None
        self.backend = backend
        self.inputs = {}  # type: Dict[str, Dict[str, Any]]
        self._reference = {}  # type: Dict[str, List[Tuple[str, str]]]
        self._distinct = {}  # type: Dict[str, set]

    def add(self, record):
        # type: (Dict[str, Any]) -> None
        name = record["input"]
        outs = [(o["name"], o["hash"]) for o in record["outputs"]]
        entry = self.inputs.setdefault(name, {"distinct": 0, "runs": 0, "first_divergence": None})
        entry["runs"] += 1
        self._distinct.setdefault(name, set()).add(tuple(outs))
        entry["distinct"] = len(self._distinct[name])
        if name not in self._reference:
            self._reference[name] = outs
        elif entry["first_divergence"] is None and outs != self._reference[name]:
            first = [n for (n, h), (rn, rh) in zip(outs, self._reference[name]) if h != rh or n != rn]
            entry["first_divergence"] = {"run": record["run"], "output": first[0] if first else None}

    def result(self):
        # type: () -> Dict[str, Any]
        summary = {
            "schema": SUMMARY_SCHEMA,
            "runs": max([e["runs"] for e in self.inputs.values()] or [0]),
            "inputs": self.inputs,
            "deterministic": all(e["distinct"] == 1 for e in self.inputs.values()),
        }
        if self.backend is not None:
            summary["backend"] = self.backend
        return summary


def summarize(records, backend=None):
    # type: (Sequence[Dict[str, Any]], Optional[str]) -> Dict[str, Any]
    """summary.json from index records (e.g. `read_index` of an interrupted run): distinct output
    sets per input and the first divergence."""
    summary = Summary(backend)
    for record in records:
        summary.add(record)
    return summary.result()


# --------------------------------------------------------------------------------------------
# Board snapshots: sysfs under $RKDET_ROOT, nodes found by existence and name, never by index.


def _sys_path(root, rel):
    # type: (str, str) -> str
    return os.path.join(root or "/", rel)


def _read_text(path):
    # type: (str) -> Optional[str]
    try:
        with open(path, "r") as handle:
            return handle.read().strip()
    except (OSError, IOError, UnicodeDecodeError):
        return None


def _read_int(path):
    # type: (str) -> Optional[int]
    text = _read_text(path)
    try:
        return int(text.split()[0]) if text else None
    except ValueError:
        return None


def _natural_key(path):
    # type: (str) -> Tuple[str, int]
    base = os.path.basename(path)
    stem = base.rstrip("0123456789")
    digits = base[len(stem):]
    return (stem, int(digits) if digits else -1)


def _cpu_policies(root):
    # type: (str) -> Dict[str, Dict[str, Any]]
    cpu_dir = _sys_path(root, "sys/devices/system/cpu")
    dirs = sorted(glob.glob(os.path.join(cpu_dir, "cpufreq", "policy*")), key=_natural_key)
    named = [(os.path.basename(d), d) for d in dirs]
    if not named:  # old kernels: only cpuN/cpufreq, shared policies appear once per real dir
        seen = set()
        for d in sorted(glob.glob(os.path.join(cpu_dir, "cpu[0-9]*", "cpufreq")), key=lambda p: _natural_key(os.path.dirname(p))):
            real = os.path.realpath(d)
            if real not in seen:
                seen.add(real)
                named.append((os.path.basename(os.path.dirname(d)), d))
    policies = {}
    for name, d in named:
        cur = _read_int(os.path.join(d, "scaling_cur_freq"))
        if cur is None:
            cur = _read_int(os.path.join(d, "cpuinfo_cur_freq"))
        policies[name] = {"governor": _read_text(os.path.join(d, "scaling_governor")), "cur_khz": cur}
    return policies


def _devfreq(root):
    # type: (str) -> Dict[str, Dict[str, Any]]
    nodes = {}
    for d in sorted(glob.glob(os.path.join(_sys_path(root, "sys/class/devfreq"), "*"))):
        nodes[os.path.basename(d)] = {"governor": _read_text(os.path.join(d, "governor")),
                                      "cur_hz": _read_int(os.path.join(d, "cur_freq"))}
    return nodes


def _thermal(root):
    # type: (str) -> Dict[str, Optional[int]]
    zones = {}  # type: Dict[str, Optional[int]]
    for d in sorted(glob.glob(os.path.join(_sys_path(root, "sys/class/thermal"), "thermal_zone*")), key=_natural_key):
        kind = _read_text(os.path.join(d, "type")) or os.path.basename(d)
        key = kind if kind not in zones else "%s/%s" % (kind, os.path.basename(d))
        zones[key] = _read_int(os.path.join(d, "temp"))
    return zones


def _npu_load(root):
    # type: (str) -> Optional[str]
    for rel in ("sys/kernel/debug/rknpu/load", "proc/debug/rknpu/load"):
        text = _read_text(_sys_path(root, rel))
        if text is not None:
            return text
    return None


def board_snapshot(at, run=None, root=None):
    # type: (str, Optional[int], Optional[str]) -> Dict[str, Any]
    """Governors, current frequencies, temperatures by zone type and NPU load, right now.

    Unreadable values are null: a snapshot must never stop a run.
    """
    if root is None:
        root = os.environ.get("RKDET_ROOT", "")
    return {"at": at, "run": run, "t_unix": time.time(), "cpu": _cpu_policies(root),
            "devfreq": _devfreq(root), "thermal": _thermal(root), "npu_load": _npu_load(root)}


# --------------------------------------------------------------------------------------------
# Inputs: DIR/*.npy (one tensor each) or DIR/*.npz (one sample of several named tensors).


class Sample(object):
    """One input sample: its name (file stem), file, file hash and tensors by input name."""

    def __init__(self, name, path, tensors, keyed):
        # type: (str, str, List[Tuple[str, Any]], bool) -> None
        self.name = name
        self.path = path
        self.tensors = tensors  # [(key, array)]; key is the npz key, or "" for a bare .npy
        self.keyed = keyed
        self.sha256 = file_sha256(path)
        self.feed = [a for _, a in tensors]  # reordered to the model's input order by validate

    def describe(self):
        # type: () -> Dict[str, Any]
        first = self.tensors[0][1]
        info = {"name": self.name, "file": os.path.basename(self.path), "sha256": self.sha256,
                "shape": [int(d) for d in first.shape], "dtype": first.dtype.name}
        if self.keyed:
            info["tensors"] = [{"name": k, "shape": [int(d) for d in a.shape], "dtype": a.dtype.name}
                               for k, a in self.tensors]
        return info


def load_inputs(input_dir):
    # type: (str) -> List[Sample]
    """The samples of an input folder, sorted by file name; one-line errors name the file."""
    if not os.path.isdir(input_dir):
        raise RunnerError("%s: inputs folder not found; pass --inputs DIR holding *.npy or *.npz" % input_dir)
    npy = sorted(glob.glob(os.path.join(input_dir, "*.npy")))
    npz = sorted(glob.glob(os.path.join(input_dir, "*.npz")))
    if npy and npz:
        raise RunnerError("%s: mixes .npy and .npz inputs; use *.npy for single-input models or *.npz for multi-input" % input_dir)
    if not npy and not npz:
        raise RunnerError("%s: no *.npy or *.npz inputs found" % input_dir)
    samples = []
    for path in npy or npz:
        name = os.path.splitext(os.path.basename(path))[0]
        try:
            loaded = np.load(path, allow_pickle=False)
            if npz:
                with loaded:
                    tensors = [(k, np.ascontiguousarray(loaded[k])) for k in loaded.files]
                if not tensors:
                    raise ValueError("holds no arrays")
            else:
                tensors = [("", np.ascontiguousarray(loaded))]
        except (OSError, IOError, ValueError) as err:
            raise RunnerError("%s: not a readable numpy %s file (%s)" % (path, "npz" if npz else "npy", err))
        samples.append(Sample(name, path, tensors, keyed=bool(npz)))
    return samples


def _shape_matches(shape, expected):
    # type: (Sequence[int], Sequence[Any]) -> bool
    if len(shape) != len(expected):
        return False
    return all(not isinstance(e, int) or e <= 0 or e == s for s, e in zip(shape, expected))


def _fmt_shape(shape):
    # type: (Sequence[Any]) -> str
    return "(" + ",".join(str(d) if isinstance(d, int) and d > 0 else "?" for d in shape) + ")"


def validate_inputs(samples, specs):
    # type: (List[Sample], Optional[List[Dict[str, Any]]]) -> None
    """Check every sample against the model's inputs and order its tensors as the model wants.

    specs: [{"name", "shape" (ints; <=0 or non-int = any), "dtype"}] or None when the runtime
    cannot tell (rknnlite without an io.json): then only consistency across samples is checked.
    """
    for sample in samples:
        if specs is None:
            continue
        if not sample.keyed:
            if len(specs) != 1:
                raise RunnerError("%s: the model has %d inputs (%s); give each sample as a .npz keyed by input name"
                                  % (sample.path, len(specs), ", ".join(s["name"] for s in specs)))
            by_name = {specs[0]["name"]: sample.tensors[0][1]}
        else:
            by_name = dict(sample.tensors)
            missing = [s["name"] for s in specs if s["name"] not in by_name]
            extra = [k for k in by_name if k not in set(s["name"] for s in specs)]
            if missing or extra:
                raise RunnerError("%s: keys %s do not match the model inputs %s"
                                  % (sample.path, sorted(by_name), [s["name"] for s in specs]))
        for spec in specs:
            arr = by_name[spec["name"]]
            if not _shape_matches(arr.shape, spec["shape"]) or (spec.get("dtype") and arr.dtype.name != spec["dtype"]):
                raise RunnerError("%s: input '%s' is %s %s but the model wants %s %s"
                                  % (sample.path, spec["name"], arr.dtype.name, _fmt_shape(arr.shape),
                                     spec.get("dtype") or "any", _fmt_shape(spec["shape"])))
        sample.feed = [by_name[s["name"]] for s in specs]
    first = samples[0]
    for sample in samples[1:]:
        a = [(k, x.shape, x.dtype) for k, x in first.tensors]
        b = [(k, x.shape, x.dtype) for k, x in sample.tensors]
        if a != b:
            raise RunnerError("%s: tensors %s differ from %s's %s; every sample must match the model"
                              % (sample.path, [(k, _fmt_shape(s), d.name) for k, s, d in b],
                                 first.name, [(k, _fmt_shape(s), d.name) for k, s, d in a]))


# --------------------------------------------------------------------------------------------
# Backends: load once, infer() is the timed call, own() makes outputs safe to keep.


class OnnxRuntimeBackend(object):
    """onnxruntime on CPU with a deterministic session (fixed threads, sequential execution)."""

    name = "onnxruntime"

    def __init__(self, model, threads=1, graph_opt="all"):
        # type: (str, int, str) -> None
        try:
            import onnxruntime as ort
        except ImportError:
            raise RunnerError("onnxruntime is not installed for %s; install it or use --backend rknnlite"
                              % sys.executable, EXIT_BOARD)
        levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                  "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                  "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                  "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = levels[graph_opt]
        try:
            self._session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own exception types for bad models
            raise RunnerError("%s: onnxruntime cannot load the model (%s)" % (model, str(err).splitlines()[0] if str(err) else type(err).__name__))
        self.options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1,
                        "execution_mode": "ORT_SEQUENTIAL", "graph_optimization_level": graph_opt,
                        "providers": self._session.get_providers()}
        self.detail = "onnxruntime %s on %s (CPUExecutionProvider, intra_op=%d, inter_op=1, ORT_SEQUENTIAL, graph_optimization=%s)" % (
            ort.__version__, platform.machine(), threads, graph_opt)
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

    name = "rknnlite"

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
            emulation = "%s; EMULATED NPU mode: the RKNN simulator's outputs, not onnxruntime" % emulation
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
        if core_mask != "auto":
            raise RunnerError("the legacy RKNN Toolkit Lite (v1) API has no core_mask; use --core-mask auto")
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


# --------------------------------------------------------------------------------------------
# The run.


def parse_args(argv):
    # type: (Optional[Sequence[str]]) -> argparse.Namespace
    parser = argparse.ArgumentParser(
        prog="rkdet-run", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a model N times over every input and record each output, content-addressed.")
    parser.add_argument("--model", required=True, help=".rknn (rknnlite) or .onnx (onnxruntime) model")
    parser.add_argument("--inputs", required=True, help="folder of *.npy (one tensor each) or *.npz (keyed by input name)")
    parser.add_argument("--repeats", required=True, type=int, help="runs over the whole input set")
    parser.add_argument("--warmup", type=int, default=0, help="unrecorded passes over the input set first (default 0)")
    parser.add_argument("--core-mask", default="auto",
                        help="NPU cores (rknnlite only; default auto): one of %s, or a comma list of them: each a "
                             "cell with its own result set in OUT/core-<mask>/" % ", ".join(CORE_MASKS))
    parser.add_argument("--npu-cores", type=int, default=None,
                        help="NPU cores the SoC has; core masks using others are skipped and said in cells.json")
    parser.add_argument("--contexts", type=int, default=1,
                        help="also run N runtime contexts in threads on the same inputs and check they agree "
                             "with the sequential run (contexts.json; default 1: no such check)")
    parser.add_argument("--expect-fingerprint", default=None,
                        help="refuse (exit 5) a model whose embedded rkdet build fingerprint differs")
    parser.add_argument("--expect-sha256", default=None,
                        help="refuse (exit 5) a model without an embedded fingerprint whose sha256 differs")
    parser.add_argument("--backend", default="rknnlite", choices=("rknnlite", "onnxruntime"))
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (default 1)")
    parser.add_argument("--graph-opt", default="all", choices=GRAPH_OPT_LEVELS, help="onnxruntime graph optimization level (default all)")
    parser.add_argument("--cpu-affinity", default=None, help="pin this process to these CPUs, e.g. 4,5")
    parser.add_argument("--snapshot-every", type=int, default=10, help="board snapshot every K runs (0: only before/after; default 10)")
    parser.add_argument("--out", required=True, help="result folder (created; must be new or empty)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0 or args.snapshot_every < 0 or args.threads < 1 or args.contexts < 1:
        parser.error("--repeats, --threads and --contexts must be >= 1, --warmup and --snapshot-every >= 0")
    args.core_masks = [m.strip() for m in args.core_mask.split(",")]
    bad = [m for m in args.core_masks if m not in CORE_MASKS]
    if bad or len(set(args.core_masks)) != len(args.core_masks):
        parser.error("--core-mask %s: give distinct masks from %s, comma-separated" % (args.core_mask, ", ".join(CORE_MASKS)))
    if args.backend == "onnxruntime" and args.core_masks != ["auto"]:
        parser.error("--core-mask applies only to --backend rknnlite")
    if args.npu_cores is not None and args.npu_cores < 1:
        parser.error("--npu-cores must be >= 1")
    for flag, value in (("--expect-fingerprint", args.expect_fingerprint), ("--expect-sha256", args.expect_sha256)):
        if value is not None and not _HEX64.match(value):
            parser.error("%s wants 64 lowercase hex digits" % flag)
    return args


def _parse_affinity(text):
    # type: (str) -> List[int]
    try:
        cpus = sorted(set(int(c) for c in text.split(",") if c.strip()))
    except ValueError:
        cpus = []
    if not cpus or min(cpus) < 0:
        raise RunnerError("--cpu-affinity %r: expected CPU numbers separated by commas, e.g. 4,5" % text)
    return cpus


def pin_cpus(text):
    # type: (Optional[str]) -> Optional[List[int]]
    """Pin the process to the given CPUs and return the affinity the kernel actually applied."""
    if text is None:
        return None
    cpus = _parse_affinity(text)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as err:
        raise RunnerError("--cpu-affinity %s: the kernel refused (%s); list CPUs this board has online" % (text, err.strerror))
    return sorted(os.sched_getaffinity(0))


def prepare_out_dir(out):
    # type: (str) -> None
    """Create the result folder (and outputs/); refuse one that already holds files."""
    if os.path.isdir(out) and os.listdir(out):
        raise RunnerError("%s: already holds files; choose a new --out so results never mix" % out)
    try:
        if not os.path.isdir(out):
            os.makedirs(out)
        os.mkdir(os.path.join(out, "outputs"))
        probe = os.path.join(out, ".write-probe-%d" % os.getpid())
        with open(probe, "w") as handle:
            handle.write("x")
        os.unlink(probe)
    except OSError as err:
        raise RunnerError("%s: cannot write the result folder (%s); pick a writable --out" % (out, err.strerror or err))


class ResultWriter(object):
    """Everything written into the result folder, in the order that keeps it valid after SIGKILL:
    an output file exists before the index line that names it."""

    def __init__(self, out):
        # type: (str) -> None
        self.out = out
        self.outputs_dir = os.path.join(out, "outputs")
        self.index = JsonlAppender(os.path.join(out, "index.jsonl"))
        self.snapshots = JsonlAppender(os.path.join(out, "snapshots.jsonl"))
        self.known = set()  # type: set

    def keep_output(self, digest, array):
        # type: (str, Any) -> None
        if digest not in self.known:
            save_array_atomic(os.path.join(self.outputs_dir, digest + ".npy"), array)
            self.known.add(digest)

    def close(self):
        # type: () -> None
        try:
            self.index.close()
        finally:
            self.snapshots.close()


LAST_OUTPUTS_BYTES = 64 << 20  # memory for the last outputs of each input (Recorder compares with them)


class Recorder(object):
    """Hashes, keeps and indexes each inference's outputs on a worker thread, in submission order,
    while the main thread already runs the next inference.

    Why: hashing a few MB of outputs costs about as much as 2-3 % of a YOLOv8n inference; the
    runtime call releases the GIL (and on a board mostly waits for the NPU), so on a second core
    that work is off the measured path. At most `depth` inferences are in flight: a SIGKILL loses
    only those (never a half record), and memory stays bounded. A worker error (ENOSPC) is raised
    in the main thread at the next submit() or at finish().

    Most runs repeat the previous output of the same input, so each output is first compared with
    that input's last one (same_bytes); only outputs that differ are hashed, and equal ones reuse the
    hash (and file) already recorded. The last outputs are kept for as many inputs as fit in
    `last_bytes`; inputs beyond it are hashed every time, as before.
    """

    def __init__(self, writer, backend_name, depth=2, last_bytes=LAST_OUTPUTS_BYTES):
        # type: (ResultWriter, str, int, int) -> None
        self.summary = Summary(backend_name)
        self._writer = writer
        self._backend = backend_name
        self._last = {}  # type: Dict[str, List[Tuple[Any, str]]]  # input -> [(array, hash)] of its last run
        self._last_room = last_bytes
        self._queue = queue.Queue(maxsize=depth)  # type: Any
        self._error = None  # type: Optional[BaseException]
        self._thread = threading.Thread(target=self._work, name="rkdet-record")
        self._thread.daemon = True
        self._thread.start()

    def _work(self):
        # type: () -> None
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is None:  # after a failure keep draining so submit() never blocks
                try:
                    self._record(*item)
                except BaseException as err:
                    self._error = err

    def _record(self, run, sample, latency, t_unix, names, outputs):
        # type: (int, str, float, float, List[str], List[Any]) -> None
        described = []
        last = self._last.get(sample) or []
        hashed = []  # type: List[Tuple[Any, str]]
        for i, (name, array) in enumerate(zip(names, outputs)):
            if i < len(last) and same_bytes(array, last[i][0]):
                digest = last[i][1]  # recorded (and its file kept) for an earlier run of this input
            else:
                digest = output_hash(array)
                self._writer.keep_output(digest, array)  # the file exists before the line naming it
            hashed.append((array, digest))
            described.append({"name": name, "hash": digest, "shape": [int(d) for d in array.shape],
                              "dtype": array.dtype.name})
        self._remember(sample, hashed)
        line = {"run": run, "input": sample, "latency_ms": round(latency * 1000.0, 4),
                "t_unix": t_unix, "backend": self._backend, "outputs": described}
        self._writer.index.append(line)
        self.summary.add(line)

    def _remember(self, sample, hashed):
        # type: (str, List[Tuple[Any, str]]) -> None
        """Keep these outputs as the input's last ones (in place of its previous ones) if they fit."""
        self._last_room += sum(a.nbytes for a, _ in self._last.pop(sample, ()))
        size = sum(a.nbytes for a, _ in hashed)
        if size <= self._last_room:
            self._last[sample] = hashed
            self._last_room -= size

    def _raise_pending(self):
        # type: () -> None
        if self._error is not None:
            raise self._error

    def submit(self, run, sample, latency, t_unix, names, outputs):
        # type: (int, str, float, float, List[str], List[Any]) -> None
        self._raise_pending()
        self._queue.put((run, sample, latency, t_unix, names, outputs))

    def finish(self):
        # type: () -> Dict[str, Any]
        """Wait until every submitted inference is recorded; raise the worker's error if any."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise_pending()
        return self.summary.result()


def _make_backend(args, core_mask="auto"):
    # type: (argparse.Namespace, str) -> Any
    if args.backend == "onnxruntime":
        return OnnxRuntimeBackend(args.model, threads=args.threads, graph_opt=args.graph_opt)
    return RknnLiteBackend(args.model, core_mask=core_mask, io_spec=load_io_spec(args.model))


def mask_cores(mask):
    # type: (str) -> List[int]
    """The NPU cores a core mask names ("0_1_2" -> [0, 1, 2]; "auto" -> [])."""
    return [] if mask == "auto" else [int(c) for c in mask.split("_")]


def _stack(backend, facts):
    # type: (Any, Optional[Dict[str, Any]]) -> Dict[str, Any]
    """The software stack this run ran on, as the board's Python sees it (probe.sh adds the kernel,
    driver and library file versions): Python, numpy, the runtime package, the model's toolkit."""
    stack = {"python": platform.python_version(), "numpy": getattr(np, "__version__", None)}
    stack.update(getattr(backend, "stack", {}))
    if facts is not None:
        stack.update(model_toolkit=facts["toolkit_version"], model_format=facts["format_version"])
    return stack


_STOP = []  # type: List[int]


def _on_stop_signal(signum, frame):
    """Only note the signal: raising here could leave a lock held mid-`with` (and hang the close);
    the loop checks `_STOP` between inferences, so a run stops cleanly within one inference."""
    _STOP.append(signum)


def _check_stop():
    # type: () -> None
    if _STOP:
        raise Interrupted("stopped by signal %d" % _STOP[0])


def execute(args):
    # type: (argparse.Namespace) -> int
    """Validate everything, then run; returns the exit code (0 deterministic, 1 diverged)."""
    if np is None:
        raise RunnerError("numpy is not installed for %s; install python3-numpy on the board" % sys.executable, EXIT_BOARD)
    if not os.path.isfile(args.model):
        raise RunnerError("%s: model file not found" % args.model)
    check = check_model(args.model, args.expect_fingerprint, args.expect_sha256)
    samples = load_inputs(args.inputs)
    affinity = pin_cpus(args.cpu_affinity)
    if len(args.core_masks) == 1:
        return _run_cell(args, args.core_masks[0], args.out, samples, affinity, check)
    return _run_cells(args, samples, affinity, check)


def _run_cell(args, mask, out, samples, affinity, check):
    # type: (argparse.Namespace, str, str, List[Sample], Optional[List[int]], Dict[str, Any]) -> int
    backend = _make_backend(args, mask)
    try:
        validate_inputs(samples, backend.input_specs)
        return _run(args, mask, out, samples, backend, affinity, check)
    finally:
        backend.close()


def _first_hashes(out):
    # type: (str) -> Dict[str, List[Tuple[str, str]]]
    """Each input's output hashes of its first recorded run in a result set."""
    first = {}  # type: Dict[str, List[Tuple[str, str]]]
    for record in read_index(out):
        first.setdefault(record["input"], [(o["name"], o["hash"]) for o in record["outputs"]])
    return first


def _run_cells(args, samples, affinity, check):
    # type: (argparse.Namespace, List[Sample], Optional[List[int]], Dict[str, Any]) -> int
    """Every core mask a cell (OUT/core-<mask>/, a result set each), one after the other in this one
    (pinned) session; cells.json records each cell's status, the skipped masks and whether the cells
    agree bit for bit (each input's outputs the same in every cell: rknn-toolkit2 #228)."""
    out = args.out
    if os.path.isdir(out) and os.listdir(out):
        raise RunnerError("%s: already holds files; choose a new --out so results never mix" % out)
    if not os.path.isdir(out):
        os.makedirs(out)
    doc = {"schema": CELLS_SCHEMA, "cells": [], "agree": None, "first_difference": None}
    cells_path = os.path.join(out, "cells.json")
    codes = []
    reference = None  # (cell, first hashes)
    for mask in args.core_masks:
        cell = {"cell": "core-" + mask, "core_mask": mask, "status": None, "exit": None, "reason": None}
        doc["cells"].append(cell)
        missing = [c for c in mask_cores(mask) if args.npu_cores is not None and c >= args.npu_cores]
        if missing:
            cell.update(status="skipped", reason="the SoC has %d NPU core(s); core mask %s needs core %s"
                        % (args.npu_cores, mask, ",".join(map(str, missing))))
            write_json_atomic(cells_path, doc)
            continue
        _check_stop()
        cell_out = os.path.join(out, cell["cell"])
        cell["status"] = "running"
        write_json_atomic(cells_path, doc)
        try:
            code = _run_cell(args, mask, cell_out, samples, affinity, check)
        except RunnerError as err:
            if err.exit_code != EXIT_BOARD:
                raise
            cell.update(status="failed", exit=EXIT_BOARD, reason=str(err))
            codes.append(EXIT_BOARD)
            write_json_atomic(cells_path, doc)
            continue
        cell.update(status="complete", exit=code, reason=None if code == EXIT_OK else "runs of an input differ")
        codes.append(code)
        first = _first_hashes(cell_out)
        if reference is None:
            reference = (cell["cell"], first)
        elif doc["first_difference"] is None:
            for name in sorted(first):
                theirs, ours = reference[1].get(name), first[name]
                if theirs is not None and theirs != ours:
                    output = next((n for (n, h), (_, rh) in zip(ours, theirs) if h != rh), None)
                    doc["first_difference"] = {"cells": [reference[0], cell["cell"]], "input": name, "output": output}
                    break
        write_json_atomic(cells_path, doc)
    ran = [c for c in doc["cells"] if c["status"] == "complete"]
    doc["agree"] = None if len(ran) < 2 else doc["first_difference"] is None
    write_json_atomic(cells_path, doc)
    if EXIT_BOARD in codes:
        return EXIT_BOARD
    if not ran:
        raise RunnerError("no core mask of %s can run on this SoC (%s NPU core(s))" % (args.core_mask, args.npu_cores))
    return EXIT_DIFFERENT if EXIT_DIFFERENT in codes or doc["agree"] is False else EXIT_OK


def _contexts_check(args, mask, samples, reference):
    # type: (argparse.Namespace, str, List[Sample], Dict[str, List[Tuple[str, str]]]) -> Dict[str, Any]
    """`--contexts N`: N runtime contexts (one backend each), one thread each, every input once, all at
    the same time; each output compared with the sequential run's first (rknn-toolkit2 #474)."""
    backends = []
    try:
        for _ in range(args.contexts):
            backends.append(_make_backend(args, mask))
        results = [None] * len(backends)  # type: List[Any]

        def work(index):
            # type: (int) -> None
            got = {}
            try:
                for sample in samples:
                    outputs = backends[index].own(backends[index].infer(sample.feed))
                    got[sample.name] = [output_hash(o) for o in outputs]
                results[index] = got
            except BaseException as err:  # reported below, in the main thread
                results[index] = err

        threads = [threading.Thread(target=work, args=(i,), name="rkdet-context-%d" % i) for i in range(len(backends))]
        for thread in threads:
            thread.daemon = True
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(1.0)
                _check_stop()
    finally:
        for backend in backends:
            backend.close()
    doc = {"schema": CONTEXTS_SCHEMA, "contexts": args.contexts, "core_mask": mask, "agree": True,
           "differences": []}  # type: Dict[str, Any]
    for index, got in enumerate(results):
        if isinstance(got, BaseException):
            if isinstance(got, RunnerError):
                raise RunnerError("context %d of %d: %s" % (index, args.contexts, got), got.exit_code)
            raise got
        for sample in samples:
            expected = reference.get(sample.name) or []
            for (name, want), have in zip(expected, got[sample.name]):
                if want != have:
                    doc["agree"] = False
                    doc["differences"].append({"context": index, "input": sample.name, "output": name,
                                               "sequential": want, "threaded": have})
                    break
    return doc


def _run(args, mask, out, samples, backend, affinity, check):
    # type: (argparse.Namespace, str, str, List[Sample], Any, Optional[List[int]], Dict[str, Any]) -> int
    prepare_out_dir(out)
    run_path = os.path.join(out, "run.json")
    facts = read_rknn_facts(args.model) if args.model.endswith(".rknn") else None
    record = {
        "schema": RUN_SCHEMA, "backend": backend.name, "backend_detail": backend.detail,
        "backend_options": backend.options, "emulated": backend.emulated,
        "emulates_npu": bool(getattr(backend, "emulates_npu", False)),
        "model": {"path": os.path.basename(args.model), "sha256": file_sha256(args.model)},  # no board path: published
        "inputs": [s.describe() for s in samples], "outputs": backend.output_names,
        "model_check": check, "stack": _stack(backend, facts),
        "embedded_fingerprint": facts["embedded_fingerprint"] if facts else None,
        "repeats": args.repeats, "warmup": args.warmup, "core_mask": mask, "contexts": args.contexts,
        "affinity": affinity, "snapshot_every": args.snapshot_every,
        "python": platform.python_version(), "platform": platform.platform(),
        "started_unix": time.time(), "finished_unix": None, "status": "running", "error": None,
    }
    writer = None
    try:
        write_json_atomic(run_path, record)
        writer = ResultWriter(out)
        writer.snapshots.append(board_snapshot("before"))
        for _ in range(args.warmup):
            for sample in samples:
                _check_stop()
                backend.infer(sample.feed)
        summary = _measure(args, out, samples, backend, writer, record)
        writer.snapshots.append(board_snapshot("after", args.repeats - 1))
        writer.close()
        if args.contexts > 1:
            contexts = _contexts_check(args, mask, samples, _first_hashes(out))
            write_json_atomic(os.path.join(out, "contexts.json"), contexts)
            summary["contexts_agree"] = contexts["agree"]
            summary["deterministic"] = summary["deterministic"] and contexts["agree"]
        write_json_atomic(os.path.join(out, "summary.json"), summary)
        record.update(status="complete", finished_unix=time.time())
        write_json_atomic(run_path, record)
        return EXIT_OK if summary["deterministic"] else EXIT_DIFFERENT
    except BaseException as err:
        record.update(status="failed", finished_unix=time.time(), error=_describe_failure(err))
        try:
            write_json_atomic(run_path, record)
        except OSError:
            pass  # the disk may be full; index.jsonl still holds every completed run
        raise
    finally:
        if writer is not None:
            try:
                writer.close()
            except OSError:
                pass  # already failing: the first error is the one reported


def _measure(args, out, samples, backend, writer, record):
    # type: (argparse.Namespace, str, List[Sample], Any, ResultWriter, Dict[str, Any]) -> Dict[str, Any]
    """The measured loop: `for run in range(N): for input in inputs:` with only the backend call
    timed; hashing and writing happen on the Recorder's thread."""
    recorder = Recorder(writer, backend.name)
    names = backend.output_names
    try:
        for run in range(args.repeats):
            for sample in samples:
                _check_stop()
                start = time.perf_counter()
                raw = backend.infer(sample.feed)
                elapsed = time.perf_counter() - start
                t_unix = time.time()
                outputs = backend.own(raw)  # before the next call may overwrite reused buffers
                if names is None:  # rknnlite without io.json: name outputs by position, once
                    names = backend.output_names = ["output%d" % i for i in range(len(outputs))]
                    record["outputs"] = names
                    write_json_atomic(os.path.join(out, "run.json"), record)
                if len(outputs) != len(names):
                    raise RunnerError("%s run %d: the runtime returned %d outputs, expected %d (%s)"
                                      % (sample.name, run, len(outputs), len(names), ", ".join(names)), EXIT_BOARD)
                recorder.submit(run, sample.name, elapsed, t_unix, names, outputs)
            if args.snapshot_every and (run + 1) % args.snapshot_every == 0 and run + 1 < args.repeats:
                writer.snapshots.append(board_snapshot("periodic", run))
    except BaseException:
        try:
            recorder.finish()  # record the inferences that did complete, then report the first error
        except BaseException:
            pass
        raise
    return recorder.finish()


def _describe_failure(err):
    # type: (BaseException) -> str
    if isinstance(err, (KeyboardInterrupt, Interrupted)):
        return "interrupted: %s" % (err or "SIGINT")
    if isinstance(err, OSError):
        return "%s: %s" % (getattr(err, "filename", None) or "result folder", err.strerror or err)
    return str(err) or type(err).__name__


def main(argv=None):
    # type: (Optional[Sequence[str]]) -> int
    """Console entry point (`rkdet-run`): returns the exit code; errors are one line on stderr."""
    args = parse_args(argv)
    del _STOP[:]
    previous = {}
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, _on_stop_signal)
    except ValueError:  # not the main thread (embedded use): keep the default handlers
        pass
    try:
        return execute(args)
    except RunnerError as err:
        sys.stderr.write("rkdet-run: %s\n" % err)
        return err.exit_code
    except (KeyboardInterrupt, Interrupted) as err:
        sys.stderr.write("rkdet-run: interrupted (%s); completed runs are kept in %s\n" % (err or "SIGINT", args.out))
        return EXIT_INTERRUPTED
    except (OSError, IOError) as err:  # the result folder or an input went away under us
        code = EXIT_BOARD if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG) else EXIT_BAD_INPUT
        where = getattr(err, "filename", None) or args.out
        hint = {errno.EIO: "check the board's storage (I/O error)"}.get(
            err.errno, "free space on the board and run again" if code == EXIT_BOARD else "check the path and permissions")
        sys.stderr.write("rkdet-run: %s: %s; completed runs stay readable; %s\n" % (where, err.strerror or err, hint))
        return code
    except Exception as err:  # a bug: still one line, still the run record closed as failed
        sys.stderr.write("rkdet-run: internal error %s: %s; please report it\n" % (type(err).__name__, " ".join(str(err).split())))
        return EXIT_BAD_INPUT
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
