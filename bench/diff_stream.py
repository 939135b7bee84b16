#!/usr/bin/env python3
"""Bench: `rkdet diff` streaming over result sets of the default model's outputs, side by side
with a plain `sha256sum` over the same bytes, plus peak memory.

Cases (8 inputs, the default 640 build's 6 outputs, ~2.5 MB per input per run):
  dedup      1000 runs, every run identical: the result-set format stores each distinct output
             once, so the diff reads index.jsonl and the 8 distinct records (for decoding).
  worst      every run of every input differs (one element moved 1 ULP per output): each output
             file is distinct and must be loaded, hash-verified and measured. Runs: --worst-runs
             (default 100, i.e. 800 records, 2 GB; 1000 would be 20 GB of disk).
  hostile    crafted sets (issue 9 item 3) that declare far more than they hold: an index record with
             run 3000000000, an output whose .npy header says 1e12 x 1e12 floats, a 0.5 MB .npz member
             that inflates to 512 MiB, duplicated records. Each must end as exit 2 before allocating
             what it declares; measured the same way, with `sha256sum` over the same files beside it.
Timing is wall clock in a fresh child process (interpreter start included), warm page cache,
best of --repeat. Peak memory: the child's VmHWM (peak RSS; ru_maxrss would
inherit the parent's across fork/exec) minus its RSS right after imports, and the
tracemalloc peak (numpy reports its buffers to tracemalloc) during the diff alone.
Writes bench/results/diff.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rkdet.onboard.hashing import output_hash  # noqa: E402

NAMES = ["box0", "cls0", "box1", "cls1", "box2", "cls2"]
INPUTS = [f"page-{i:04d}" for i in range(1, 9)]

CHILD = r"""
import json, sys, time, tracemalloc
from rkdet.diff.api import compare
from rkdet.tolerance import Tolerance
from rkdet.errors import RkdetError
def status_kb(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key + ":"))
def rss_kb():
    return status_kb("VmRSS")
mode, path = sys.argv[1], sys.argv[2]
base = rss_kb()
if mode == "trace":
    tracemalloc.start()
t = time.perf_counter()
try:
    c = compare(path, None, Tolerance())
    code, records, verdict = c.exit_code, c.a.records, c.verdict[:100]
except RkdetError as err:  # hostile input: the one-line exit 2
    code, records, verdict = err.exit_code, 0, str(err)[-100:]
elapsed = time.perf_counter() - t
peak_trace = tracemalloc.get_traced_memory()[1] if mode == "trace" else None
print(json.dumps({"elapsed": elapsed, "exit": code, "base_rss_kb": base,
                  "max_rss_kb": status_kb("VmHWM"), "trace_peak": peak_trace,
                  "records": records, "verdict": verdict}))
