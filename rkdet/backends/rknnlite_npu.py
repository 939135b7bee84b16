"""rknnlite: rknn-toolkit-lite2 (or the legacy v1 Lite) on the board's NPU, judged by the toolkit's simulator."""

from __future__ import annotations

from rkdet.backends.descriptor import ROW_LEGACY_NPU, ROW_NPU_STACK, ROW_RUNTIME_IMPORT, Backend
from rkdet.onboard.backend_table import RKNNLITE

BACKEND = Backend(RKNNLITE, preflight_rows=(ROW_LEGACY_NPU, ROW_NPU_STACK, ROW_RUNTIME_IMPORT),
                  probe_facts=("soc", "runtime_version", "runtime_library", "rknpu_version", "rknnlite"),
                  emulated_double=True, embeds_fingerprint=True)
