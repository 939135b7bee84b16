"""Shared fixture for the diff tests: real onnxruntime outputs of the default model on a real page.

The split-head model is cut from the stock Ultralytics export (onnx.utils.Extractor at the last
box/cls convolutions, a Sigmoid added on cls), so both layouts come from the same weights and image.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.utils import Extractor
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "yolov8n-doclaynet.onnx"
SIDE = 1024


def _page(tmp: Path) -> np.ndarray:
    """A real document page as RGB uint8: the lead's golden pages, else one rendered with pdftoppm."""
    pages = sorted((ROOT / "calibration_data" / "golden").glob("*.png"))
    if pages:
        return np.asarray(Image.open(pages[0]).convert("RGB"))
    pdf = next(p for p in Path("/usr/share/doc").rglob("*.pdf"))
    subprocess.run(["pdftoppm", "-f", "1", "-l", "1", "-scale-to", "1200", "-png", str(pdf), str(tmp / "p")], check=True)
    return np.asarray(Image.open(next(tmp.glob("p*.png"))).convert("RGB"))


def _letterbox(rgb: np.ndarray) -> np.ndarray:
    h, w = rgb.shape[:2]
    scale = SIDE / max(h, w)
    resized = np.asarray(Image.fromarray(rgb).resize((round(w * scale), round(h * scale)), Image.BILINEAR))
    canvas = np.full((SIDE, SIDE, 3), 114, dtype=np.uint8)
    canvas[: resized.shape[0], : resized.shape[1]] = resized
    return canvas


def _split_model() -> bytes:
    model = onnx.load(str(MODEL))
    cut = [f"/model.22/cv{k}.{i}/cv{k}.{i}.2/Conv_output_0" for i in range(3) for k in (2, 3)]
    sub = Extractor(model).extract_model(["images"], cut)
    del sub.graph.output[:]
    for i in range(3):
        sub.graph.node.append(helper.make_node("Identity", [cut[2 * i]], [f"box{i}"]))
        sub.graph.node.append(helper.make_node("Sigmoid", [cut[2 * i + 1]], [f"cls{i}"]))
        sub.graph.output.extend([helper.make_tensor_value_info(f"box{i}", onnx.TensorProto.FLOAT, None),
                                 helper.make_tensor_value_info(f"cls{i}", onnx.TensorProto.FLOAT, None)])
    return sub.SerializeToString()


@pytest.fixture(scope="session")
def doc_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    image = _letterbox(_page(tmp_path_factory.mktemp("page")))
    x = image.transpose(2, 0, 1)[None].astype(np.float32) / 255.0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    full = ort.InferenceSession(str(MODEL), opts, providers=["CPUExecutionProvider"])
    (single,) = full.run(None, {"images": x})
    split_model = _split_model()
    split_sess = ort.InferenceSession(split_model, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in split_sess.get_outputs()]
    split = dict(zip(names, split_sess.run(None, {"images": x})))
    return {"image": image, "x": x, "single": single, "split": split, "names": names, "split_model": split_model}


