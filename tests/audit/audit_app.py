"""The shipped example serving app (docs/examples/audit_serving_app.py), loaded once for the audit tests:
its emulated runtime (a tiny numpy model, named as such) is what they serve with."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "docs" / "examples" / "audit_serving_app.py"
BUILD = "b" * 64  # the build fingerprint the tests' logs claim


def _load():
    spec = importlib.util.spec_from_file_location("audit_serving_app", APP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


APP_MODULE = _load()
