"""The values a flag or a config key may take, one definition each (stdlib and the on-board program's constants, so `rkdet --help`,
the config model, the decoders and the fleet matrix all read the same tuple without importing numpy).

`CORE_MASKS` and `BACKENDS` are defined by the on-board program (rkdet/onboard/resultset.py and the
backend table, rkdet/onboard/backend_table.py: rkdet-run takes and records them) and re-exported here,
so host and board cannot disagree.
"""

from __future__ import annotations

from rkdet.onboard.backend_table import BACKENDS  # board runtimes (one definition: the backend registry's table)
from rkdet.onboard.resultset import CORE_MASKS  # NPU core masks (one definition)
#: --decoder values: a family forces its recognisers (and says why when the outputs do not fit)
DECODERS = ("auto", "yolov8", "yolov5", "yolov10", "picodet", "segmentation", "classification", "semantic", "none")
#: the --decoder values `rkdet compare-builds` takes (a subset: the decisions it judges between two builds)
COMPARE_DECODERS = ("auto", "yolov8", "classification", "none")  # in DECODERS' order

__all__ = ["BACKENDS", "COMPARE_DECODERS", "CORE_MASKS", "DECODERS"]
