"""A small serving app using rkdet's audited runtime (docs/AUDIT.md): the one changed import is marked.

On a board it serves the .rknn with rknn-toolkit-lite2. Without a board (`--emulated`) it serves a
tiny two-layer numpy classifier, `EmulatedTinyRuntime`, a test double named as such: real
computation, labelled with the backend that made it, never an NPU result.

    python3 audit_serving_app.py --log DIR [--prom DIR] [--count N] [--emulated] [--shadow]
"""

import argparse
import hashlib
import os
import sys

import numpy as np

sys.path.insert(0, os.environ.get("RKDET_ONBOARD_PATH", ""))  # where rkdet's board-side package lies
from rkdet.onboard.audit import AuditSettings, RKNNLite  # was: from rknnlite.api import RKNNLite  # noqa: E402
from rkdet.onboard.audit_watch import Canary, Shadow  # noqa: E402

BACKEND = "emulated-numpy"  # what made the outputs when --emulated


class EmulatedTinyRuntime(object):
    """lite2's calling convention over a tiny fixed numpy MLP (8 -> 16 -> 4), float32, deterministic."""

    def __init__(self, perturb=0.0, drift_after=None, drift_on=None):
        rng = np.random.RandomState(0)
        self.w1 = rng.standard_normal((8, 16)).astype(np.float32)
        self.w2 = rng.standard_normal((16, 4)).astype(np.float32)
        if perturb:  # a candidate build: the same weights, slightly requantized
            self.w2 = (self.w2 + np.float32(perturb) * np.sign(self.w2)).astype(np.float32)
        self.calls = 0
        self.drift_after = drift_after  # a planted fault: after this many calls, outputs change
        self.drift_on = drift_on  # only for this input's hash (None: every input)

    def load_rknn(self, path):
        return 0

    def init_runtime(self, **kwargs):
        return 0

    def inference(self, inputs=None, **kwargs):
        self.calls += 1
        x = np.asarray(inputs[0], dtype=np.float32).reshape(1, 8)
        y = np.maximum(x @ self.w1, 0) @ self.w2
        if self.drift_after is not None and self.calls > self.drift_after:
            if self.drift_on is None or hashlib.sha256(x.tobytes()).hexdigest() == self.drift_on:
                y = y.copy()
                y[0, 0] += np.float32(1e-3)
        return [y.astype(np.float32)]

    def release(self):
        pass


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--prom")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--model", default="model.rknn")
    ap.add_argument("--build", help="the build fingerprint (default: the one the .rknn carries)")
    ap.add_argument("--emulated", action="store_true")
    ap.add_argument("--shadow", type=float, default=None, metavar="PERTURB",
                    help="emulated: a candidate whose weights move by PERTURB (0: the same build)")
    ap.add_argument("--canary-every", type=int, default=500)
    ap.add_argument("--max-file-bytes", type=int, default=1 << 20)
    ap.add_argument("--background", action="store_true",
                    help="hash and append on the recorder thread (right for NPU inference times; the tiny "
                         "emulated model outruns it and the full queue drops records, declared in the log)")
    args = ap.parse_args(argv)
    rng = np.random.RandomState(1)
    golden = [[rng.standard_normal((1, 8)).astype(np.float32)] for _ in range(3)]
    shadow = None
    if args.shadow is not None:
        shadow = Shadow(EmulatedTinyRuntime(perturb=args.shadow), sample_every=10, report_every=50, build="f" * 64)
    settings = AuditSettings(args.log, prom_dir=args.prom, max_file_bytes=args.max_file_bytes,
                             canary=Canary(golden, every_n=args.canary_every), shadow=shadow, build=args.build,
                             background=args.background)
    runtime = EmulatedTinyRuntime() if args.emulated else None
    lite = RKNNLite(audit=settings, runtime=runtime)
    lite.load_rknn(args.model)
    lite.init_runtime(core_mask=None if args.emulated else RKNNLite.NPU_CORE_0)
    served = 0
    for _ in range(args.count):
        x = rng.standard_normal((1, 8)).astype(np.float32)
        outputs = lite.inference(inputs=[x])
        served += int(np.argmax(outputs[0]) >= 0)
    lite.release()
    print("served %d inferences (%s)" % (served, BACKEND if args.emulated else "rknnlite"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
