#!/usr/bin/env python3
"""Bench: which onnxruntime session settings give a bit-identical onnx-fp32 reference on another x86-64 CPU.

Issue 29: a build's FP32 reference (golden/onnx-fp32, `--backend onnxruntime`, the self-check's reference,
the emulated runtime) must be the one a colleague's workstation makes. onnxruntime's MLAS kernels are chosen
by CPUID at run time, so the same settings are run here natively and under `qemu-x86_64 -cpu MODEL` (Debian's
qemu-user, TCG: the guest sees the model's CPUID; TCG has no AVX-512, so the host's AVX-512 is measured
natively). Every (settings, CPU) pair hashes each output of each input (rkdet.onboard.hashing.output_hash)
and is compared with the native run of the same settings.

The model is the default build's prepared graph (configs/yolov8.yaml: the split-head YOLOv8n at 640) fed the
golden inputs through rkdet's own transform, or `--tiny` (the conv + relu + matmul model tests make).

Usage: .venv/bin/python bench/cross_cpu_reference.py [--config configs/yolov8.yaml] [--max-inputs 8]
       [--qemu-inputs 1] [--cpus Haswell,Nehalem] [--out bench/results/cross_cpu_reference.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

SETTINGS = (("1 thread, ORT_ENABLE_ALL", 1, "all"), ("1 thread, ORT_ENABLE_EXTENDED", 1, "extended"),
            ("1 thread, ORT_ENABLE_BASIC", 1, "basic"), ("1 thread, ORT_DISABLE_ALL", 1, "disable"),
            ("2 threads, ORT_ENABLE_EXTENDED", 2, "extended"))
REFERENCE_SETTING = "1 thread, ORT_ENABLE_EXTENDED"  # rkdet.onboard.reference's session
PRE_AVX_MODELS = ("Nehalem", "Westmere", "Penryn", "Conroe")


def run_child(folder: Path, max_inputs: int) -> dict:
    """In this process (native or under qemu): every setting on the stored model and inputs -> hashes."""
    import numpy as np
    import onnxruntime as ort

    from rkdet.onboard.hashing import output_hash
    from rkdet.onboard.reference import cpu_class, fp32_input
    meta = json.loads((folder / "meta.json").read_text())
    onnx = (folder / "model.onnx").read_bytes()
    inputs = np.load(folder / "inputs.npz")
    names = sorted(inputs.files)[:max_inputs]
    levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    result = {"cpu": cpu_class(), "settings": {}}
    kept = {}
    for label, threads, level in SETTINGS:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = levels[level]
        session = ort.InferenceSession(onnx, opts, providers=["CPUExecutionProvider"])
        outs = [o.name for o in session.get_outputs()]
        hashes = {}
        for name in names:
            feed = {meta["input_name"]: fp32_input(inputs[name], meta["mean"], meta["std"])}
            arrays = session.run(outs, feed)
            hashes[name] = [output_hash(np.ascontiguousarray(a)) for a in arrays]
            if label == REFERENCE_SETTING:  # kept to measure how far another class's reference lies numerically
                kept.update({f"{name}/{i}": a for i, a in enumerate(arrays)})
        result["settings"][label] = hashes
    kept_file = folder / f"reference-{os.getpid()}.npz"
    np.savez(kept_file, **kept)
    result["reference_outputs"] = str(kept_file)
    return result


def _prepare(folder: Path, config: str | None, max_inputs: int) -> str:
    """Write model.onnx, inputs.npz and meta.json; return what the model is."""
    import numpy as np
    if config is None:
        sys.path.insert(0, str(REPO / "tests" / "convert"))
        from tiny_models import conv_model  # type: ignore[import-not-found]  (the tiny model tests make)
        onnx, input_name = conv_model(folder / "tiny.onnx").read_bytes(), "x"
        rng = np.random.default_rng(29)
        tensors = {f"in{i}": rng.integers(0, 256, (1, 32, 32, 3), dtype=np.uint8) for i in range(max_inputs)}
        mean, std, what = [0.0, 0.0, 0.0], [255.0, 255.0, 255.0], "tests' tiny conv model (tiny_models.conv_model, 32x32)"
    else:
        from rkdet.config import load_config
        from rkdet.convert.images import list_images
        from rkdet.convert.pipeline import materialize
        from rkdet.convert.onnx_graph import prepare_model
        cfg = load_config(Path(config))
        model = prepare_model(cfg.model)
        gold = materialize(list_images(cfg.golden.inputs, "golden.inputs", max_inputs), model, cfg)
        onnx, input_name, tensors = model.onnx_bytes, model.input_name, gold.tensors
        mean, std = list(cfg.preprocess.mean), list(cfg.preprocess.std)
        shown = os.path.relpath(config, REPO) if Path(config).resolve().is_relative_to(REPO) else config
        what = f"{shown}: prepared {Path(cfg.model.onnx).name} ({model.prepare}), {len(tensors)} golden inputs"
    (folder / "model.onnx").write_bytes(onnx)
    np.savez(folder / "inputs.npz", **tensors)
    (folder / "meta.json").write_text(json.dumps({"input_name": input_name, "mean": mean, "std": std}))
    return what


def _spawn(folder: Path, max_inputs: int, qemu_cpu: str | None) -> tuple[dict, float]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", str(folder), "--max-inputs", str(max_inputs)]
    if qemu_cpu:
        argv = [shutil.which("qemu-x86_64") or "qemu-x86_64", "-cpu", qemu_cpu] + argv
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    if qemu_cpu in PRE_AVX_MODELS:  # a forced OPENBLAS_CORETYPE (this CI sets Haswell) is an AVX kernel: SIGILL
        env.pop("OPENBLAS_CORETYPE", None)
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv[:3])}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "yolov8.yaml"))
    parser.add_argument("--tiny", action="store_true", help="tests' tiny detector instead of the config's model")
    parser.add_argument("--max-inputs", type=int, default=8)
    parser.add_argument("--qemu-inputs", type=int, default=1, help="inputs run under qemu (it is ~30x slower)")
    parser.add_argument("--cpus", default="Haswell,SandyBridge,Nehalem", help="qemu -cpu models")
    parser.add_argument("--out", default=None, help="write the markdown table here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(Path(args.child), args.max_inputs)))
        return 0
    with tempfile.TemporaryDirectory(prefix="rkdet-xcpu-") as tmp:
        folder = Path(tmp)
        what = _prepare(folder, None if args.tiny else args.config, args.max_inputs)
        native, _ = _spawn(folder, args.max_inputs, None)
        runs = [("native", native, None)]
        for model in [c for c in args.cpus.split(",") if c]:
            guest, seconds = _spawn(folder, args.qemu_inputs, model)
            runs.append((f"qemu -cpu {model}", guest, seconds))
            _report(what, runs, args.out)  # after each CPU: qemu is slow, a partial table is worth keeping
    return 0


def _distance(native_file: str, guest_file: str) -> str:
    """Max abs difference, max relative abs difference (|a-b| / max|a| of that output) and max ULP, over
    the outputs both runs computed."""
    import numpy as np
    a, b = np.load(native_file), np.load(guest_file)
    worst_abs, worst_rel, worst_ulp, n = 0.0, 0.0, 0, 0
    for key in b.files:
        x, y = a[key].astype(np.float64), b[key].astype(np.float64)
        d = np.abs(x - y)
        worst_abs = max(worst_abs, float(d.max(initial=0.0)))
        worst_rel = max(worst_rel, float(d.max(initial=0.0)) / max(float(np.abs(x).max(initial=0.0)), 1e-30))
        xi, yi = a[key].astype(np.float32).view(np.int32).astype(np.int64), b[key].astype(np.float32).view(np.int32).astype(np.int64)
        xi = np.where(xi < 0, -(xi & 0x7FFFFFFF), xi)
        yi = np.where(yi < 0, -(yi & 0x7FFFFFFF), yi)
        worst_ulp = max(worst_ulp, int(np.abs(xi - yi).max(initial=0)))
        n += 1
    return f"{n} output tensors: max abs {worst_abs:.3g}, max abs / max |output| {worst_rel:.3g}, max {worst_ulp} ULP"


def _report(what: str, runs: list, out: str | None) -> None:
    native = runs[0][1]
    lines = [f"Model: {what}. onnxruntime settings (inter-op 1, ORT_SEQUENTIAL) x CPU; each cell: output tensors "
             "bit-identical to the native run of the same settings / tensors compared.", "",
             "| settings | " + " | ".join(f"{n} ({r['cpu']['class']})" for n, r, _ in runs[1:]) + " |",
             "|---|" + "---|" * (len(runs) - 1)]
    for label, _, _ in SETTINGS:
        cells = []
        for _, guest, _ in runs[1:]:
            pairs = [(h, native["settings"][label][name][i]) for name, hs in guest["settings"][label].items()
                     for i, h in enumerate(hs)]
            cells.append(f"{sum(a == b for a, b in pairs)} / {len(pairs)}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    guests = runs[1:]
    lines.append("\nUnder the reference's settings (" + REFERENCE_SETTING + "), how far each CPU's outputs lie from the "
                 "native ones (the cross-CPU bound, rkdet.tolerance.CROSS_CPU_REL, is set from these):")
    for n, r, _ in guests:
        lines.append(f"- {n}: " + _distance(native["reference_outputs"], r["reference_outputs"]))
    for i, (n1, r1, _) in enumerate(guests):  # are two foreign classes one class? (same settings, same inputs)
        for n2, r2, _ in guests[i + 1:]:
            same = [label for label, _, _ in SETTINGS if r1["settings"][label] == r2["settings"][label]]
            lines.append(f"\n{n1} vs {n2}: bit-identical under {', '.join(same) or 'no setting'}.")
    lines += ["", f"Native CPU: {native['cpu']['class']} ({', '.join(native['cpu']['features'])}); "
              + "; ".join(f"{n}: {r['cpu']['class']} ({', '.join(r['cpu']['features'])}), {s:.0f} s"
                          for n, r, s in runs[1:]) + "."]
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    if out:
        Path(out).write_text(text)


if __name__ == "__main__":
    sys.exit(main())
