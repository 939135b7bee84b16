#!/usr/bin/env python3
"""Bench: what rkdet-run costs on top of the inference it records, measured against its peer.

Peer: a bare loop calling the same onnxruntime session (same options: rkdet.onboard.reference.session_options,
1 intra-op thread, ORT_SEQUENTIAL, graph optimization extended) on the same model and input, in the same process and run,
in interleaved blocks so drift and neighbours' load hit both sides alike.

1. Overhead per inference (target <= 2 %):
   (a) wall time per inference of `rkdet.onboard.run.main` vs the bare loop, steady loop (setup excluded);
   (b) marginal CPU per inference (long block minus short block, so setup cancels), which counts
       the recorder thread's hashing; (c) the main thread's time between backend calls (gap between
       consecutive index stamps minus latency) and its CPU outside the backend call (cProfile).
   (d) the recorder thread's CPU per inference (thread CPU clock around each record: hash or
       compare, store, index line + fsync), the part of (b) that is rkdet-run's own work.
   With --baseline-runner FILE (e.g. `git show REV:rkdet/runner.py > old.py`), that runner file runs
   as a third contender in the same interleaved blocks, so a change is measured against its
   predecessor under the same load.
2. Storage (target <= 1.05 x one set of outputs + the index): the real runner over `--storage-runs`
   (default 1000, never scaled down) identical runs of 8 inputs; bytes on disk of the result folder
   vs the outputs of one run plus index.jsonl. `--storage-model twin` (default) uses a cheap ONNX whose
   outputs have exactly the default model's output names, shapes and dtypes and depend on the input
   (so hashing and storage cost are the real ones); `--storage-model default` runs the default model
   itself (8000 inferences: ~30 min on one core).

Usage: .venv/bin/python bench/runner_overhead.py [--model models/yolov8n-doclaynet.onnx] [--blocks 3]
       [--block-runs 15] [--storage-runs 1000] [--storage-model twin|default] [--storage-only]
       [--baseline-runner OLD_RUNNER.py] [--model-note TEXT] [--append] [--out bench/results/runner.md]
"""

import argparse
import importlib.util
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from rkdet.onboard import run as runner  # noqa: E402  (rkdet-run)
from rkdet.onboard.resultset import read_index  # noqa: E402

ORT_TYPES = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8}
ONNX_TYPES = {"tensor(float)": TensorProto.FLOAT, "tensor(uint8)": TensorProto.UINT8}


def session(model: Path) -> ort.InferenceSession:
    """The same deterministic session rkdet-run opens for --backend onnxruntime (its defaults)."""
    from rkdet.onboard.reference import session_options
    return ort.InferenceSession(str(model), session_options(ort), providers=["CPUExecutionProvider"])


def make_inputs(model: Path, folder: Path, count: int) -> list:
    sess = session(model)
    spec = sess.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in spec.shape]
    rng = np.random.default_rng(2024)
    folder.mkdir(parents=True)
    arrays = []
    for i in range(count):
        arr = rng.random(shape, dtype=np.float32) if ORT_TYPES[spec.type] == np.float32 else rng.integers(0, 256, shape).astype(np.uint8)
        np.save(folder / ("page-%04d.npy" % i), arr)
        arrays.append(arr)
    return arrays


def bare_block(model: Path, array: np.ndarray, runs: int) -> tuple:
    """Peer: open the session, one warm-up call, then `runs` calls.

    Returns (wall ms per call of the steady loop, CPU ms of the whole block)."""
    cpu = time.process_time()
    sess = session(model)
    feed = {sess.get_inputs()[0].name: array}
    sess.run(None, feed)
    start = time.perf_counter()
    for _ in range(runs):
        sess.run(None, feed)
    wall = (time.perf_counter() - start) * 1000.0 / runs
    return wall, (time.process_time() - cpu) * 1000.0


