#!/usr/bin/env python3
"""Bench: what rkdet-run-c costs on top of the inference it records, against its peer, and its peak memory.

Peer: a bare C loop (bench/c/capi_bare_loop.c) over the SAME runtime library (rkdet's test double of
librknnrt, rkdet/emulator/capi_double) with the same model, inputs and served outputs: rknn_inputs_set,
rknn_run, rknn_outputs_get, rknn_outputs_release and nothing else. Both are built in this run with the same
compiler and flags against the same header (rkdet's test ABI header), and run in interleaved blocks so the
machine's load hits both alike.

Overhead per inference (target <= 1 % of wall): each contender runs a short and a long block (REPEATS_SHORT
and REPEATS_LONG passes over the inputs); the marginal wall per inference is (long - short) / (extra
inferences), so process start, model load and input reading cancel. Overhead = runner's marginal wall / the
bare loop's - 1. Peak memory: each process's max RSS (wait4), the long block.

The double computes nothing (it reads the served outputs from a file), so the bare loop's inference is
what the runtime's calls cost with no NPU work: the ratio is an upper bound of the runner's share; a real
NPU inference adds its compute time to both sides. The second table row says the runner's own time per
inference in ms, to compare with a board's inference latency.
Its "time between its runtime calls" row is the runner's main thread outside rknn_inputs_set..
rknn_outputs_get per inference, from its own index.jsonl (t_unix gaps minus latency_ms; long blocks, past
the first pass, which writes every output file): the per-inference cost the block walls cannot resolve on
a busy machine (its result work runs on a recorder thread, docs/RUNNER_C.md).

`--npu-ms T` makes the double's every rknn_run take at least T ms (it sleeps the rest, as a real runtime's
caller waits in the driver while the NPU computes): the row for a realistic NPU time (the source of the
time used is stated in bench/results/runner_c.md). `--index-fsync-s S` is passed to rkdet-run-c (default:
its own, INDEX_FSYNC_S; docs/FORMATS.md "Durability of index.jsonl").

`--arch host` (default) builds both natively (gcc) for a measurement without an emulator in the way;
`--arch aarch64` cross-compiles and runs both under qemu-aarch64 (explicitly), as the emulated board does.

Usage: .venv/bin/python bench/capi_overhead.py [--arch host|aarch64] [--blocks 5] [--inputs 8]
       [--short 2] [--long 12] [--npu-ms T] [--index-fsync-s S] [--result-root DIR]
       [--out bench/results/runner_c.md] [--append]
`--append` adds the new section above the file's older sections (newest first; the older ones are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from rkdet.backends.capi_build import RUNNER_FLAGS, runner_source  # noqa: E402
from rkdet.emulator.capi_double import board_exec  # noqa: E402
from rkdet.onboard.resultset import INDEX_FSYNC_S  # noqa: E402
from rkdet.emulator.capi_runtime import DOUBLE_ENV, TEST_HEADER, Tensor, fnv1a64, qemu_command, serve  # noqa: E402

BARE = REPO / "bench" / "c" / "capi_bare_loop.c"
FLAGS = list(RUNNER_FLAGS)  # the runner build's own flags, for both contenders
# the default model's outputs at 640x640 (rkdet convert configs/yolov8.yaml): box/cls heads at 3 strides
OUTPUTS = [Tensor(f"{kind}{i}", "float32", (1, ch, s, s)) for i, s in enumerate((80, 40, 20))
           for kind, ch in (("box", 64), ("cls", 11))]
INPUT = Tensor("images", "uint8", (1, 640, 640, 3), fmt="nhwc")


def build(arch: str, work: Path, source: Path | None = None) -> tuple[Path, Path, Path]:
    """(runner, bare loop, library folder), built with the same compiler and flags against the test header."""
    inc, lib = work / "include", work / "lib"
    inc.mkdir()
    lib.mkdir()
    shutil.copyfile(TEST_HEADER, inc / "rknn_api.h")
    double = board_exec.compile_command("aarch64", str(lib / "librknnrt.so"))
    cc = "gcc" if arch == "host" else double[0]
    subprocess.run([cc, *double[1:]], check=True, timeout=300)
    out = []
    if source is not None:  # another version of the runner (e.g. a previous commit's), beside rkdet's headers
        shutil.copyfile(source, work / "rkdet_run_c.c")
        shutil.copyfile(runner_source().parent / "rkdet_sha256.h", work / "rkdet_sha256.h")
    for name, src in (("rkdet-run-c", work / "rkdet_run_c.c" if source else runner_source()), ("capi_bare_loop", BARE)):
        subprocess.run([cc, *FLAGS, "-I", str(inc), "-o", str(work / name), str(src), "-L", str(lib), "-lrknnrt"],
                       check=True, timeout=300)
        out.append(work / name)
    return out[0], out[1], lib


def timed(cmd: list[str], env: dict[str, str], rss_file: Path) -> tuple[float, int, float]:
    """Wall seconds, max RSS (KiB) and CPU seconds (user + system) of one process, as GNU time reports its
    child (a process forked from this Python would count the interpreter's pages in its high-water mark);
    time adds the same fork and wait to both contenders. CPU time is what the process itself computed: on a
    machine shared with other work it varies far less than wall time (it leaves out an fsync's wait)."""
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # microseconds (time's own %U/%S: 10 ms steps)
    done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *cmd], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({done.returncode}): {done.stderr.decode()[-400:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the process and time's own (the same each run)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, int(rss_file.read_text().split()[-1]), cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=("host", "aarch64"), default="host")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--inputs", type=int, default=8)
    ap.add_argument("--short", type=int, default=2)
    ap.add_argument("--long", type=int, default=12)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "runner_c.md")
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--npu-ms", type=float, default=0.0, help="each rknn_run of the double takes at least this long")
    ap.add_argument("--index-fsync-s", type=float, default=None, help="rkdet-run-c's --index-fsync-s (default: its own)")
    ap.add_argument("--runner-source", type=Path, default=None,
                    help="build rkdet-run-c from this file instead (a before/after comparison; its own durability policy)")
    ap.add_argument("--result-root", type=Path, default=None,
                    help="where rkdet-run-c writes its result folder (default: the bench's temp dir; /dev/shm: tmpfs)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rkdet-bench-capi-"))
    try:
        runner, bare, lib = build(a.arch, work, a.runner_source)
        rng = np.random.default_rng(0)
        (work / "inputs").mkdir()
        raws, computed = [], {}
        for i in range(a.inputs):
            x = rng.integers(0, 256, INPUT.shape, dtype=np.uint8)
            np.save(work / "inputs" / f"in{i}.npy", x)
            (work / f"in{i}.raw").write_bytes(x.tobytes())
            raws.append(str(work / f"in{i}.raw"))
            computed[x.tobytes()] = [rng.standard_normal(t.shape).astype(np.float32) for t in OUTPUTS]
        served = serve(work / "served", INPUT, OUTPUTS, computed, npu_us=round(a.npu_ms * 1000))
        assert len({fnv1a64(k) for k in computed}) == a.inputs
        model = work / "model.rknn"
        model.write_bytes(os.urandom(1 << 20))  # the double reads no model; the runner hashes it once (setup)
        env = {**os.environ, DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(lib)}

        def command(which: str, repeats: int, out: Path) -> list[str]:
            if which == "bare":
                prog, args = bare, [str(model), *raws, str(repeats)]
            else:
                shutil.rmtree(out, ignore_errors=True)
                prog, args = runner, ["--model", str(model), "--inputs", str(work / "inputs"), "--repeats",
                                      str(repeats), "--out", str(out), "--core-mask", "auto"]
                if a.index_fsync_s is not None:
                    args += ["--index-fsync-s", str(a.index_fsync_s)]
            if a.arch == "host":
                return [str(prog), *args]
            return qemu_command("aarch64", prog, args, {DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(lib)})

        walls: dict[str, dict[int, list[float]]] = {w: {a.short: [], a.long: []} for w in ("bare", "runner")}
        rss: dict[str, int] = {"bare": 0, "runner": 0}
        cpus: dict[str, dict[int, list[float]]] = {w: {a.short: [], a.long: []} for w in ("bare", "runner")}
        result = Path(tempfile.mkdtemp(prefix="rkdet-bench-capi-out-", dir=a.result_root)) / "result"
        between: list[float] = []
        for _ in range(a.blocks):
            order = [(w, r) for w in ("bare", "runner") for r in (a.short, a.long)]
            random.shuffle(order)
            for which, repeats in order:
                wall, peak, cpu = timed(command(which, repeats, result), env, work / "rss.txt")
                walls[which][repeats].append(wall)
                cpus[which][repeats].append(cpu)
                if which == "runner" and repeats == a.long:
                    between += _between_inferences(result, a.inputs)
                if repeats == a.long:
                    rss[which] = max(rss[which], peak)
        extra = (a.long - a.short) * a.inputs
        per = {w: [(lo - sh) / extra for sh, lo in zip(walls[w][a.short], walls[w][a.long])] for w in walls}
        ratios = [r / b - 1 for r, b in zip(per["runner"], per["bare"])]
        med = {w: statistics.median(v) for w, v in per.items()}
        per_cpu = {w: [(lo - sh) / extra for sh, lo in zip(cpus[w][a.short], cpus[w][a.long])] for w in cpus}
        cpu_med = {w: statistics.median(v) for w, v in per_cpu.items()}
        load = os.getloadavg()[0]
        out_bytes = sum(t.shape[1] * t.shape[2] * t.shape[3] * 4 for t in OUTPUTS)
        fsync_s = INDEX_FSYNC_S if a.index_fsync_s is None else a.index_fsync_s
        durability = "each index line fsync'd" if fsync_s <= 0 else f"index.jsonl fsync'd at most every {fsync_s:g} s"
        if a.runner_source is not None:
            durability = f"rkdet-run-c built from {a.runner_source.name}, its own durability policy"
        npu = (f"; the double's rknn_run takes at least {a.npu_ms:g} ms (a stand-in NPU time)" if a.npu_ms > 0
               else "; the double's inference is only reading its served outputs (no NPU time)")
        lines = [
            f"## {time.strftime('%Y-%m-%d')}: {a.arch} ({platform.machine()}{', qemu-aarch64' if a.arch != 'host' else ''}), "
            f"load average {load:.1f} on {os.cpu_count()} CPUs",
            "",
            f"{a.inputs} inputs 1x640x640x3 uint8, 6 float32 outputs ({out_bytes / 1e6:.2f} MB per inference, the "
            f"default model's shapes), {a.blocks} interleaved blocks of {a.short} and {a.long} passes; the result "
            f"folder on {result.parent} ({'tmpfs' if _is_tmpfs(result.parent) else 'disk'}: {durability}){npu}.",
            "",
            "| | bare C loop | rkdet-run-c | overhead |",
            "|---|---|---|---|",
            f"| marginal wall per inference, median (ms) | {med['bare'] * 1e3:.3f} | {med['runner'] * 1e3:.3f} | "
            f"{statistics.median(ratios) * 100:+.0f} % (blocks {min(ratios) * 100:+.0f} .. {max(ratios) * 100:+.0f} %) |",
            f"| rkdet-run-c's own time per inference (ms) | | {(med['runner'] - med['bare']) * 1e3:.3f} | "
            f"{(med['runner'] - med['bare']) / med['bare'] * 100:+.1f} % of the bare wall |",
            f"| marginal CPU time (user + sys) per inference, median (ms) | {cpu_med['bare'] * 1e3:.3f} | "
            f"{cpu_med['runner'] * 1e3:.3f} | own CPU {(cpu_med['runner'] - cpu_med['bare']) * 1e3:.3f} ms = "
            f"{(cpu_med['runner'] - cpu_med['bare']) / med['bare'] * 100:+.1f} % of the bare wall |",
            f"| rkdet-run-c's time between its runtime calls per inference, median (p90) (ms) | | "
            f"{statistics.median(between):.3f} ({sorted(between)[len(between) * 9 // 10]:.3f}) | "
            f"its main thread outside rknn_inputs_set..rknn_outputs_get, from its own index.jsonl "
            f"(t_unix gaps - latency_ms), long blocks past the first pass |",
            f"| peak RSS, long block (MiB) | {rss['bare'] / 1024:.1f} | {rss['runner'] / 1024:.1f} | "
            f"{(rss['runner'] / max(rss['bare'], 1) - 1) * 100:+.0f} % |",
            "",
        ]
        text = "\n".join(lines)
        print(text)
        if a.append and a.out.exists():
            old = a.out.read_text()
            at = old.find("\n## ")  # newest first: above the older sections, below the title and summary
            a.out.write_text(old + "\n" + text if at < 0 else old[:at + 1] + text + "\n" + old[at + 1:])
        else:
            a.out.write_text("# rkdet-run-c: overhead and peak memory against a bare C loop\n\n"
                             "Written by `bench/capi_overhead.py` (its docstring says how).\n\n" + text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if "result" in locals():
            shutil.rmtree(result.parent, ignore_errors=True)


def _between_inferences(result: Path, per_pass: int) -> list[float]:
    """ms the runner's main thread spent between consecutive inferences outside the runtime's calls (each index
    line's t_unix is taken right after rknn_outputs_get, its latency_ms spans inputs_set..outputs_get); the
    first pass, which writes every output file, is left out. What a board's wall clock adds per inference."""
    lines = [json.loads(x) for x in (result / "index.jsonl").read_text().splitlines()][per_pass:]
    return [(b["t_unix"] - a["t_unix"]) * 1e3 - b["latency_ms"] for a, b in zip(lines, lines[1:])]


def _is_tmpfs(path: Path) -> bool:
    try:
        return subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True).stdout.strip() == "tmpfs"
    except OSError:
        return False


if __name__ == "__main__":
    main()
