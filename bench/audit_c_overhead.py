#!/usr/bin/env python3
"""Bench: what the C audit library (rkdet/onboard/c/rkdet_audit.c) costs per record, beside an inference.

One run, interleaved blocks, so load hits every side alike:
  - the inference: the same onnxruntime session as bench/audit_overhead.py (1 intra-op thread), its
    thread CPU per inference (median);
  - the C library's record of tensors of the board's sizes (the NPU's uint8 input 640x640x3, and float32
    outputs as large as this model's real outputs), built with gcc -O2 from the shipped example app's
    `--bench-bytes` mode (records 10 ms apart): the calling thread's CPU per record (median), with the
    CPU's sha256 instructions where present, with the portable code (RKDET_SHA256=portable), and with
    the recorder thread (`background_queue`: the app's thread only copies the tensors);
  - the peer on the Python side: the Python library's record of the same tensors on the app's thread
    (`AuditSettings(background=False)`, hashlib), its thread CPU per call (median).
The target is the app thread's share <= 1 % of the inference's CPU. Ratios, not times, carry over; a board's NPU inference is not this CPU inference.

Usage: .venv/bin/python bench/audit_c_overhead.py [--model models/yolov8n-doclaynet.onnx] [--blocks 3]
       [--block-runs 6] [--out bench/results/audit.md (appended)]
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from audit_overhead import OrtLite  # noqa: E402  (the same inference peer)

from rkdet.onboard.audit import AuditSettings, RKNNLite  # noqa: E402

NPU_INPUT_BYTES = 640 * 640 * 3  # uint8 NHWC, what the NPU is fed for this model


class FixedOutputs(object):
    """lite2's calling convention returning fixed arrays at once: only the audit's record is timed."""

    def __init__(self, outputs):
        self.outputs = outputs

    def load_rknn(self, path):
        return 0

    def init_runtime(self, **kwargs):
        return 0

    def inference(self, inputs=None, **kwargs):
        return self.outputs

    def release(self):
        pass


def build_app(work):
    exe = os.path.join(work, "audit_serving_app")
    c_dir = REPO / "rkdet" / "onboard" / "c"
    subprocess.run([shutil.which("gcc") or "gcc", "-std=c99", "-O2", "-pthread", "-I%s" % c_dir,
                    str(REPO / "docs" / "examples" / "audit_serving_app.c"), str(c_dir / "rkdet_audit.c"), "-lm",
                    "-o", exe], check=True, timeout=300)
    return exe


def c_record(exe, work, out_bytes, sha256, rounds, background=0):
    log = tempfile.mkdtemp(prefix="log-", dir=work)
    done = subprocess.run([exe, "--log", log, "--build", "e" * 64, "--bench-bytes", str(NPU_INPUT_BYTES),
                           "--bench-out-bytes", str(out_bytes), "--count", str(rounds), "--background", str(background)],
                          env=dict(os.environ, RKDET_SHA256=sha256), capture_output=True, text=True, check=True,
                          timeout=300)
    fields = dict(kv.split("=", 1) for kv in done.stdout.split()[1:])
    shutil.rmtree(log)
    return float(fields["record_cpu_s"]), fields["sha256"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "yolov8n-doclaynet.onnx"))
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--block-runs", type=int, default=6)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "audit.md"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="rkdet-audit-c-bench-")
    exe = build_app(work)
    ort = OrtLite(args.model)
    shape = [d if isinstance(d, int) else 1 for d in ort.session.get_inputs()[0].shape]
    x = np.random.RandomState(0).random_sample(shape).astype(np.float32)
    outputs = ort.inference(inputs=[x])  # warm; the real outputs
    out_bytes = sum(np.asarray(o).nbytes for o in outputs)
    npu_input = (np.arange(NPU_INPUT_BYTES) % 256).astype(np.uint8).reshape(1, 640, 640, 3)
    py = RKNNLite(audit=AuditSettings(os.path.join(work, "pylog"), build="e" * 64, background=False),
                  runtime=FixedOutputs(outputs))
    py.init_runtime()
    inference_cpu, c_fast, c_portable, c_thread, py_cpu, impl = [], [], [], [], [], "?"
    for _ in range(args.blocks):
        ort.cpu.clear()
        for _ in range(args.block_runs):
            ort.inference(inputs=[x])
        inference_cpu.extend(ort.cpu)
        cpu, impl = c_record(exe, work, out_bytes, "", 3 * args.block_runs)
        c_fast.append(cpu)
        c_portable.append(c_record(exe, work, out_bytes, "portable", 3 * args.block_runs)[0])
        c_thread.append(c_record(exe, work, out_bytes, "", 3 * args.block_runs, background=16)[0])
        for _ in range(args.block_runs):
            c0 = time.thread_time()
            py.inference(inputs=[npu_input])
            py_cpu.append(time.thread_time() - c0)
    py.release()
    shutil.rmtree(work)
    inf = statistics.median(inference_cpu)
    rows = [("C library, sha256 = %s (the default here)" % impl, statistics.median(c_fast)),
            ("C library, sha256 = portable C", statistics.median(c_portable)),
            ("C library, recorder thread (`background_queue`): the app's thread copies", statistics.median(c_thread)),
            ("peer: Python library on the app's thread (`background=False`, hashlib)", statistics.median(py_cpu))]
    lines = [
        "## C library: cost per record (bench/audit_c_overhead.py)", "",
        "%s, %s, gcc -O2; load average %s; model %s; record of a uint8 input of %.2f MB (the NPU's 640x640x3) "
        "and float32 outputs of %.2f MB (this model's); %d blocks, interleaved." % (
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), platform.machine(),
            " ".join("%.1f" % v for v in os.getloadavg()), Path(args.model).name, NPU_INPUT_BYTES / 1e6,
            out_bytes / 1e6, args.blocks), "",
        "| row | thread CPU per call (median) | % of the inference's CPU |", "|---|---|---|",
        "| inference (onnxruntime CPU, 1 thread) | %.1f ms | 100 %% |" % (inf * 1e3),
    ]
    lines += ["| %s | %.3f ms | **%.2f %%** |" % (name, v * 1e3, v / inf * 100) for name, v in rows]
    lines += ["", "Target (C library, default sha256) <= 1 %%: **%s** on this machine." % (
        "met" if rows[0][1] / inf <= 0.01 else "NOT met"), ""]
    text = "\n".join(lines)
    with open(args.out, "a") as handle:
        handle.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
