#!/usr/bin/env python3
"""Bench: wall time of the board scripts under their three peer shells, side by side.

dash (Debian's /bin/sh), busybox sh (most board images) and bash --posix run the same scripts on
the same fake board, in interleaved rounds (dash, busybox, bash, dash, ...) so the machine's load
hits all alike. Per SoC and shell: probe, pin, restore, and run-pinned around `true` (the whole
cost deploy adds to one run). Medians and spread (min..max) over the rounds.

Usage: .venv/bin/python bench/board_scripts.py [--rounds 7] [--out bench/results/board_scripts.md]
Plain fake trees only (no FUSE needed); never touches this machine's /sys or /proc.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rkdet.emulator.fake_tree import build_fake_tree, tree_digest  # noqa: E402
from rkdet.boardinfo.scripts import local_command, script_env  # noqa: E402
from rkdet.emulator.socs import PROFILES  # noqa: E402

SHELLS = ("dash", "busybox sh", "bash --posix")
STEPS = (("probe", ()), ("pin", ()), ("restore", ()), ("run-pinned", ("true",)))


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode().strip()}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "board_scripts.md")
    opts = ap.parse_args()
    times: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="rkdet-bench-") as tmp:
        for soc, prof in sorted(PROFILES.items()):
            root = build_fake_tree(prof, Path(tmp) / soc)
            before = tree_digest(root)
            env = script_env(root, Path(tmp) / f"state-{soc}")
            for _ in range(opts.rounds):
                for shell in SHELLS:
                    for step, args in STEPS:
                        key = (soc, shell, step)
                        times.setdefault(key, []).append(timed(local_command(step, shell, args), env))
            if tree_digest(root) != before:
                raise SystemExit(f"{soc}: tree not byte-identical after the rounds")
    load = os.getloadavg()[0]
    lines = [
        "# Board scripts: wall time per shell (plain fake tree)",
        "",
        f"`bench/board_scripts.py --rounds {opts.rounds}` on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {load:.1f} at the end; "
        "interleaved rounds, median ms (min..max). Each tree checked byte-identical after all rounds.",
        "",
        "| SoC | shell | probe | pin | restore | run-pinned `true` |",
        "|---|---|---|---|---|---|",
    ]
    for soc in sorted(PROFILES):
        for shell in SHELLS:
            cells = []
            for step, _ in STEPS:
                vals = [v * 1000 for v in times[(soc, shell, step)]]
                cells.append(f"{statistics.median(vals):.0f} ({min(vals):.0f}..{max(vals):.0f})")
            lines.append(f"| {soc} | {shell} | " + " | ".join(cells) + " |")
    lines += ["", "Peers: dash, busybox sh and bash --posix run identical scripts; the spread between them is "
              "the shells' own cost (fork/exec and builtins), the scripts do the same work.", ""]
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = opts.out.with_suffix(".md.tmp")
    tmp_out.write_text("\n".join(lines))
    tmp_out.replace(opts.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
