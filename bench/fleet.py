#!/usr/bin/env python3
"""Bench: `rkdet fleet deploy` to 1, 4 and 16 emulated boards, against the floor of the work itself.

Why this floor: N boards on one host cannot finish before one board alone does, nor before the
CPU seconds the whole job burns (rkdet on the host plus every emulated board's sshd sessions and
runner, all on this host) fit on its cores. So `floor = max(one board's wall, total CPU s / cores)`,
and the fleet's overhead is its wall over that floor (target: 16 boards <= 1.25x, rkdet's peak RSS
<= 300 MB).

How it is measured: the real CLI (`rkdet fleet deploy --inventory … --repeats 1 --warmup 0
--canary 0 --forks N`) in a subprocess; its CPU and peak RSS from wait4's rusage (ru_maxrss). The
boards' CPU: each board's sshd daemon's reaped children (every SSH session: probe, push, polls,
pull) from /proc (psutil: children_user + children_system, delta over the run), plus the detached
run jobs (run-pinned.sh, the runner on the emulated runtime) — orphans once their session ends, so
never reaped by sshd — sampled every 0.1 s while they live (their own user+system time; a job's
last <0.1 s can be missed). Other load on the host is not counted but slows everything: the load
average is reported with each row.

Usage: .venv/bin/python bench/fleet.py [--build build/yolov8n-doclaynet-rk3588] [--sizes 1,4,16]
       [--out bench/results/fleet.md]
Needs root (emulated boards start sshd and a board user). Without --build and no default build
folder, the default config is converted first (into a temp dir).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from rkdet.emulator.sshd import EmulatedBoard  # noqa: E402

DEFAULT_BUILD = REPO / "build" / "yolov8n-doclaynet-rk3588"


def ensure_build(build: Path | None, tmp: Path) -> Path:
    if build is not None:
        return build
    if (DEFAULT_BUILD / "manifest.json").exists():
        return DEFAULT_BUILD
    proc = subprocess.run([sys.executable, "-m", "rkdet.cli", "convert", "--config", str(REPO / "configs/yolov8.yaml"),
                           "--out", str(tmp), "--json"], capture_output=True, text=True, cwd=REPO, check=False)
    if proc.returncode != 0:
        sys.exit(f"convert failed: {proc.stderr.strip().splitlines()[-1:]}")
    return Path(json.loads(proc.stdout)["builds"][0]["folder"])


class BoardCpu:
    """CPU seconds of the emulated boards: sshd daemons' reaped sessions + detached jobs, sampled."""

    def __init__(self, boards: list[EmulatedBoard]) -> None:
        self.daemons = [psutil.Process(b._proc.pid) for b in boards]  # noqa: SLF001 - the bench reads the pid only
        self.daemon_pids = {p.pid for p in self.daemons}
        self.markers = {f"RKDET_ROOT={b.root}" for b in boards}
        self.jobs: dict[tuple[int, float], float] = {}  # (pid, create_time) -> max own cpu seen
        self._stop = threading.Event()
        self._start = self._daemon_children()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _daemon_children(self) -> float:
        total = 0.0
        for p in self.daemons:
            t = p.cpu_times()
            total += t.children_user + t.children_system
        return total

    def _sample(self) -> None:
        while not self._stop.is_set():
            for p in psutil.process_iter(["pid", "name", "create_time"]):
                try:
                    if p.info["name"] == "sshd" or p.pid == os.getpid():
                        continue
                    env = p.environ()
                    if not any(f"{k}={v}" in self.markers for k, v in env.items() if k == "RKDET_ROOT"):
                        continue
                    if any(a.pid in self.daemon_pids for a in p.parents()):
                        continue  # still in an SSH session: counted when sshd reaps it
                    t = p.cpu_times()
                    key = (p.pid, p.info["create_time"])
                    self.jobs[key] = max(self.jobs.get(key, 0.0), t.user + t.system)
                except (psutil.Error, OSError):
                    continue
            self._stop.wait(0.1)

    def __enter__(self) -> BoardCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def seconds(self) -> float:
        return self._daemon_children() - self._start + sum(self.jobs.values())


