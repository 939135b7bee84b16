#!/usr/bin/env python3
"""Bench: what `rkdet-selfcheck` costs compared with one plain inference loop over the same inputs.

Peer: what any serving app pays to look at those inputs at all: open the same onnxruntime session
(rkdet.onboard.backends.OnnxRuntimeBackend: 1 intra-op thread, ORT_SEQUENTIAL, graph optimization extended) on the
same model and run each bundled input once (inputs already in memory, outputs not looked at).
Contender: `rkdet.onboard.selfcheck.check(model, bundle, backend="onnxruntime")` end to end: read and validate
the bundle, sha256 the model, decode the inputs, open the session, infer, hash every output and compare.
Both run in this process, in interleaved blocks (A, B, B, A, ...), so load from neighbours hits both.
The onnxruntime backend on this host stands in for the board's runtime (the check's own work, which
is what is measured, does not depend on the runtime).

Target: check / loop <= 1.2 (median of the paired block ratios; spread reported).

Usage: .venv/bin/python bench/selfcheck.py --build BUILD_DIR [--blocks 7] [--out bench/results/selfcheck.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from rkdet.onboard import backends as runner  # noqa: E402
from rkdet.onboard import bundle as bundle_format  # noqa: E402
from rkdet.onboard import reference, selfcheck  # noqa: E402
from rkdet.onboard.hashing import file_sha256  # noqa: E402


def plain_loop(model: str, feeds: list) -> tuple[float, float]:
    """(wall, process CPU) seconds: open the session, run every input once."""
    start, cpu = time.perf_counter(), time.process_time()
    backend = runner.OnnxRuntimeBackend(model)
    for feed in feeds:
        backend.infer([feed])
    backend.close()
    return time.perf_counter() - start, time.process_time() - cpu


def the_check(model: str, bundle: str) -> tuple[float, float]:
    """(wall, process CPU) seconds of one self-check, end to end."""
    start, cpu = time.perf_counter(), time.process_time()
    result = selfcheck.check(model, bundle, backend="onnxruntime")
    elapsed = time.perf_counter() - start, time.process_time() - cpu
    if not result.ok:
        sys.exit(f"bench: the self-check did not pass: {result.line}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True, type=Path)
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "selfcheck.md")
    args = ap.parse_args()
    bundle = args.build / bundle_format.BUNDLE_FILE
    model = str(args.build / "model.onnx")
    spec = bundle_format.Bundle(str(bundle))
    feeds = [reference.fp32_input(bundle_format.decode_array(e["tensor"], e["name"]), spec.mean, spec.std)
             for e in spec.inputs]
    plain_loop(model, feeds), the_check(model, str(bundle))  # warm caches (files, imports) for both sides
    checks, loops, ratios, cpu_ratios = [], [], [], []
    load_start = os.getloadavg()[0]
    for block in range(args.blocks):
        if block % 2 == 0:
            check, loop = the_check(model, str(bundle)), plain_loop(model, feeds)
        else:
            loop = plain_loop(model, feeds)
            check = the_check(model, str(bundle))
        checks.append(check[0])
        loops.append(loop[0])
        ratios.append(check[0] / loop[0])
        cpu_ratios.append(check[1] / loop[1])
    load_end = os.getloadavg()[0]
    size = bundle.stat().st_size
    parse = time.perf_counter()
    bundle_format.Bundle(str(bundle))
    parse = time.perf_counter() - parse
    sha = time.perf_counter()
    file_sha256(model)
    sha = time.perf_counter() - sha
    med = statistics.median(ratios)
    lines = [
        "# rkdet-selfcheck: time and size (written by `bench/selfcheck.py`)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load_start:.1f} -> {load_end:.1f} (shared with other work); "
        f"build `{args.build.name}` (the default model, 640x640, 6 outputs); runtime: onnxruntime on this host.",
        "",
        f"- **Bundle**: `selfcheck.json` {size / 1e6:.2f} MB ({size} bytes), {len(spec.inputs)} of the build's "
        f"golden inputs under the default 8 MiB cap, expected outputs for both references (simulator, onnx-fp32).",
        f"- **Check vs plain loop: median ratio {med:.3f}** over {args.blocks} interleaved blocks "
        f"(spread {min(ratios):.3f} .. {max(ratios):.3f}); target <= 1.2: **{'met' if med <= 1.2 else 'NOT met'}** "
        "on wall time.",
        f"- **Process CPU time, check vs plain loop: median ratio {statistics.median(cpu_ratios):.3f}** (spread "
        f"{min(cpu_ratios):.3f} .. {max(cpu_ratios):.3f}): less sensitive to neighbours' load than wall time "
        "(it counts the check's sha256 thread too).",
        f"- Check end to end: median {statistics.median(checks) * 1000:.0f} ms ({min(checks) * 1000:.0f} .. "
        f"{max(checks) * 1000:.0f}); plain loop (session open + {len(feeds)} inferences): median "
        f"{statistics.median(loops) * 1000:.0f} ms ({min(loops) * 1000:.0f} .. {max(loops) * 1000:.0f}).",
        f"- Where the difference goes (one measurement each): reading and validating the bundle {parse * 1000:.0f} ms, "
        f"sha256 of the {Path(model).stat().st_size / 1e6:.1f} MB model {sha * 1000:.0f} ms; the rest is decoding the "
        "inputs and hashing the outputs (expected outputs are only inflated when a hash differs).",
        "",
        "| block | check wall (ms) | plain loop wall (ms) | wall ratio | CPU ratio |",
        "|---|---|---|---|---|",
        *[f"| {i} | {c * 1000:.0f} | {lp * 1000:.0f} | {r:.3f} | {cr:.3f} |"
          for i, (c, lp, r, cr) in enumerate(zip(checks, loops, ratios, cpu_ratios))],
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
