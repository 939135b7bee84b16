"""THE backend registry: every backend's descriptor, by name (one line each).

Adding a backend: its facts in rkdet/onboard/backend_table.py (the on-board program and run.json know
it by them), one module here beside rknnlite_npu.py, one line below.
"""

from __future__ import annotations

from rkdet.backends import onnxruntime_cpu, rknn_c, rknnlite_npu
from rkdet.backends.descriptor import Backend
from rkdet.errors import InputError
from rkdet.onboard.backend_table import BACKENDS as BOARD_BACKENDS
from rkdet.onboard.backend_table import DEFAULT_BACKEND

REGISTRY: dict[str, Backend] = {b.name: b for b in (
    rknnlite_npu.BACKEND,
    onnxruntime_cpu.BACKEND,
    rknn_c.BACKEND,
)}
assert tuple(REGISTRY) == BOARD_BACKENDS, "every board backend has one descriptor, in the table's order"


def backend(name: str) -> Backend:
    """The descriptor of backend `name`; InputError (exit 2) naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise InputError(f"--backend {name!r}: expected {' or '.join(REGISTRY)}") from None


def default() -> Backend:
    """The backend a run uses when none is named (the NPU's)."""
    return REGISTRY[DEFAULT_BACKEND]


__all__ = ["REGISTRY", "backend", "default"]
