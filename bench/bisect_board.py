#!/usr/bin/env python3
"""Bench: one board bisection (`rkdet layers BUILD --board H`) on the default model, side by side with one
`rkdet convert` of that model in the same run, and a second bisection of the same build (cut cache).

The board is the rkdet emulator with a fault at a tensor in the middle of the graph (TEST CONTROL
RKDET_EMU_FAULT_TENSOR), so the bisection has something to find; the verdict (exit 1, the tensor it
names) is checked. Reported: board runs, cut builds against the bound ceil(log2(layers)) + 2, wall, CPU
and peak RSS (bench/convert.py's `measure`, one definition).

Usage: .venv/bin/python bench/bisect_board.py [--config configs/yolov8.yaml] [--fault NAME]
       [--out bench/results/layers.md]  (appends its section)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))
from convert import measure  # noqa: E402  (bench/convert.py: the one whole-process measurement)

RKDET = [sys.executable, "-m", "rkdet.cli"]


def _ok_0_or_1(argv: list[str]) -> list[str]:
    return ["sh", "-c", '"$@"; rc=$?; [ "$rc" -le 1 ]', "sh", *argv]


def main() -> int:
    from rkdet.bisection.plan import cut_points, max_cut_builds
    from rkdet.emulator.sshd import EmulatedBoard

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "yolov8.yaml")
    ap.add_argument("--fault", default=None, help="tensor to fault (default: the middle cut point)")
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "layers.md")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rkdet-bench-bisect-") as tmp:
        t = Path(tmp)
        conv = measure([*RKDET, "convert", "--config", str(args.config.resolve()), "--out", str(t / "build")])
        build = next((t / "build").iterdir())
        points = cut_points((build / "model.onnx").read_bytes())
        fault = args.fault or points[len(points) // 2].tensors[0]
        rows = []
        with EmulatedBoard("rk3588", t / "board", env={"RKDET_EMU_FAULT_TENSOR": fault}) as board:
            conn = ["--board", board.target, "--user", board.user, "--identity", str(board.identity_file),
                    "--known-hosts", str(board.known_hosts_file), "--ssh-config", "/dev/null"]
            for label in ("first bisection (cut builds)", "second bisection (cut cache)"):
                out = t / label.split()[0]
                out.mkdir()
                s = measure(_ok_0_or_1([*RKDET, "layers", str(build), "--config", str(args.config.resolve()), *conn,
                                        "--cache", str(t / "cache"), "--out", str(out), "--json"]))
                doc = json.loads(s.stdout)
                assert doc["first_departing"]["tensors"] == [fault], doc["first_departing"]
                rows.append((label, s, doc))
    lines = [
        "",
        "## Board bisection (`rkdet layers BUILD --board H`) vs one `rkdet convert` (default model)",
        "",
        f"`bench/bisect_board.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; load average {load0:.1f} before / {os.getloadavg()[0]:.1f} after (shared machine); "
        f"bench took {(time.monotonic() - began) / 60:.1f} min. Emulated RK3588 board (CPU runtime, against its "
        f"reference: the FP32 ONNX cuts), fault at `{fault}` (cut point {len(points) // 2} of {len(points)}); "
        f"bound ceil(log2({len(points)})) + 2 = {max_cut_builds(len(points))} cut builds.",
        "",
        "| side | board runs | cut builds | from cache | named | wall s | CPU s | tree peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
        f"| rkdet convert | – | – | – | – | {conv.wall_s:.1f} | {conv.cpu_s:.1f} | {conv.tree_peak_mb:.0f} |",
    ]
    for label, s, doc in rows:
        lines.append(f"| {label} | {doc['board_runs']} | {doc['cut_builds']} | {doc['cut_cache_hits']} | "
                     f"`{', '.join(doc['first_departing']['tensors'])}` | {s.wall_s:.1f} | {s.cpu_s:.1f} | "
                     f"{s.tree_peak_mb:.0f} |")
    first = rows[0][2]
    lines += ["", f"**Cut builds {first['cut_builds']} <= bound {first['cut_build_bound']}: "
              f"{'met' if first['cut_builds'] <= first['cut_build_bound'] else 'NOT met'}.** "
              f"Wall ratio first bisection / convert: {rows[0][1].wall_s / conv.wall_s:.2f}.", ""]
    with args.out.open("a") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
