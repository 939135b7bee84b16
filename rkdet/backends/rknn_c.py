"""rknn_c: rkdet-run-c, rkdet's C runner on Rockchip's C API (librknnrt), built against the user's SDK.

Why a backend of its own: what ships on most boards is the C API, not lite2, and the two differ
(output dequantisation, input layout, ops; docs/RUNNER_C.md). Its runner is a native program that
`rkdet runner build --sdk DIR` compiles per board architecture (rkdet.backends.capi_build); deploy
pushes it in place of the on-board zipapp, after preflight compared the runtime its header belongs to
with the board's (capi_build.check_board_runtime). It is judged like lite2: by the toolkit's simulator.
The rkdet emulator has a test double of its runtime (emulator/capi_double: the board's launcher runs the
runner under qemu-user over it, with the emulated board's numbers).
"""

from __future__ import annotations

from rkdet.backends.descriptor import ROW_NPU_STACK, Backend
from rkdet.onboard.backend_table import RKNN_C

RUNNER_PROGRAM = "rkdet-run-c"

BACKEND = Backend(RKNN_C, preflight_rows=(ROW_NPU_STACK,),
                  probe_facts=("soc", "runtime_version", "runtime_library", "rknpu_version"),
                  emulated_double=True, embeds_fingerprint=True,
                  runner_program=RUNNER_PROGRAM, native_runner=True, one_mask_per_run=True,
                  # what an application chooses, and lite2 chooses for you (docs/RUNNER_C.md)
                  runner_settings={"want_float": ("--want-float", ("1", "0")),
                                   "pass_through": ("--pass-through", ("0", "1")),
                                   "input_fmt": ("--input-fmt", ("model", "nchw", "nhwc"))})