def load_runner(path: Path):
    """A runner.py file as its own module (it is standalone: stdlib + numpy + the runtime)."""
    spec = importlib.util.spec_from_file_location("rkdet_bench_baseline_runner", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def count_recorder_cpu(module) -> list:
    """Wrap module.Recorder._record to add the recorder thread's CPU time per record to a list."""
    spent: list = []
    record = module.Recorder._record

    def timed(self, *args):
        start = time.thread_time()
        try:
            return record(self, *args)
        finally:
            spent.append(time.thread_time() - start)

    module.Recorder._record = timed
    return spent


def runner_block(model: Path, inputs: Path, runs: int, out: Path, module=runner) -> tuple:
    """rkdet-run with one warm-up pass, then `runs` runs (the same `runs + 1` calls as the peer).

    Returns (wall ms per inference of the steady loop: span between the first and last index
    records over the inferences in between, so one-off setup is excluded; CPU ms of the whole
    block)."""
    cpu = time.process_time()
    code = module.main(["--model", str(model), "--inputs", str(inputs), "--repeats", str(runs),
                        "--warmup", "1", "--backend", "onnxruntime", "--out", str(out)])
    cpu = (time.process_time() - cpu) * 1000.0
    if code != 0:
        raise SystemExit("runner exited %d in the overhead bench" % code)
    index = module.read_index(str(out))
    return (index[-1]["t_unix"] - index[0]["t_unix"]) * 1000.0 / (len(index) - 1), cpu


def bookkeeping(out: Path) -> tuple:
    """Per-inference time outside the backend call (gap between index records minus latency),
    and the backend latencies, in ms."""
    index = read_index(str(out))
    gaps = [(b["t_unix"] - a["t_unix"]) * 1000.0 - b["latency_ms"] for a, b in zip(index, index[1:])]
    return gaps, [r["latency_ms"] for r in index]


def profiled_loop(model: Path, inputs: Path, runs: int, out: Path) -> tuple:
    """CPU inside the runner's measured loop, split by cProfile (process-time clock): ms per
    inference in the backend call vs everything else the loop does (hash, keep, index, snapshots)."""
    import cProfile
    import pstats
    profile = cProfile.Profile(time.process_time)
    profile.enable()
    code = runner.main(["--model", str(model), "--inputs", str(inputs), "--repeats", str(runs),
                        "--warmup", "1", "--backend", "onnxruntime", "--out", str(out)])
    profile.disable()
    if code != 0:
        raise SystemExit("runner exited %d in the profiled run" % code)
    stats = pstats.Stats(profile).stats
    loop = next(v for k, v in stats.items() if k[2] == "_measure")[3]
    backend = sum(ct for k, v in stats.items() if k[2] == "infer" and k[0].endswith(("backends.py", "runner.py"))
                  for caller, (_, _, _, ct) in v[4].items() if caller[2] == "_measure")  # not the warm-up
    return backend * 1000.0 / runs, (loop - backend) * 1000.0 / runs


def twin_model(model: Path, path: Path) -> Path:
    """A cheap model with the default model's output names/shapes/dtypes, each derived from the input."""
    sess = session(model)
    spec = sess.get_inputs()[0]
    in_shape = [d if isinstance(d, int) else 1 for d in spec.shape]
    nodes, outputs, initializers = [], [], []
    nodes.append(helper.make_node("Flatten", ["x"], ["flat"], axis=0))
    total = int(np.prod(in_shape))
    for k, out in enumerate(sess.get_outputs()):
        shape = [d if isinstance(d, int) else 1 for d in out.shape]
        size = int(np.prod(shape))
        reps = -(-size // total)
        initializers.append(helper.make_tensor("reps%d" % k, TensorProto.INT64, [2], [1, reps]))
        initializers.append(helper.make_tensor("end%d" % k, TensorProto.INT64, [1], [size]))
        initializers.append(helper.make_tensor("zero%d" % k, TensorProto.INT64, [1], [0]))
        initializers.append(helper.make_tensor("axis%d" % k, TensorProto.INT64, [1], [1]))
        initializers.append(helper.make_tensor("shape%d" % k, TensorProto.INT64, [len(shape)], shape))
        nodes += [helper.make_node("Tile", ["flat", "reps%d" % k], ["t%d" % k]),
                  helper.make_node("Slice", ["t%d" % k, "zero%d" % k, "end%d" % k, "axis%d" % k], ["s%d" % k]),
                  helper.make_node("Sigmoid", ["s%d" % k], ["g%d" % k]),
                  helper.make_node("Reshape", ["g%d" % k, "shape%d" % k], [out.name])]
        outputs.append(helper.make_tensor_value_info(out.name, ONNX_TYPES[out.type], shape))
    graph = helper.make_graph(nodes, "storage-twin", [helper.make_tensor_value_info("x", ONNX_TYPES[spec.type], in_shape)],
                              outputs, initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def storage(model: Path, inputs: Path, runs: int, out: Path) -> dict:
    start = time.perf_counter()
    code = runner.main(["--model", str(model), "--inputs", str(inputs), "--repeats", str(runs),
                        "--backend", "onnxruntime", "--out", str(out)])
    wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit("runner exited %d in the storage bench" % code)
    index = read_index(str(out))
    first = {o["hash"] for r in index if r["run"] == 0 for o in r["outputs"]}
    one_set = sum((out / "outputs" / (h + ".npy")).stat().st_size for h in first)
    index_bytes = (out / "index.jsonl").stat().st_size
    total = folder_bytes(out)
    return {"records": len(index), "one_set": one_set, "index": index_bytes, "total": total,
            "files": len(list((out / "outputs").iterdir())), "wall": wall,
            "ratio": total / float(one_set + index_bytes)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO / "models" / "yolov8n-doclaynet.onnx"))
    parser.add_argument("--blocks", type=int, default=3, help="interleaved bare/runner block pairs")
    parser.add_argument("--block-runs", type=int, default=15, help="inferences per block")
    parser.add_argument("--storage-runs", type=int, default=1000)
    parser.add_argument("--storage-model", choices=("twin", "default"), default="twin")
    parser.add_argument("--storage-only", action="store_true", help="skip the overhead blocks")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "runner.md"))
    parser.add_argument("--append", action="store_true", help="append this run's tables to --out")
    parser.add_argument("--model-note", default="", help="one line saying where --model came from")
    parser.add_argument("--baseline-runner", default=None, help="another runner.py to measure in the same blocks")
    args = parser.parse_args()
    load_before = os.getloadavg()
    model = Path(args.model)
    work = Path(tempfile.mkdtemp(prefix="rkdet-bench-runner-"))
    try:
        one = work / "one"
        array = make_inputs(model, one, 1)[0]
        bare_block(model, array, 2)  # warm caches and the allocator for both sides
        bare, ran, gaps, latencies, marginal, rec_cpu = [], [], [], [], [], []
        recorder_cpu = count_recorder_cpu(runner)
        baseline = load_runner(Path(args.baseline_runner)) if args.baseline_runner else None
        base_cpu = count_recorder_cpu(baseline) if baseline else []
        base_ran, base_marginal, base_rec = [], [], []
        short = 2
        for block in range(0 if args.storage_only else args.blocks):
            # a short and a long block per side: the CPU difference is the cost of the extra
            # inferences alone (setup such as session creation and hashing the model cancels)
            b_short = bare_block(model, array, short)
            r_short = runner_block(model, one, short, work / ("short%d" % block))
            bare.append(bare_block(model, array, args.block_runs))
            out = work / ("run%d" % block)
            del recorder_cpu[:]
            ran.append(runner_block(model, one, args.block_runs, out))
            extra = float(args.block_runs - short)
            marginal.append(((bare[-1][1] - b_short[1]) / extra, (ran[-1][1] - r_short[1]) / extra))
            if baseline is not None:
                o_short = runner_block(model, one, short, work / ("bshort%d" % block), baseline)
                del base_cpu[:]
                base_ran.append(runner_block(model, one, args.block_runs, work / ("brun%d" % block), baseline))
                base_marginal.append((base_ran[-1][1] - o_short[1]) / extra)
                base_rec.append(statistics.median(base_cpu[1:]) * 1000.0)  # record 0 hashes in both
                shutil.rmtree(work / ("bshort%d" % block))
                shutil.rmtree(work / ("brun%d" % block))
                print("block %d baseline: wall ms/inference %.2f; marginal CPU %.2f; recorder CPU %.3f ms"
                      % (block, base_ran[-1][0], base_marginal[-1], base_rec[-1]), flush=True)
            rec_cpu.append(statistics.median(recorder_cpu[1:]) * 1000.0)
            block_gaps, block_latencies = bookkeeping(out)
            gaps += block_gaps
            latencies += block_latencies
            shutil.rmtree(out)
            shutil.rmtree(work / ("short%d" % block))
            print("block %d: wall ms/inference bare %.2f runner %.2f; marginal CPU ms/inference bare %.2f runner %.2f;"
                  " recorder CPU %.3f ms" % (block, bare[-1][0], ran[-1][0], marginal[-1][0], marginal[-1][1],
                                             rec_cpu[-1]), flush=True)
        nan = float("nan")
        per_bare = statistics.median(b[0] for b in bare) if bare else nan
        per_runner = statistics.median(r[0] for r in ran) if ran else nan
        pairs = [(r[0] / b[0] - 1.0) * 100.0 for r, b in zip(ran, bare)]
        paired = statistics.median(pairs) if pairs else nan
        cpu_bare = statistics.median(m[0] for m in marginal) if marginal else nan
        cpu_runner = statistics.median(m[1] for m in marginal) if marginal else nan
        cpu_pairs = [(m[1] / m[0] - 1.0) * 100.0 for m in marginal]
        cpu_paired = statistics.median(cpu_pairs) if cpu_pairs else nan
        rec_med = statistics.median(rec_cpu) if rec_cpu else nan
        spread = "; block pairs %+.1f .. %+.1f %%" % (min(pairs), max(pairs)) if pairs else ""
        cpu_spread = "; block pairs %+.1f .. %+.1f %%" % (min(cpu_pairs), max(cpu_pairs)) if cpu_pairs else ""
        book_med = statistics.median(gaps) if gaps else float("nan")
        book_p95 = sorted(gaps)[int(0.95 * (len(gaps) - 1))] if gaps else float("nan")
        latency = statistics.median(latencies) if latencies else float("nan")
        out_shapes = [(o.name, o.shape) for o in session(model).get_outputs()]
        prof_backend, prof_rest = (nan, nan) if args.storage_only else profiled_loop(model, one, args.block_runs * 2, work / "profiled")

        eight = work / "eight"
        make_inputs(model, eight, 8)
        storage_model = model if args.storage_model == "default" else twin_model(model, work / "twin.onnx")
        st = storage(storage_model, eight, args.storage_runs, work / "storage")
        print("storage: %r" % st, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    overhead_wall = paired
    baseline_rows = []
    if base_ran:
        b_pairs = [(o[0] / b[0] - 1.0) * 100.0 for o, b in zip(base_ran, bare)]
        b_cpu = [(o / m[0] - 1.0) * 100.0 for o, m in zip(base_marginal, marginal)]
        baseline_rows = [
            "Same blocks, with the baseline runner `%s` as a third contender (same model, input, options):"
            % Path(args.baseline_runner).name,
            "",
            "| measurement | baseline runner | this runner | bare loop |",
            "|---|---|---|---|",
            "| wall time per inference vs bare, median (block pairs min .. max) | %+.2f %% (%+.1f .. %+.1f) | %+.2f %% (%+.1f .. %+.1f) | %.2f ms |"
            % (statistics.median(b_pairs), min(b_pairs), max(b_pairs), paired, min(pairs), max(pairs), per_bare),
            "| CPU per extra inference vs bare, median (min .. max) | %+.2f %% (%+.1f .. %+.1f) | %+.2f %% (%+.1f .. %+.1f) | %.2f ms |"
            % (statistics.median(b_cpu), min(b_cpu), max(b_cpu), cpu_paired, min(cpu_pairs), max(cpu_pairs), cpu_bare),
            "| recorder-thread CPU per inference, median (min .. max of blocks) | %.3f ms (%.3f .. %.3f) | %.3f ms (%.3f .. %.3f) | - |"
            % (statistics.median(base_rec), min(base_rec), max(base_rec), rec_med, min(rec_cpu), max(rec_cpu)),
            "",
        ]
    overhead_book = book_med / latency * 100.0
    lines = [
        "# rkdet-run overhead and storage",
        "",
        "Written by `bench/runner_overhead.py` (%s UTC). Machine: %s, %d CPUs, Python %s, onnxruntime %s, numpy %s;"
        % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), platform.machine(), os.cpu_count(),
           platform.python_version(), ort.__version__, np.__version__),
        "other work may share the CPUs (load average %.1f at start, %.1f at end), so peers run in interleaved"
        % (load_before[0], os.getloadavg()[0]),
        "blocks in the same process.",
        "",
        "Model: `%s` (outputs %s). %s"
        % (model.relative_to(REPO) if model.is_relative_to(REPO) else model.name, ", ".join("%s %s" % o for o in out_shapes),
           args.model_note),
        "",
        "| measurement | peer: bare onnxruntime loop | rkdet-run | overhead | target | met |",
        "|---|---|---|---|---|---|",
        "| wall time per inference, steady loop (median of %d interleaved block pairs x %d runs) | %.2f ms | %.2f ms | %+.2f %%%s | <= 2 %% | %s |"
        % (args.blocks, args.block_runs, per_bare, per_runner, overhead_wall, spread, "yes" if overhead_wall <= 2.0 else "NO"),
        "| CPU time per extra inference ((long block - %d-run block) / runs; one-off setup cancels) | %.2f ms | %.2f ms | %+.2f %%%s | <= 2 %% | %s |"
        % (short, cpu_bare, cpu_runner, cpu_paired, cpu_spread, "yes" if cpu_paired <= 2.0 else "NO"),
        "| recorder-thread CPU per inference (thread CPU clock around each record, median of block medians) | - | %.3f ms | %.2f %% of %.1f ms latency | <= 2 %% | %s |"
        % (rec_med, rec_med / latency * 100.0, latency, "yes" if rec_med / latency <= 0.02 else "NO"),
        "| main-thread CPU in the measured loop outside the backend call (cProfile, process-time clock, %d runs) | - | %.2f ms (backend call %.2f ms) | %.2f %% | <= 2 %% | %s |"
        % (args.block_runs * 2, prof_rest, prof_backend, prof_rest / prof_backend * 100.0, "yes" if prof_rest / prof_backend <= 0.02 else "NO"),
        "| main-thread time between backend calls (gap between index stamps minus latency), median / p95 | - | %.2f / %.2f ms | %.2f %% of %.1f ms latency | <= 2 %% | %s |"
        % (book_med, book_p95, overhead_book, latency, "yes" if overhead_book <= 2.0 else "NO"),
        "",
        *baseline_rows,
        "| storage: %d identical runs x 8 inputs (%d records, %s model) | bytes |" % (args.storage_runs, st["records"], args.storage_model),
        "|---|---|",
        "| one set of outputs (8 inputs, run 0) | %d |" % st["one_set"],
        "| index.jsonl | %d (%.0f bytes/record) |" % (st["index"], st["index"] / float(st["records"])),
        "| whole result folder (run.json, index, snapshots, %d output files, summary) | %d |" % (st["files"], st["total"]),
        "| ratio to (one set + index), target <= 1.05 | **%.4f** (%s) |" % (st["ratio"], "met" if st["ratio"] <= 1.05 else "NOT met"),
        "| runner wall time for the storage run | %.1f s |" % st["wall"],
        "",
        "How to read the overhead rows: the wall row compares steady loops in alternating blocks and swings",
        "with neighbours' load (see the load averages; on a shared 2-CPU machine one block pair can differ by",
        "+-50 %), so it is reported but is the least reliable; the CPU rows do not count time spent waiting",
        "for the CPU. rkdet-run hashes, stores and indexes on a worker thread while the next inference runs",
        "(the runtime call releases the GIL), so the wall and main-thread rows show what delays inference,",
        "and the marginal-CPU row shows the total work including that thread (a byte compare of each output",
        "with that input's previous one, sha256 only of outputs that differ). The recorder-thread row reads",
        "that thread's own CPU clock, so neighbours' load inflates it far less than the paired rows.",
        "",
        "`twin` = an ONNX with the default model's exact output names, shapes and dtypes, each computed from",
        "the input (Tile/Slice/Sigmoid), so hashing and storage are the real cost while the 8000 inferences",
        "take seconds instead of ~30 min; `--storage-model default` runs the default model itself.",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out + ".tmp")
    old = Path(args.out).read_text() + "\n---\n\n" if args.append and Path(args.out).exists() else ""
    tmp.write_text(old + "\n".join(lines) + "\n")
    os.replace(tmp, args.out)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
