#!/usr/bin/env python3
"""Bench: what the audited RKNNLite (rkdet.onboard.audit) costs per inference, beside plain inference.

Peer: the same onnxruntime session (1 intra-op thread, sequential) behind lite2's calling convention,
called bare and through the audited wrapper in interleaved blocks, in one process and run, so load hits
both sides alike. Rows:
  (a) wall time per inference, bare vs audited (block medians; noisy on a loaded machine);
  (b) the audit's own CPU per inference on the app's thread: the calling thread's CPU time around the
      wrapper's call minus the same thread's CPU time inside the runtime's call (thread clocks: robust to
      neighbours' load); `--sync` hashes on the app's thread, the default hands copies to the recorder
      thread (whose hashing, row c, then runs beside the inference on another core);
      the canary is off here (its cost is golden inputs / every_n inferences, e.g. 3/1000 = 0.3 %);
  (c) the hash options on this model's real outputs: sha256 (THE output hash, hashlib), blake2b, sha1.
The target is (b) <= 1 % of the bare inference's CPU. The emulated board is this machine, so the ratio,
not the absolute time, is what carries over to a board's CPU class (its NPU inference time differs).

Usage: .venv/bin/python bench/audit_overhead.py [--model models/yolov8n-doclaynet.onnx] [--blocks 3]
       [--block-runs 8] [--sync] [--out bench/results/audit.md (appended)]
"""

import argparse
import hashlib
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rkdet.onboard.audit import AuditSettings, RKNNLite  # noqa: E402


class OrtLite(object):
    """lite2's calling convention over one onnxruntime CPU session; its own thread CPU per call kept."""

    def __init__(self, model):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        self.name = self.session.get_inputs()[0].name
        self.cpu = []

    def load_rknn(self, path):
        return 0

    def init_runtime(self, **kwargs):
        return 0

    def inference(self, inputs=None, **kwargs):
        c0 = time.thread_time()
        out = self.session.run(None, {self.name: inputs[0]})
        self.cpu.append(time.thread_time() - c0)
        return out

    def release(self):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "yolov8n-doclaynet.onnx"))
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--block-runs", type=int, default=8)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "audit.md"))
    ap.add_argument("--sync", action="store_true", help="hash and append on the app's thread")
    args = ap.parse_args()
    bare = OrtLite(args.model)
    shape = [d if isinstance(d, int) else 1 for d in bare.session.get_inputs()[0].shape]
    rng = np.random.RandomState(0)
    x = rng.random_sample(shape).astype(np.float32)
    work = tempfile.mkdtemp(prefix="rkdet-audit-bench-")
    audited_rt = OrtLite(args.model)
    lite = RKNNLite(audit=AuditSettings(os.path.join(work, "log"), prom_dir=os.path.join(work, "prom"),
                                        build="e" * 64, background=not args.sync), runtime=audited_rt)
    lite.init_runtime()
    bare.inference(inputs=[x])
    lite.inference(inputs=[x])  # warm both
    bare_wall, aud_wall, own_cpu, bare_cpu = [], [], [], []
    for _ in range(args.blocks):
        t0 = time.perf_counter()
        for _ in range(args.block_runs):
            bare.inference(inputs=[x])
        bare_wall.append((time.perf_counter() - t0) / args.block_runs)
        t0 = time.perf_counter()
        for _ in range(args.block_runs):
            c0 = time.thread_time()
            lite.inference(inputs=[x])
            own_cpu.append(time.thread_time() - c0 - audited_rt.cpu[-1])
        aud_wall.append((time.perf_counter() - t0) / args.block_runs)
    bare_cpu = bare.cpu[1:]
    outputs = bare.session.run(None, {bare.name: x})
    data = b"".join(np.ascontiguousarray(o).tobytes() for o in outputs)
    hashes = {}
    for name in ("sha256", "blake2b", "sha1"):
        t0 = time.thread_time()
        for _ in range(20):
            hashlib.new(name, data).digest()
        hashes[name] = (time.thread_time() - t0) / 20
    lite.release()
    med_bare_cpu = statistics.median(bare_cpu)
    med_own = statistics.median(own_cpu)
    lines = [
        "## Run", "",
        "%s, Python %s, %s; load average %s; model %s (outputs %.2f MB); %d blocks x %d inferences each side." % (
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), platform.python_version(), platform.machine(),
            " ".join("%.1f" % v for v in os.getloadavg()), Path(args.model).name, len(data) / 1e6,
            args.blocks, args.block_runs),
        "Mode: %s." % ("synchronous (hashing on the app's thread)" if args.sync else
                       "recorder thread (the app's thread copies inputs and outputs)"), "",
        "| row | bare | audited | ratio |", "|---|---|---|---|",
        "| (a) wall per inference, block medians | %.1f ms | %.1f ms | %+.1f %% |" % (
            statistics.median(bare_wall) * 1e3, statistics.median(aud_wall) * 1e3,
            (statistics.median(aud_wall) / statistics.median(bare_wall) - 1) * 100),
        "| (b) the audit's own CPU per inference (median; thread clock) | %.1f ms inference CPU | %.3f ms | **%.2f %%** |" % (
            med_bare_cpu * 1e3, med_own * 1e3, med_own / med_bare_cpu * 100), "",
        "(c) hash options on these outputs (thread CPU per inference's outputs): " + ", ".join(
            "%s %.3f ms (%.2f %% of inference CPU)" % (k, v * 1e3, v / med_bare_cpu * 100) for k, v in hashes.items()), "",
        "Target (b) <= 1 %%: **%s** on this machine." % ("met" if med_own / med_bare_cpu <= 0.01 else "NOT met"), "",
    ]
    text = "\n".join(lines)
    with open(args.out, "a") as handle:
        handle.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
