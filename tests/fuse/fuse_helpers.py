"""Client helpers for the FUSE board tests: every call is a subprocess with a timeout.

A hung FUSE daemon would hang an in-process open(); a child process can be abandoned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rkdet.emulator.mount import fuse_unavailable_reason

CLIENT_TIMEOUT_S = 10
NPU = "sys/class/devfreq/fdab0000.npu"
GPU = "sys/class/devfreq/fb000000.gpu"
POLICY0 = "sys/devices/system/cpu/cpufreq/policy0"

# A tiny file client run in a child process: ops in, one JSON result per op out (errno by name).
_CLIENT = r"""
import errno, json, os, sys
root, ops = sys.argv[1], json.loads(sys.argv[2])
out = []
for op in ops:
    kind, rel = op[0], os.path.join(root, op[1])
    try:
        if kind == "read":
            with open(rel, "rb") as f:
                out.append({"ok": f.read().decode("latin-1")})
        elif kind == "write":
            fd = os.open(rel, os.O_WRONLY)
            try:
                for chunk in op[2:]:
                    os.write(fd, chunk.encode())
            finally:
                os.close(fd)
            out.append({"ok": None})
        elif kind == "open_w":
            os.close(os.open(rel, os.O_WRONLY))
            out.append({"ok": None})
        elif kind == "create":
            os.close(os.open(rel, os.O_WRONLY | os.O_CREAT, 0o644))
            out.append({"ok": None})
        elif kind == "unlink":
            os.unlink(rel); out.append({"ok": None})
        elif kind == "mkdir":
            os.mkdir(rel); out.append({"ok": None})
        elif kind == "listdir":
            out.append({"ok": sorted(os.listdir(rel))})
        elif kind == "readlink":
            out.append({"ok": os.readlink(rel)})
        elif kind == "exists":
            out.append({"ok": os.path.exists(rel)})
        elif kind == "mode":
            out.append({"ok": os.lstat(rel).st_mode & 0o7777})
    except OSError as err:
        out.append({"errno": errno.errorcode.get(err.errno, str(err.errno))})
print(json.dumps(out))
"""


def require_fuse() -> None:
    """Skip (or, under CI=true, fail) when FUSE cannot be mounted here."""
    reason = fuse_unavailable_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but FUSE is unavailable: {reason}")
        pytest.skip(f"FUSE unavailable: {reason}")


def ops(root: Path, *operations: tuple) -> list[dict]:
    """Run file operations in a child process (timeout); each result is {"ok": ...} or {"errno": "EINVAL"}."""
    done = subprocess.run([sys.executable, "-I", "-S", "-c", _CLIENT, str(root), json.dumps(operations)],
                          capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=True)
    return json.loads(done.stdout)


def read(root: Path, rel: str) -> str:
    """The text of one file, read in a child process."""
    result = ops(root, ("read", rel))[0]
    assert "ok" in result, f"reading {rel}: {result}"
    return result["ok"]


def sh(script: str, root: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a dash script with RKDET_ROOT=root and a timeout; R is the root in the script."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RKDET_ROOT": str(root), "R": str(root),
                **(env or {})}
    return subprocess.run(["dash", "-c", script], capture_output=True, text=True, env=full_env,
                          timeout=CLIENT_TIMEOUT_S)


def digest(root: Path) -> dict[str, str]:
    """`tree_digest` of a root, computed in a child process (timeout)."""
    code = "import json,sys; from rkdet.emulator.fake_tree import tree_digest; print(json.dumps(tree_digest(sys.argv[1])))"
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True,
                          timeout=CLIENT_TIMEOUT_S * 3, check=True)
    return json.loads(done.stdout)