"""


def outputs_for(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for stride in (8, 16, 32):
        n = 640 // stride
        arrays.append(rng.standard_normal((1, 64, n, n)).astype(np.float32))
        # Like a real page: class scores near zero except a few dozen confident anchors.
        logits = rng.normal(-7.0, 1.5, (1, 11, n, n))
        hot = rng.choice(n * n, size=max(4, n * n // 200), replace=False)
        logits.reshape(11, n * n)[rng.integers(0, 11, hot.size), hot] = rng.normal(2.0, 1.0, hot.size)
        arrays.append((1 / (1 + np.exp(-logits))).astype(np.float32))
    return arrays


def write_set(path: Path, runs: int, every_run_differs: bool) -> tuple[int, int]:
    """Write a result set in the runner's format; returns (bytes of outputs/, bytes of one run's outputs)."""
    if path.exists():
        shutil.rmtree(path)
    (path / "outputs").mkdir(parents=True)
    base = {name: outputs_for(i) for i, name in enumerate(INPUTS)}
    run_bytes = sum(a.nbytes for arrays in base.values() for a in arrays)
    known: set[str] = set()
    lines = []
    for run in range(runs):
        for name in INPUTS:
            arrays = base[name]
            if every_run_differs and run:
                arrays = [a.copy() for a in arrays]
                for k, a in enumerate(arrays):
                    flat = a.reshape(-1)
                    i = (run * 7919 + k * 104729 + INPUTS.index(name) * 31) % flat.size
                    flat[i] = np.nextafter(flat[i], np.float32(np.inf))
            outs = []
            for n, a in zip(NAMES, arrays):
                h = output_hash(a)
                if h not in known:
                    np.save(path / "outputs" / f"{h}.npy", a, allow_pickle=False)
                    known.add(h)
                outs.append({"name": n, "hash": h, "shape": list(a.shape), "dtype": a.dtype.name})
            lines.append(json.dumps({"run": run, "input": name, "latency_ms": 20.0, "t_unix": 0.0,
                                     "backend": "bench", "outputs": outs}, sort_keys=True) + "\n")
    (path / "index.jsonl").write_text("".join(lines))
    (path / "snapshots.jsonl").write_text("")
    run_json = {"schema": "rkdet.run/1", "backend": "bench", "emulated": False, "inputs": [{"name": n} for n in INPUTS],
                "outputs": NAMES, "repeats": runs, "core_mask": "auto", "affinity": None, "status": "complete"}
    (path / "run.json").write_text(json.dumps(run_json, sort_keys=True, indent=2) + "\n")
    total = sum(f.stat().st_size for f in (path / "outputs").iterdir())
    return total, run_bytes


def _npy_header(shape: tuple[int, ...]) -> bytes:
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': %r, }" % (shape,)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1")


def write_hostile(root: Path, base: Path) -> list[tuple[str, str, Path]]:
    """Crafted sets derived from the `dedup` set `base`: (case, what it declares, path)."""
    import zipfile

    cases = []
    lines = (base / "index.jsonl").read_text().splitlines(keepends=True)

    def variant(name: str, index: list[str]) -> Path:
        path = root / name
        if path.exists():
            shutil.rmtree(path)
        shutil.copytree(base, path)
        (path / "index.jsonl").write_text("".join(index))
        return path

    rec = json.loads(lines[-1])
    rec["run"] = 3_000_000_000
    cases.append(("run-3e9", "one record with run 3000000000 (22 GiB of run bookkeeping before)",
                  variant("hostile-run", lines + [json.dumps(rec) + "\n"])))
    cases.append(("duplicates", "every record twice (\"SAME ... 16000 inferences\" before)",
                  variant("hostile-dup", lines + lines)))
    path = variant("hostile-shape", lines)
    first = json.loads(lines[0])["outputs"][0]["hash"]
    (path / "outputs" / f"{first}.npy").write_bytes(_npy_header((10 ** 12, 10 ** 12)) + bytes(64))
    cases.append(("npy-1e12", "an output file whose header says 1e12 x 1e12 float32", path))
    bomb_dir = root / "hostile-npz"
    bomb_dir.mkdir(parents=True, exist_ok=True)
    bomb = bomb_dir / "bomb.npz"
    count = (512 << 20) // 4
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("out.npy", "w", force_zip64=True) as member:
            member.write(_npy_header((count,)))
            zeros = bytes(1 << 20)
            for _ in range(512):
                member.write(zeros)
    cases.append(("npz-bomb", f"a {bomb.stat().st_size / 1e3:.0f} KB .npz whose member inflates to 512 MiB", bomb))
    return cases


def time_sha256sum(path: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        target = path if path.is_file() else path / "outputs"
        subprocess.run(f"find {target} -type f -print0 | xargs -0 sha256sum > /dev/null",
                       shell=True, check=True)
        best = min(best, time.perf_counter() - t)
    return best


def run_diff(path: Path, mode: str) -> tuple[float, dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(path)], capture_output=True, text=True, env=env,
                         check=True, timeout=600)
    wall = time.perf_counter() - t
    return wall, json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--worst-runs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "diff")
    args = ap.parse_args()
    rows = []
    for case, runs, differs in (("dedup", args.runs, False), ("worst", args.worst_runs, True)):
        path = args.work / case
        disk, run_bytes = write_set(path, runs, differs)
        sha = time_sha256sum(path, args.repeat)
        walls, inner, info = [], [], {}
        for _ in range(args.repeat):
            wall, info = run_diff(path, "time")
            walls.append(wall)
            inner.append(info["elapsed"])
        _, traced = run_diff(path, "trace")
        rows.append({"case": case, "runs": runs, "records": info["records"], "disk_mb": disk / 1e6,
                     "logical_mb": info["records"] * run_bytes / len(INPUTS) / 1e6,
                     "run_mb": run_bytes / 1e6, "sha": sha, "wall": min(walls), "inner": min(inner),
                     "rss_delta_mb": (info["max_rss_kb"] - info["base_rss_kb"]) / 1024,
                     "trace_mb": traced["trace_peak"] / 1e6, "exit": info["exit"]})
        print(json.dumps(rows[-1]), flush=True)
    hostile = []
    for case, what, path in write_hostile(args.work, args.work / "dedup"):
        disk = path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in (path / "outputs").iterdir())
        sha = time_sha256sum(path, args.repeat)
        walls, inner, info = [], [], {}
        for _ in range(args.repeat):
            wall, info = run_diff(path, "time")
            walls.append(wall)
            inner.append(info["elapsed"])
        _, traced = run_diff(path, "trace")
        hostile.append({"case": case, "what": what, "disk_mb": disk / 1e6, "sha": sha, "wall": min(walls),
                        "inner": min(inner), "rss_delta_mb": (info["max_rss_kb"] - info["base_rss_kb"]) / 1024,
                        "trace_mb": traced["trace_peak"] / 1e6, "exit": info["exit"], "message": info["verdict"]})
        print(json.dumps(hostile[-1]), flush=True)
    write_table(rows, args, hostile)


def write_table(rows: list[dict], args: argparse.Namespace, hostile: list[dict]) -> None:
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), "?")
    lines = [
        "# rkdet diff: streaming bench (`bench/diff_stream.py`)",
        "",
        f"Machine: {os.cpu_count()} CPU(s), {cpu}; Python {sys.version.split()[0]}, numpy {np.__version__}. "
        f"8 inputs x 6 outputs of the default 640 build (box0..cls2, {rows[0]['run_mb'] / 8:.2f} MB per input per run, "
        f"{rows[0]['run_mb']:.1f} MB per run of all inputs). Warm page cache; best of {args.repeat}.",
        "",
        "| case | runs x inputs | distinct bytes on disk | `sha256sum` over them | `rkdet diff` (process) | "
        "`rkdet diff` (compare only) | ratio (process / sha256sum) | all inferences' bytes | `sha256sum` over those "
        "(est.) | peak RSS over imports | tracemalloc peak | peak / one run's outputs | exit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        est = r["sha"] * r["logical_mb"] / r["disk_mb"]
        lines.append(f"| {r['case']} | {r['runs']} x 8 | {r['disk_mb']:.0f} MB | {r['sha']:.2f} s | {r['wall']:.2f} s | "
                     f"{r['inner']:.2f} s | {r['wall'] / r['sha']:.2f}x | {r['logical_mb'] / 1000:.1f} GB | {est:.1f} s | "
                     f"{r['rss_delta_mb']:.1f} MB | {r['trace_mb']:.1f} MB | {r['trace_mb'] / r['run_mb']:.2f}x | "
                     f"{r['exit']} |")
    lines += [
        "",
        f"Load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (other work shared the machine;",
        "both sides of each row were measured back to back under the same load).",
        "",
        "Targets: time within 1.5x of `sha256sum` over the same bytes; peak memory <= 2x one run's outputs.",
        "\"All inferences' bytes\" is what a tool without the index's hashes would have to hash (every",
        "inference's outputs); the estimate scales the measured `sha256sum` rate to it.",
        "`dedup` is the normal case (the runner stores each distinct output once): the diff reads index.jsonl",
        "and only the 8 distinct records. It misses the 1.5x target against `sha256sum` of the 20 MB of",
        "distinct files because its cost there is fixed overhead, not bytes (interpreter start and imports,",
        "parsing 8000 index lines, decoding each input's run 0); against the bytes of every inference, what",
        "a tool without the index's hashes would have to hash, it is two orders of magnitude faster.",
        "`worst` is the honest worst case:",
        "every output differs, so every file is read, hash-verified (the same sha256 work as `sha256sum`)",
        "and measured (bitwise, ULP, abs, cosine, rel L2, KL on cls outputs) and every record is decoded",
        "(DFL + NMS) for the decision level; those extra passes are the gap over `sha256sum`. The worst case",
        "is measured at --worst-runs runs (1000 would be 20 GB of distinct files); the diff streams, so its",
        "time grows linearly with the records while its array memory stays bounded.",
        "`rkdet diff (process)` includes interpreter start and imports (~0.3 s); `compare only` is the",
        "call itself. Memory: max RSS minus RSS after imports (includes allocator slack), and the",
        "tracemalloc peak of the compare call (numpy buffers included).",
        "",
        "## Hostile result sets (issue 9 item 3)",
        "",
        "Crafted from the `dedup` set; each must end as a one-line exit 2 without allocating what it declares.",
        f"\"Peak / one run's outputs\" is against the same {rows[0]['run_mb']:.1f} MB (target <= 2x).",
        "",
        "| case | what it declares | bytes on disk | `sha256sum` over them | `rkdet diff` (process) | "
        "`rkdet diff` (compare only) | peak RSS over imports | tracemalloc peak | peak / one run's outputs | exit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    run_mb = rows[0]["run_mb"]
    for h in hostile:
        lines.append(f"| {h['case']} | {h['what']} | {h['disk_mb']:.1f} MB | {h['sha']:.2f} s | {h['wall']:.2f} s | "
                     f"{h['inner']:.2f} s | {h['rss_delta_mb']:.1f} MB | {h['trace_mb']:.1f} MB | "
                     f"{h['trace_mb'] / run_mb:.2f}x | {h['exit']} |")
    out = ROOT / "bench" / "results" / "diff.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(out)


if __name__ == "__main__":
    main()
