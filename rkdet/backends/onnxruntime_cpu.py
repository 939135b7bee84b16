"""onnxruntime: the prepared ONNX on the board's CPU (deterministic session), judged by the FP32 golden set."""

from __future__ import annotations

from rkdet.backends.descriptor import Backend
from rkdet.onboard.backend_table import ONNXRUNTIME

BACKEND = Backend(ONNXRUNTIME, probe_facts=("soc", "python_version"))
