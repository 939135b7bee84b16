#!/usr/bin/env python3
"""Peer for bench/convert.py: the same rknn-toolkit2 build written as a user would, without rkdet.

It does the work `rkdet convert` cannot skip and nothing else: read the calibration PNGs with cv2,
letterbox them to 640x640 (pad 114, RGB, the same rounding rkdet uses), write the NCHW .npy dataset
list the toolkit wants, build INT8 with the same toolkit options (mean 0, std 255, w8a8, normal,
channel, optimization_level 0, rk3588), export, then run the simulator on the golden pages. No
hermetic wrappers, no hashing, no manifest, no FP32 reference: the bench's baseline.

Usage: python bench/bare_toolkit_build.py --onnx build/.../model.onnx --calibration calibration_data/calibration
       --golden calibration_data/golden --out <folder>
Prints one JSON line on stdout: phase wall times in seconds and the simulator outputs' sha256 per page.
"""

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import cv2
import numpy as np

SIZE = 640
PAD = 114


def letterbox_rgb(path: Path) -> np.ndarray:
    """uint8 NHWC [1,640,640,3]: aspect-preserving resize, centred, padded with 114."""
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        sys.exit(f"{path}: cannot decode image")
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    h, w = rgb.shape[:2]
    scale = min(SIZE / h, SIZE / w)
    nh, nw = int(round(h * scale)), int(round(w * scale))
    canvas = np.full((SIZE, SIZE, 3), PAD, dtype=np.uint8)
    top, left = (SIZE - nh) // 2, (SIZE - nw) // 2
    canvas[top:top + nh, left:left + nw] = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_LINEAR)
    return canvas[None]


def output_hash(array: np.ndarray) -> str:
    """Same definition as docs/FORMATS.md, so the bench can check both sides simulated the same model."""
    a = np.ascontiguousarray(array)
    head = f"{a.dtype.str}|{','.join(str(d) for d in a.shape)}|".encode()
    return hashlib.sha256(head + a.tobytes()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx", required=True, type=Path)
    ap.add_argument("--calibration", required=True, type=Path)
    ap.add_argument("--golden", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    t = {}
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, png in enumerate(sorted(args.calibration.glob("*.png"))):
        npy = args.out / f"cal-{i:04d}.npy"
        np.save(npy, letterbox_rgb(png).transpose(0, 3, 1, 2))  # the toolkit reads .npy as the model's NCHW
        lines.append(str(npy))
    (args.out / "dataset.txt").write_text("\n".join(lines) + "\n")
    golden = {png.stem: letterbox_rgb(png) for png in sorted(args.golden.glob("*.png"))}
    t["preprocess"] = time.perf_counter() - start

    from rknn.api import RKNN

    mark = time.perf_counter()
    rknn = RKNN(verbose=False)
    rknn.config(mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]], quantized_dtype="w8a8",
                quantized_algorithm="normal", quantized_method="channel", optimization_level=0,
                target_platform="rk3588")
    if rknn.load_onnx(model=str(args.onnx)) != 0:
        sys.exit("load_onnx failed")
    if rknn.build(do_quantization=True, dataset=str(args.out / "dataset.txt")) != 0:
        sys.exit("build failed")
    if rknn.export_rknn(str(args.out / "model.rknn")) != 0:
        sys.exit("export_rknn failed")
    t["build_export"] = time.perf_counter() - mark
    mark = time.perf_counter()
    if rknn.init_runtime() != 0:
        sys.exit("init_runtime failed")
    hashes = {}
    for name, tensor in golden.items():
        outputs = rknn.inference(inputs=[tensor], data_format=["nhwc"])
        hashes[name] = [output_hash(o) for o in outputs]
        for k, o in enumerate(outputs):
            np.save(args.out / f"sim-{name}.{k}.npy", o)
    t["simulator"] = time.perf_counter() - mark
    rknn.release()
    t["total_in_process"] = time.perf_counter() - start
    print(json.dumps({"phases_s": t, "golden_hashes": hashes, "golden_pages": len(golden)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
