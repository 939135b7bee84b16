"""Run a command as the only child of a child subreaper and report which of ITS descendants outlived it.

Why: "no toolkit worker is left" must look at the processes this test started, never at every
process on the machine by name (`pgrep -f toolkit2_worker.py` also counts other people's converts).
A wrapper process sets PR_SET_CHILD_SUBREAPER, so descendants orphaned by the command are
reparented to it, not to init; after the command exits it waits up to `grace` seconds, writes the
survivors' command lines as JSON to the report file, kills them and exits with the command's code.
The wrapper ignores SIGINT (a test's Ctrl-C to the process group is for the command).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

_WRAPPER = r"""
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
signal.signal(signal.SIGINT, signal.SIG_IGN)
report, grace, argv = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
proc = subprocess.Popen(argv, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
rc = proc.wait()

def survivors():
    while True:  # reap orphans that already exited
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return []
        if pid == 0:
            break
    kids = []
    for task in os.listdir("/proc/self/task"):
        try:
            kids += open("/proc/self/task/%s/children" % task).read().split()
        except OSError:
            pass
    return kids

deadline = time.monotonic() + grace
left = survivors()
while left and time.monotonic() < deadline:
    time.sleep(0.05)
    left = survivors()
lines = []
for pid in left:
    try:
        lines.append(open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\0", b" ").decode(errors="replace").strip())
        os.kill(int(pid), signal.SIGKILL)
    except OSError:
        pass
with open(report, "w") as f:
    json.dump(lines, f)
for _ in left:
    try:
        os.wait()
    except ChildProcessError:
        break
sys.exit(rc if rc >= 0 else 128 - rc)
"""


def tree_argv(argv: list[str], report: Path, grace: float = 2.0) -> list[str]:
    """`argv` wrapped: the report file gets the command lines of descendants that outlived it."""
    return [sys.executable, "-c", _WRAPPER, str(report), str(grace), *argv]


def leftovers(report: Path) -> list[str]:
    """Command lines of the wrapped command's descendants that outlived it (read once, then removed)."""
    lines = json.loads(report.read_text())
    report.unlink()
    return lines
