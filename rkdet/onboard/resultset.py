"""THE result-set writer (docs/FORMATS.md "Result set"): run.json, index.jsonl, outputs/<hash>.npy, summary.

Why one module: the board's rkdet-run and the host's golden sets (rkdet/convert/golden.py) write
result sets in one format, through these functions, with the schema strings defined here once (the
host's typed reader, rkdet/records, imports them). Every file is written to a temporary name and
renamed, every JSON Lines record is one write of a whole line, so a run killed with SIGKILL leaves
every completed inference readable (`read_index` ignores a torn last line). numpy is imported only
where an array is written, so the host's records/ can import the schema names without it.
"""

import errno
import json
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .atomic import save_array_atomic, write_atomic, write_json_atomic
from .backend_table import BACKENDS  # run.json "backend": the board runtimes rkdet-run drives (the registry)
from .exits import RunnerError

RUN_SCHEMA = "rkdet.run/1"
SUMMARY_SCHEMA = "rkdet.summary/1"
CELLS_SCHEMA = "rkdet.cells/1"
CONTEXTS_SCHEMA = "rkdet.contexts/1"
CORE_MASKS = ("auto", "0", "1", "2", "0_1", "0_1_2")  # run.json "core_mask": rknnlite's NPU core masks

#: THE durability policy of index.jsonl, the same for rkdet-run and rkdet-run-c (its INDEX_FSYNC_S, checked
#: equal by tests/runner_c/test_runner_c.py), recorded in run.json as "index_fsync_s". Every index line is
#: written (one write() of the whole line) as its inference completes, so a SIGKILL of the runner loses
#: nothing written (the page cache survives the process); the fsync that makes lines survive a POWER CUT is
#: grouped: at most every INDEX_FSYNC_S seconds, at the end, and when SIGINT/SIGTERM stops the run. A power
#: cut can lose the lines of the last INDEX_FSYNC_S seconds (their output files may stay in outputs/, named
#: by no line; the result set stays readable). `--index-fsync-s 0` fsyncs every line (the old policy).
INDEX_FSYNC_S = 1.0


class JsonlAppender(object):
    """Append-only JSON Lines: one write() of one whole line; fsync every line (`fsync_every_s` 0) or at
    most every `fsync_every_s` seconds, and at close() (INDEX_FSYNC_S says why).

    If the write or the fsync fails (ENOSPC, EIO), the file is cut back to its last complete line,
    so the index never holds a half record that a later append would glue onto. (rkdet-run calls
    it for index lines from its Recorder thread, so a slow SD card's fsync never delays inference.)
    """

    def __init__(self, path, fsync_every_s=0.0):
        # type: (str, float) -> None
        self.path = path
        self.fsync_every_s = float(fsync_every_s)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._synced_at = time.monotonic()
        self._unsynced = False

    def append(self, record):
        # type: (Dict[str, Any]) -> None
        data = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        size = os.fstat(self._fd).st_size
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (short write)", self.path)
            self._unsynced = True
            if self.fsync_every_s <= 0 or time.monotonic() - self._synced_at >= self.fsync_every_s:
                self.sync()
        except BaseException:
            try:
                os.ftruncate(self._fd, size)
            except OSError:
                pass
            raise

    def sync(self):
        # type: () -> None
        """fsync what was appended since the last one (none when nothing was)."""
        if self._fd >= 0 and self._unsynced:
            os.fsync(self._fd)
            self._unsynced = False
            self._synced_at = time.monotonic()

    def close(self):
        # type: () -> None
        """fsync the lines not yet synced, then close (closed even when the fsync fails)."""
        if self._fd >= 0:
            try:
                self.sync()
            finally:
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


def output_record(name, digest, array):
    # type: (str, str, Any) -> Dict[str, Any]
    """One output of an index record: its name, output hash, shape and dtype."""
    return {"name": name, "hash": digest, "shape": [int(d) for d in array.shape], "dtype": array.dtype.name}


def index_record(run, sample, latency_ms, t_unix, backend, outputs):
    # type: (int, str, Optional[float], Optional[float], Optional[str], List[Dict[str, Any]]) -> Dict[str, Any]
    """One index.jsonl line: one inference of one input (`outputs`: output_record()s in model order)."""
    return {"run": run, "input": sample, "latency_ms": latency_ms, "t_unix": t_unix, "backend": backend,
            "outputs": outputs}


def write_complete(out, run, records, arrays):
    # type: (str, Dict[str, Any], Sequence[Dict[str, Any]], Dict[str, Any]) -> Dict[str, Any]
    """A finished result set written at once (the host's golden sets, rkdet/convert/golden.py): every
    array as outputs/<hash>.npy (`arrays` keyed by output_hash), index.jsonl from `records`, run.json
    (`run` with this module's schema) and summary.json from the index; returns the summary."""
    outputs = os.path.join(out, "outputs")
    if not os.path.isdir(outputs):
        os.makedirs(outputs)
    for digest in sorted(arrays):
        path = os.path.join(outputs, digest + ".npy")
        if not os.path.exists(path):
            save_array_atomic(path, arrays[digest])
    write_atomic(os.path.join(out, "index.jsonl"), "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    record = dict(run, schema=RUN_SCHEMA)
    write_json_atomic(os.path.join(out, "run.json"), record)
    summary = summarize(records, record.get("backend"))
    write_json_atomic(os.path.join(out, "summary.json"), summary)
    return summary


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

    def __init__(self, out, index_fsync_s=INDEX_FSYNC_S):
        # type: (str, float) -> None
        self.out = out
        self.outputs_dir = os.path.join(out, "outputs")
        self.index = JsonlAppender(os.path.join(out, "index.jsonl"), index_fsync_s)
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


def first_hashes(out):
    # type: (str) -> Dict[str, List[Tuple[str, str]]]
    """Each input's output hashes of its first recorded run in a result set."""
    first = {}  # type: Dict[str, List[Tuple[str, str]]]
    for record in read_index(out):
        first.setdefault(record["input"], [(o["name"], o["hash"]) for o in record["outputs"]])
    return first
