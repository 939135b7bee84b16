"""Root test configuration: shared fixtures (see tests/shared_build.py) and suite-wide guards
(tests/host_guard.py: this machine's real kernel knobs, read only, per module and per session)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ("shared_build", "host_guard")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker's toolkit builds run on a CPU of their own (`RKDET_BUILD_CPU`, round
    robin over this machine's CPUs): by default every build is pinned to the lowest CPU, so the builds of
    four workers would queue on one core while the other waits (measured: 1 to 4 builds on CPU 0 for
    most of a run). Which CPU builds does not change a build; a test that sets the variable itself wins."""
    from rkdet.convert.hermetic import BUILD_CPU_VAR

    # TEST CONTROL for the suite's emulated boards: the runtime double computes the FP32 ONNX, as the deploy,
    # fleet and self-check tests written before the INT8 emulation expect (bitwise against golden/onnx-fp32).
    # The emulated board's own default is the build's INT8 emulation (docs/EMULATOR.md); the tests of it
    # (tests/runner/test_double_int8emu.py, tests/layers/test_board_bisection.py, the demo) ask for "int8".
    os.environ.setdefault("RKDET_EMU_COMPUTE", "fp32")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit() and BUILD_CPU_VAR not in os.environ:
        allowed = sorted(os.sched_getaffinity(0))
        os.environ[BUILD_CPU_VAR] = str(allowed[int(worker[2:]) % len(allowed)])


@pytest.fixture(scope="session", autouse=True)
def private_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """What rkdet keeps per user (deploy's private resume records in $XDG_STATE_HOME, bisection's cut
    cache in $XDG_CACHE_HOME) goes to temp dirs for the whole suite, never the host user's home."""
    state, cache = tmp_path_factory.mktemp("xdg-state"), tmp_path_factory.mktemp("xdg-cache")
    old = {k: os.environ.get(k) for k in ("XDG_STATE_HOME", "XDG_CACHE_HOME")}
    os.environ["XDG_STATE_HOME"], os.environ["XDG_CACHE_HOME"] = str(state), str(cache)
    yield state
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
