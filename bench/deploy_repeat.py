#!/usr/bin/env python3
"""Bench: a first deploy of a build vs a repeat deploy of the same, unchanged build.

Why: the push is verified by sha256 and skips files the board already has, so deploying the same
build again (the everyday loop: deploy, look, deploy again) should send nothing and cost only the
hashing round trip. Both are measured side by side in the same run, in interleaved rounds
(first, repeat, first, repeat, ...) against one emulated RK3588 board (real OpenSSH sshd on
127.0.0.1, the real `rkdet deploy` CLI), so drift and neighbours' load hit both alike. A "first"
deploy gets a work dir of its own (nothing on the board yet); its "repeat" reuses that work dir.

Reported per kind: bytes and files sent/skipped, push seconds (deploy.json transfer.seconds:
scripts + runner + model + inputs), and the whole command's wall seconds (connect, preflight, push,
a pinned run of `--repeats 1 --warmup 0` over the build's inputs, pull, diff).

Usage: .venv/bin/python bench/deploy_repeat.py [--build build/yolov8n-doclaynet-rk3588] [--rounds 3]
       [--out bench/results/deploy.md]
Needs root (the emulated board starts sshd and a board user). Without --build and no build folder,
the default config is converted first (into a temp dir).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from rkdet.emulator.sshd import EmulatedBoard  # noqa: E402

DEFAULT_BUILD = REPO / "build" / "yolov8n-doclaynet-rk3588"


def ensure_build(build: Path | None, tmp: Path) -> Path:
    """The build to deploy: the given one, the default build folder, or a fresh conversion."""
    if build is not None:
        return build
    if (DEFAULT_BUILD / "manifest.json").exists() and (DEFAULT_BUILD / "model.io.json").exists():
        return DEFAULT_BUILD
    proc = subprocess.run([sys.executable, "-m", "rkdet.cli", "convert", "--config", str(REPO / "configs/yolov8.yaml"),
                           "--out", str(tmp), "--json"], capture_output=True, text=True, cwd=REPO, check=False)
    if proc.returncode != 0:
        sys.exit(f"convert failed: {proc.stderr.strip().splitlines()[-1:]}")
    return Path(json.loads(proc.stdout)["builds"][0]["folder"])


def deploy_once(board: EmulatedBoard, build: Path, out: Path, workdir: str) -> dict[str, float]:
    """One `rkdet deploy`; its wall seconds and the transfer record of its deploy.json."""
    argv = [sys.executable, "-m", "rkdet.cli", "deploy", "--board", board.target, "--user", board.user,
            "--identity", str(board.identity_file), "--known-hosts", str(board.known_hosts_file),
            "--ssh-config", "/dev/null", "--build", str(build), "--out", str(out), "--workdir", workdir,
            "--repeats", "1", "--warmup", "0"]
    before = set(out.glob("*/*/*/deploy.json"))
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"deploy failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    [record] = [json.loads(p.read_text()) for p in set(out.glob("*/*/*/deploy.json")) - before]
    t = record["transfer"]
    return {"wall": wall, "push": t["seconds"], "bytes": t["bytes_sent"], "sent": t["files_sent"],
            "skipped": t["files_skipped"]}


def summary(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    return f"{fmt.format(med)} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "deploy.md")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: the emulated board starts sshd and creates its login user")
    results: dict[str, list[dict[str, float]]] = {"first": [], "repeat": []}
    with tempfile.TemporaryDirectory(prefix="rkdet-bench-deploy-") as tmp:
        build = ensure_build(args.build, Path(tmp) / "build")
        fingerprint = json.loads((build / "manifest.json").read_text())["fingerprint"][:16]
        with EmulatedBoard("rk3588", Path(tmp) / "board") as board:
            for i in range(args.rounds):
                workdir = f"{board.home}/bench-{i}"  # nothing there yet: a true first deploy
                for kind in ("first", "repeat"):
                    row = deploy_once(board, build, Path(tmp) / "results", workdir)
                    results[kind].append(row)
                    print(f"round {i} {kind:6}: {row['bytes']:>10.0f} B sent in {row['push']:.2f} s, "
                          f"wall {row['wall']:.2f} s", flush=True)
    write_table(args.out, results, build, fingerprint, args.rounds)
    print(f"wrote {args.out}")


def write_table(path: Path, results: dict[str, list[dict[str, float]]], build: Path, fingerprint: str,
                rounds: int) -> None:
    first, repeat = results["first"], results["repeat"]

    def col(rows: list[dict[str, float]], key: str) -> list[float]:
        return [r[key] for r in rows]

    med = statistics.median
    lines = [
        "# Deploy: first vs repeat of an unchanged build",
        "",
        f"`bench/deploy_repeat.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {rounds} interleaved rounds "
        f"(first, repeat, ...) against one emulated RK3588 (OpenSSH sshd on 127.0.0.1, SFTP), build "
        f"`{build.name}` (fingerprint {fingerprint}); each deploy is the real CLI with `--repeats 1 --warmup 0`. "
        f"Host: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end. "
        "Median (min–max).",
        "",
        "| metric | first deploy | repeat deploy | repeat / first |",
        "|---|---|---|---|",
        f"| bytes sent | {summary(col(first, 'bytes'), '{:.0f}')} | {summary(col(repeat, 'bytes'), '{:.0f}')} | "
        f"{med(col(repeat, 'bytes')) / max(med(col(first, 'bytes')), 1):.4f} |",
        f"| files sent / skipped | {med(col(first, 'sent')):.0f} / {med(col(first, 'skipped')):.0f} | "
        f"{med(col(repeat, 'sent')):.0f} / {med(col(repeat, 'skipped')):.0f} | |",
        f"| push seconds (hash check + upload + verify) | {summary(col(first, 'push'), '{:.2f}')} | "
        f"{summary(col(repeat, 'push'), '{:.2f}')} | {med(col(repeat, 'push')) / med(col(first, 'push')):.2f} |",
        f"| whole deploy, wall seconds | {summary(col(first, 'wall'), '{:.2f}')} | "
        f"{summary(col(repeat, 'wall'), '{:.2f}')} | {med(col(repeat, 'wall')) / med(col(first, 'wall')):.2f} |",
        "",
        "Reading: a repeat deploy sends no model or input bytes (each file's sha256 is compared on the board "
        "first); what remains of its push time is hashing the files on both sides. The rest of the wall time "
        "(connect, probe, the pinned run, pull, diff) is the same for both kinds.",
        "",
    ]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