def host_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole host since boot, from /proc/stat (read only)."""
    fields = [float(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return (sum(fields[:8]) - idle) / hz, sum(fields[:8]) / hz


@dataclass
class Row:
    boards: int
    forks: int
    exit_code: int
    wall: float
    rkdet_cpu: float
    boards_cpu: float
    rkdet_rss_mb: float
    load: float
    cell_seconds_mean: float
    fleet_seconds: float  # fleet.json: boards' work + classes + drift (the rest of wall: start-up, files)
    host_busy: float  # share of the host's CPU time busy during the run (all processes, ours and others')

    @property
    def total_cpu(self) -> float:
        return self.rkdet_cpu + self.boards_cpu


def inventory(boards: list[EmulatedBoard], path: Path) -> Path:
    hosts = {f"b{i:02d}": {"ansible_host": b.host, "ansible_port": b.port, "ansible_user": b.user,
                            "ansible_ssh_private_key_file": str(b.identity_file), "rkdet_soc": b.soc}
             for i, b in enumerate(boards)}
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}, sort_keys=False))
    return path


def run_size(n: int, build: Path, work: Path) -> Row:
    with contextlib.ExitStack() as stack:
        boards = [stack.enter_context(EmulatedBoard("rk3588", work / f"n{n}" / f"b{i:02d}")) for i in range(n)]
        known = work / f"n{n}" / "known_hosts"
        known.write_text("".join(b.known_hosts_file.read_text() for b in boards))
        inv = inventory(boards, work / f"n{n}" / "inventory.yaml")
        out = work / f"n{n}" / "results"
        argv = [sys.executable, "-m", "rkdet.cli", "fleet", "deploy", "--inventory", str(inv), "--known-hosts",
                str(known), "--ssh-config", "/dev/null", "--build", str(build), "--out", str(out), "--repeats", "1",
                "--warmup", "0", "--canary", "0", "--forks", str(n)]
        with BoardCpu(boards) as cpu:
            busy0, total0 = host_cpu()
            started = time.monotonic()
            with open(work / f"n{n}" / "fleet.log", "wb") as log:
                proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ))
                _, status, usage = os.wait4(proc.pid, 0)
            wall = time.monotonic() - started
            busy1, total1 = host_cpu()
            proc.returncode = os.waitstatus_to_exitcode(status)
            time.sleep(0.3)  # the last sessions end and are reaped
        doc = json.loads(next((out / "fleet").glob("*/fleet.json")).read_text())
        cells = [c["seconds"] for b in doc["boards"] for c in b["cells"] if c["status"] == "complete"]
        return Row(n, n, proc.returncode, wall, usage.ru_utime + usage.ru_stime, cpu.seconds, usage.ru_maxrss / 1024,
                   os.getloadavg()[0], sum(cells) / max(1, len(cells)), float(doc["seconds"]),
                   (busy1 - busy0) / max(1e-9, total1 - total0))


def write_table(rows: list[Row], build: Path, path: Path) -> str:
    cores = os.cpu_count() or 1
    one = next((r.wall for r in rows if r.boards == 1), None)
    fp = json.loads((build / "manifest.json").read_text())["fingerprint"][:16]
    inputs = len(list((build / "golden" / "inputs").glob("*.npy")))
    lines = [
        "# Fleet deploy: 1, 4, 16 emulated boards against the floor of the work",
        "",
        f"`bench/fleet.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; build `{build.name}` "
        f"(fingerprint {fp}, {inputs} golden inputs), `rkdet fleet deploy --repeats 1 --warmup 0 --canary 0 "
        f"--forks N`, one cell per board, emulated RK3588 boards (OpenSSH sshd on 127.0.0.1, plain sysfs tree, "
        f"the emulated runtime computing on this host's CPU). Host: {platform.machine()}, {cores} CPUs, shared "
        "with other jobs (load average at the end of each row: 1-minute). Repeats: 1.",
        "",
        "floor = max(one board's wall, total CPU s / cores); total CPU = rkdet's own CPU + the boards' (sshd "
        "sessions and the detached runs). others' CPU s = the host's busy CPU seconds during the row minus "
        "ours: what other jobs on the machine took meanwhile.",
        "",
        "| boards | exit | wall s | rkdet CPU s | boards CPU s | total CPU s | floor s | wall / floor | rkdet peak RSS MB "
        "| fleet s (in run_fleet) | mean cell s | host CPU busy | others' CPU s | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        floor = max(one or r.wall, r.total_cpu / cores)
        lines.append(f"| {r.boards} | {r.exit_code} | {r.wall:.1f} | {r.rkdet_cpu:.1f} | {r.boards_cpu:.1f} | "
                     f"{r.total_cpu:.1f} | {floor:.1f} | {r.wall / floor:.2f} | {r.rkdet_rss_mb:.0f} | "
                     f"{r.fleet_seconds:.1f} | {r.cell_seconds_mean:.1f} | {r.host_busy:.0%} | "
                     f"{max(0.0, r.host_busy * r.wall * cores - r.total_cpu):.1f} | {r.load:.2f} |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, default=None)
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "fleet.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rkdet-bench-fleet-") as tmp:
        os.chmod(tmp, 0o755)
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "xdg")
        build = ensure_build(args.build, Path(tmp) / "build")
        rows = []
        for n in (int(s) for s in args.sizes.split(",")):
            row = run_size(n, build, Path(tmp))
            print(json.dumps(row.__dict__), flush=True)
            rows.append(row)
        print(write_table(rows, build, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
