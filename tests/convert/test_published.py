"""A published build folder names no workstation paths or user: toolchain by version, paths relative to
the build folder or placeholders (issue 9 item 10, manifest part). Checked on the shared default build."""

from __future__ import annotations

import getpass
import json
import os
import re
import sys
import tempfile

import pytest

from convert_helpers import REPO

pytestmark = pytest.mark.slow


def _needles() -> dict[str, str]:
    found = {
        "home dir": os.path.expanduser("~"),
        "venv path": sys.prefix,
        "venv real path": os.path.realpath(sys.prefix),
        "repo venv": str(REPO / ".venv"),
        "python executable": sys.executable,
        "tmp dir": tempfile.gettempdir().rstrip("/") + "/",
        "uid in the hermetic folder": f"rkdet-hermetic-{os.getuid()}",
        "repo checkout": str(REPO),
    }
    return {k: v for k, v in found.items() if v and v not in ("/", "")}


def test_published_files_hold_no_machine_paths_or_user(default_build):
    files = [p for p in default_build.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".log", ".yaml")]
    assert {"manifest.json", "fidelity.json", "config.resolved.json", "toolkit.log", "run.json"} <= {p.name for p in files}
    user = re.compile(rf"(?<![\w<-]){re.escape(getpass.getuser())}(?![\w>-])")
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for what, needle in _needles().items():
            assert needle not in text, f"{path.relative_to(default_build)} holds the {what} ({needle})"
        assert not user.search(text), f"{path.relative_to(default_build)} names the user {getpass.getuser()!r}"


def test_manifest_records_toolchain_by_version_and_environment_with_placeholders(default_build):
    manifest = json.loads((default_build / "manifest.json").read_text())
    assert manifest["model_identity"]["toolkit"] == {"name": "rknn-toolkit2", "version": "2.5.0"}
    assert manifest["environment"]["libraries"]["rknn-toolkit2"] == "2.5.0"
    env = manifest["environment"]["hermetic"]
    assert env["cwd"] == "<work>" and env["env"]["HOME"] == "<work>/home"
    assert env["env"]["PATH"].startswith("<toolkit-python>:") and env["env"]["PYTHONHASHSEED"] == "0"
    resolved = json.loads((default_build / "config.resolved.json").read_text())
    assert resolved["model"]["onnx"] == "yolov8n-doclaynet.onnx"
    assert resolved["quantize"]["dataset"] == "calibration" and resolved["golden"]["inputs"] == "golden"
    assert "<venv>" in (default_build / "toolkit.log").read_text()  # the toolkit's warnings name its files
