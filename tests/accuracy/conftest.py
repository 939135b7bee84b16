"""Fixtures for `rkdet accuracy`: the tiny colour classifier and segmenter converted once per run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from shared_build import shared_across_workers

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "convert"))
from convert_helpers import run_rkdet  # noqa: E402
from tiny_labelled import colour_classifier, colour_segmenter, region_images, solid_images  # noqa: E402
from tiny_models import write_config  # noqa: E402


def _convert(folder: Path, cfg: Path) -> Path:
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(folder / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(json.loads(proc.stdout)["builds"][0]["folder"])


@pytest.fixture(scope="session")
def colour_builds(tmp_path_factory) -> dict[str, Path]:
    """{"classifier": build, "classifier16": its float16 build, "segmenter": build, "root": folder (cls.yaml
    there is the classifier's config)}: the tiny models converted for rk3588 (calibration and golden images
    of the same colours the labelled sets use). Read-only."""
    def make(root: Path) -> Path:
        solid_images(root / "cal", 3, seed=1)
        solid_images(root / "gold", 1, seed=2)
        region_images(root / "scal", root / "scal-maps", 6, seed=3)
        region_images(root / "sgold", root / "sgold-maps", 2, seed=4)
        cls = write_config(root / "cls.yaml", colour_classifier(root / "cls.onnx"), root / "cal", root / "gold",
                           name="colour", preprocess={"resize": "stretch"})
        seg = write_config(root / "seg.yaml", colour_segmenter(root / "seg.onnx"), root / "scal", root / "sgold",
                           name="colourseg", preprocess={"resize": "stretch"})
        cls16 = write_config(root / "cls16.yaml", root / "cls.onnx", root / "cal", root / "gold", name="colour16",
                             preprocess={"resize": "stretch"},
                             quantize={"dataset": str(root / "cal"), "enabled": False, "force_fp16": True})
        (root / "builds.json").write_text(json.dumps({"classifier": str(_convert(root, cls)),
                                                      "segmenter": str(_convert(root, seg)),
                                                      "classifier16": str(_convert(root, cls16))}))
        return root

    root = shared_across_workers(tmp_path_factory, "accuracy-colour-builds", make)
    builds = json.loads((root / "builds.json").read_text())
    return {**{k: Path(v) for k, v in builds.items()}, "root": root}
