"""Fixtures for the `rkdet layers` tests: tiny models and image folders (helpers shared with tests/convert)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "convert"))
sys.path.insert(0, str(HERE.parent / "deploy"))  # deploy_helpers: the emulated board's sessions and tree (board bisection tests)
