"""A TEST DOUBLE of rknn-toolkit-lite2's `rknnlite` package (which exists only on aarch64 boards).

Put `PYTHONPATH_DIR` (this folder) on PYTHONPATH and `from rknnlite.api import RKNNLite` gives the
emulated RKNNLite: it computes with onnxruntime on the CPU, declares itself with `RKDET_EMULATED`,
and every result it produces is labelled emulated by rkdet-run. It is not an NPU.
"""

import os

PYTHONPATH_DIR = os.path.dirname(os.path.abspath(__file__))
