"""The values a flag or a config key may take, one definition each (stdlib only, so `rkdet --help`,
the config model, the decoders and the fleet matrix all read the same tuple without importing numpy).

The on-board program (`rkdet/runner.py`, Python 3.6+, pushed alone) keeps its own `CORE_MASKS`; a test
holds it equal to this one.
"""

from __future__ import annotations

#: NPU core masks rkdet-run takes (`--core-mask`, config run.core_mask, the fleet matrix)
CORE_MASKS = ("auto", "0", "1", "2", "0_1", "0_1_2")
#: board runtimes (`--backend`, config run.backend, the fleet matrix)
BACKENDS = ("rknnlite", "onnxruntime")
#: --decoder values: a family forces its recognisers (and says why when the outputs do not fit)
DECODERS = ("auto", "yolov8", "yolov5", "yolov10", "picodet", "segmentation", "classification", "none")
#: the --decoder values `rkdet compare-builds` takes (a subset: the decisions it judges between two builds)
COMPARE_DECODERS = tuple(d for d in DECODERS if d in ("auto", "yolov8", "classification", "none"))
