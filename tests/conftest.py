"""Root test configuration: shared fixtures (see tests/shared_build.py) and suite-wide guards
(tests/host_guard.py: this machine's real kernel knobs, read only, per module and per session)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ("shared_build", "host_guard")


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
