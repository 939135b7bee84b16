#!/usr/bin/env python3
"""Bench: does the toolkit build (calibration, `.rknn` content, simulator reference) change with the CPU?

Issue 29: the build fingerprint leaves the workstation out, so a colleague's build must be the same bytes
whatever x86-64 CPU made it. The tiny model tests make is converted twice in this run: natively, and with the
hermetic toolkit worker's interpreter run under `qemu-x86_64 -cpu MODEL` (RKDET_TOOLKIT2_PYTHON names a
wrapper; the host side of rkdet, incl. the onnx-fp32 reference, stays native). Compared: the .rknn content
fingerprint and stable sections, the input/output quantization scales the manifest records, the simulator's
golden outputs and the fingerprints.

Usage: .venv/bin/python bench/cross_cpu_toolkit.py [--cpu Haswell] [--out bench/results/cross_cpu_toolkit.md]
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
sys.path.insert(0, str(REPO / "tests" / "convert"))
PRE_AVX_MODELS = ("Nehalem", "Westmere", "Penryn", "Conroe")


def _convert(cfg: Path, out: Path, python: str | None) -> tuple[Path, float]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if python:
        env["RKDET_TOOLKIT2_PYTHON"] = python
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "rkdet.cli", "convert", "--config", str(cfg), "--out", str(out),
                           "--json"], capture_output=True, text=True, env=env, timeout=7200)
    if proc.returncode:
        raise SystemExit(f"convert ({python or 'native'}) exit {proc.returncode}: {proc.stderr[-2000:]}")
    return Path(json.loads(proc.stdout)["builds"][0]["folder"]), time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", default="Haswell,SandyBridge,Nehalem", help="qemu -cpu models, comma-separated")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from tiny_models import conv_model, image_folder, write_config  # type: ignore[import-not-found]

    from rkdet.convert.rknn_file import compare_rknn, read_rknn
    from rkdet.records.manifest import read_manifest
    cpus = [c for c in args.cpu.split(",") if c]
    with tempfile.TemporaryDirectory(prefix="rkdet-xcpu-tk-") as tmp:
        root = Path(tmp)
        cfg = write_config(root / "tiny.yaml", conv_model(root / "tiny.onnx"), image_folder(root / "cal", 6, seed=1),
                           image_folder(root / "gold", 2, seed=2))
        native, t_native = _convert(cfg, root / "native", None)
        again, _ = _convert(cfg, root / "native-again", None)
        columns = [("native again", again, None, "")]
        for cpu in cpus:
            wrapper = root / f"qemu-{cpu}" / "python"
            wrapper.parent.mkdir()
            blas = "unset OPENBLAS_CORETYPE; " if cpu in PRE_AVX_MODELS else ""  # a forced AVX kernel (CI: Haswell) is a SIGILL
            wrapper.write_text(f"#!/bin/sh\n{blas}exec {shutil.which('qemu-x86_64')} -cpu {cpu} {sys.executable} \"$@\"\n")
            wrapper.chmod(0o755)
            folder, seconds = _convert(cfg, root / f"guest-{cpu}", str(wrapper))
            features = subprocess.run([str(wrapper), "-c", "from rkdet.onboard.reference import cpu_class; "
                                       "print(cpu_class()['class'])"], capture_output=True, text=True,
                                      env=dict(os.environ, PYTHONPATH=str(REPO))).stdout.strip()
            columns.append((f"qemu -cpu {cpu}", folder, seconds, features))
        a, ra = read_manifest(native / "manifest.json"), read_rknn(native / "model.rknn")
        tensors = lambda m: [(t.name, t.scale, t.zero_point) for t in (*m.rknn.header.inputs, *m.rknn.header.outputs)]  # noqa: E731
        table: dict[str, list[str]] = {}
        sections = []
        for label, folder, _, _ in columns:
            b, rb = read_manifest(folder / "manifest.json"), read_rknn(folder / "model.rknn")
            cmp = compare_rknn(ra, rb)
            for key, same in (
                    (".rknn file bytes", cmp.bytes_identical),
                    (".rknn content fingerprint", cmp.fingerprint_identical),
                    (".rknn stable sections", not cmp.differing_stable_sections),
                    ("input/output quantization scales and zero points", tensors(a) == tensors(b)),
                    ("simulator golden outputs", (a.golden_outputs or {}).get("simulator") == (b.golden_outputs or {}).get("simulator")),
                    ("model fingerprint", a.model_fingerprint == b.model_fingerprint),
                    ("build fingerprint", a.fingerprint == b.fingerprint)):
                table.setdefault(key, []).append("yes" if same else "NO")
            sections.append(f"{label}: {', '.join(cmp.differing_sections) or 'none'}")
    head = " | ".join(f"{label}{f' ({cls}, {s:.0f} s)' if s else ''}" for label, _, s, cls in columns)
    text = "\n".join([f"Tiny conv model (tests/convert/tiny_models.conv_model), rk3588, rknn-toolkit2: each build compared "
                      f"with a native build (the host's CPU, {t_native:.0f} s); qemu: the hermetic toolkit worker's "
                      "interpreter run under `qemu-x86_64 -cpu MODEL` (rkdet's host side native).", "",
                      f"| identical to the native build | {head} |", "|---|" + "---|" * len(columns)]
                     + [f"| {k} | {' | '.join(v)} |" for k, v in table.items()]
                     + ["", "Differing .rknn sections: " + "; ".join(sections) + "."]) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
