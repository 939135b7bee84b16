"""rkdet-run: run one model N times over a set of inputs and record every output, provably.

Part of the on-board program (rkdet/onboard/, pushed to the board as the one zipapp rkdet-onboard.pyz
and run as `python3 rkdet-onboard.pyz run ...`): it imports only the standard library, numpy and the
runtime of the chosen backend (rknnlite or onnxruntime, imported lazily), nothing of rkdet outside
rkdet.onboard, and it runs on Python 3.6+ (RV1126 boards ship the legacy armhf RKNN Toolkit Lite v1
on Python 3.6/3.7): no dataclasses, no postponed annotations, no walrus.

The result folder follows docs/FORMATS.md ("Result set"): run.json, index.jsonl (source of
truth, one whole line per inference, fsync'd as INDEX_FSYNC_S says), snapshots.jsonl, outputs/<hash>.npy (each distinct output
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
import errno
import os
import platform
import signal
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from .atomic import write_json_atomic
from .backend_table import DEFAULT_BACKEND, NPU_BACKENDS
from .backend_table import facts as backend_facts
from .backends import make_backend
from .cells import run_cells
from .contexts import contexts_check
from .exits import (EXIT_BAD_INPUT, EXIT_BOARD, EXIT_DIFFERENT, EXIT_INTERRUPTED, EXIT_OK, STOP, Interrupted,
                    RunnerError, check_stop, on_stop_signal)
from .hashing import file_sha256
from .identity import HEX64, check_model, read_rknn_facts
from .inputs import Sample, load_inputs, validate_inputs
from .numpy_or_none import np
from .recorder import Recorder
from .reference import GRAPH_OPT_LEVELS, REFERENCE_GRAPH_OPT
from .resultset import BACKENDS, CORE_MASKS, INDEX_FSYNC_S, RUN_SCHEMA, ResultWriter, first_hashes, prepare_out_dir
from .snapshot import board_snapshot

EPILOG = """exit codes:
  0    complete; every input gave one distinct output set over all runs
  1    complete; some input gave more than one distinct output set (see summary.json)
  2    bad input (model/inputs missing or unreadable, shape/dtype mismatch, bad flag,
       out dir not writable or not empty)
  3    board/runtime trouble (runtime not installed, load/init/inference failed, disk full)
  5    model refused: its embedded build fingerprint (or its sha256) is not the expected one
  130  interrupted (SIGINT/SIGTERM); completed runs stay readable

environment: RKDET_ROOT prefixes every sysfs/procfs path read for snapshots (empty on boards)."""


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
    parser.add_argument("--backend", default=DEFAULT_BACKEND, choices=BACKENDS)
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (default 1)")
    parser.add_argument("--graph-opt", default=REFERENCE_GRAPH_OPT, choices=GRAPH_OPT_LEVELS,
                        help="onnxruntime graph optimization level (default %s: the onnx-fp32 reference's)" % REFERENCE_GRAPH_OPT)
    parser.add_argument("--cpu-affinity", default=None, help="pin this process to these CPUs, e.g. 4,5")
    parser.add_argument("--snapshot-every", type=int, default=10, help="board snapshot every K runs (0: only before/after; default 10)")
    parser.add_argument("--index-fsync-s", type=float, default=INDEX_FSYNC_S,
                        help="fsync index.jsonl at most every S seconds, at the end and on SIGINT/SIGTERM; 0: every "
                             "line (default %s; a power cut can lose S seconds' worth of lines, a kill loses none)"
                             % INDEX_FSYNC_S)
    parser.add_argument("--out", required=True, help="result folder (created; must be new or empty)")
    args = parser.parse_args(argv)
    if (args.repeats < 1 or args.warmup < 0 or args.snapshot_every < 0 or args.threads < 1 or args.contexts < 1
            or not args.index_fsync_s >= 0 or args.index_fsync_s == float("inf")):
        parser.error("--repeats, --threads and --contexts must be >= 1, --warmup and --snapshot-every >= 0, "
                     "--index-fsync-s a finite number >= 0")
    args.core_masks = [m.strip() for m in args.core_mask.split(",")]
    bad = [m for m in args.core_masks if m not in CORE_MASKS]
    if bad or len(set(args.core_masks)) != len(args.core_masks):
        parser.error("--core-mask %s: give distinct masks from %s, comma-separated" % (args.core_mask, ", ".join(CORE_MASKS)))
    if not backend_facts(args.backend).on_npu and args.core_masks != ["auto"]:
        parser.error("--core-mask applies only to --backend %s" % NPU_BACKENDS)
    if args.npu_cores is not None and args.npu_cores < 1:
        parser.error("--npu-cores must be >= 1")
    for flag, value in (("--expect-fingerprint", args.expect_fingerprint), ("--expect-sha256", args.expect_sha256)):
        if value is not None and not HEX64.match(value):
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


def _make_backend(args, core_mask="auto"):
    # type: (argparse.Namespace, str) -> Any
    return make_backend(args.backend, args.model, core_mask, threads=args.threads, graph_opt=args.graph_opt)


def _stack(backend, facts):
    # type: (Any, Optional[Dict[str, Any]]) -> Dict[str, Any]
    """The software stack this run ran on, as the board's Python sees it (probe.sh adds the kernel,
    driver and library file versions): Python, numpy, the runtime package, the model's toolkit."""
    stack = {"python": platform.python_version(), "numpy": getattr(np, "__version__", None)}
    stack.update(getattr(backend, "stack", {}))
    if facts is not None:
        stack.update(model_toolkit=facts["toolkit_version"], model_format=facts["format_version"])
    return stack


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
    return run_cells(args, samples, affinity, check, _run_cell)


def _run_cell(args, mask, out, samples, affinity, check):
    # type: (argparse.Namespace, str, str, List[Sample], Optional[List[int]], Dict[str, Any]) -> int
    backend = _make_backend(args, mask)
    try:
        validate_inputs(samples, backend.input_specs)
        return _run(args, mask, out, samples, backend, affinity, check)
    finally:
        backend.close()


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
        "affinity": affinity, "snapshot_every": args.snapshot_every, "index_fsync_s": args.index_fsync_s,
        "python": platform.python_version(), "platform": platform.platform(),
        "started_unix": time.time(), "finished_unix": None, "status": "running", "error": None,
    }
    writer = None
    try:
        write_json_atomic(run_path, record)
        writer = ResultWriter(out, args.index_fsync_s)
        writer.snapshots.append(board_snapshot("before"))
        for _ in range(args.warmup):
            for sample in samples:
                check_stop()
                backend.infer(sample.feed)
        summary = _measure(args, out, samples, backend, writer, record)
        writer.snapshots.append(board_snapshot("after", args.repeats - 1))
        writer.close()
        if args.contexts > 1:
            contexts = contexts_check(args, mask, samples, first_hashes(out), _make_backend)
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
                check_stop()
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
    del STOP[:]
    previous = {}
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, on_stop_signal)
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
