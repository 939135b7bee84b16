#!/usr/bin/env python3
"""Bench: `rkdet fleet deploy` to 1, 4 and 16 emulated boards, against the floor of the work itself.

Why this floor: N boards on one host cannot finish before one board alone does, nor before the
CPU seconds the whole job burns (rkdet on the host plus every emulated board's sshd sessions and
runner, all on this host) fit on its cores. So `floor = max(one board's wall, total CPU s / cores)`,
and the fleet's overhead is its wall over that floor (target: 16 boards <= 1.25x, rkdet's peak RSS
<= 300 MB).

How it is measured: the real CLI (`rkdet fleet deploy --inventory … --repeats 1 --warmup 0
--canary 0 --forks N`) in a subprocess; its CPU and peak RSS from wait4's rusage (ru_maxrss). Every
other process the run creates is found by process tree, never by name: the bench makes itself a
child subreaper (prctl PR_SET_CHILD_SUBREAPER), so the emulated boards' sshd daemons are its
children, their sessions are reaped by them (children_user/system, read from /proc for the daemon
pids only), and the detached run jobs (run-pinned.sh and the emulated runtime, orphaned when their
session ends) are re-parented to the bench, which reaps them itself with wait4 (exact rusage,
including everything they waited for). Any other child alive across the run (a FUSE sysfs daemon)
is counted by its CPU delta, and the bench process's own CPU delta covers in-process parts.
Other load on the host is not counted but slows everything: the host's busy share and load
average are reported with each row.

Usage: .venv/bin/python bench/fleet.py [--build build/yolov8n-doclaynet-rk3588] [--sizes 1,4,16]
       [--out bench/results/fleet.md]
Needs root (emulated boards start sshd and a board user). Without --build and no default build
folder, the default config is converted first (into a temp dir).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
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


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> None:
    """Orphans of the processes this bench starts are re-parented to it (not to init), so the
    detached run jobs can be found by process tree and reaped with their exact rusage."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")


def own_children() -> set[int]:
    """This process's children (every thread's), from /proc/self/task/*/children."""
    kids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            kids.update(int(p) for p in (task / "children").read_text().split())
    return kids


def _tree_cpu(pid: int) -> float:
    """A live child's own CPU plus its reaped children's (an sshd daemon: every finished session)."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class Accounting:
    """CPU seconds, by component, of everything the row's processes did while the CLI ran."""

    sessions: float = 0.0  # the sshd daemons, every session they reaped (probe, push, polls, pull) and
    # sshd processes orphaned to the bench (privilege-separated connection processes whose parent ended first)
    jobs: float = 0.0  # detached run jobs re-parented to the bench and reaped by it
    job_count: int = 0
    job_kinds: dict[str, int] = field(default_factory=dict)
    helpers: float = 0.0  # any other child alive across the run (a FUSE sysfs daemon)
    bench: float = 0.0  # this process (in-process board parts); idle in wait4 otherwise

    @property
    def boards(self) -> float:
        return self.sessions + self.jobs + self.helpers + self.bench


class RunCpu:
    """Snapshots before the CLI starts; `finish` after it ended reaps the orphaned jobs."""

    def __init__(self, boards: list[EmulatedBoard]) -> None:
        self.daemons = {b._proc.pid for b in boards}  # noqa: SLF001 - the bench reads the pid only
        self.before = own_children()
        self.live0 = {pid: _tree_cpu(pid) for pid in self.before}
        self.self0 = _self_cpu()

    def finish(self, cli_pid: int, wait_s: float = 10.0) -> Accounting:
        acc = Accounting(bench=_self_cpu() - self.self0)
        deadline = time.monotonic() + wait_s
        while True:  # the jobs' shells may exit just after the CLI saw their completion
            orphans = own_children() - self.before - {cli_pid}
            for pid in sorted(orphans):
                with contextlib.suppress(ChildProcessError, OSError):
                    shown = _command(pid)  # for the report only: found by tree, named after
                    got, _, usage = os.wait4(pid, os.WNOHANG)
                    if got == pid:
                        cpu = usage.ru_utime + usage.ru_stime
                        acc.job_kinds[shown] = acc.job_kinds.get(shown, 0) + 1
                        if shown == "sshd":  # a connection's process outlived its parent: a session
                            acc.sessions += cpu
                        else:
                            acc.jobs += cpu
                            acc.job_count += 1
            if not (own_children() - self.before - {cli_pid}) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        while time.monotonic() < deadline and any(_children(pid) for pid in self.daemons):
            time.sleep(0.05)  # the CLI's connections end and their sshd processes are reaped
        for pid, cpu0 in self.live0.items():
            delta = max(0.0, _tree_cpu(pid) - cpu0)
            if pid in self.daemons:
                acc.sessions += delta
            else:
                acc.helpers += delta
        return acc


def _children(pid: int) -> list[str]:
    kids: list[str] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                kids += (task / "children").read_text().split()
    return kids


def _command(pid: int) -> str:
    """A process's name from /proc/<pid>/stat (a zombie has no command line), for the report."""
    stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    return stat[stat.index("(") + 1:stat.rindex(")")]


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system


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
    acc: Accounting
    rkdet_rss_mb: float
    load: float
    cell_seconds_mean: float
    fleet_seconds: float  # fleet.json: boards' work + classes + drift (the rest of wall: start-up, files)
    host_busy: float  # share of the host's CPU time busy during the run (all processes, ours and others')
    load_before: float

    @property
    def boards_cpu(self) -> float:
        return self.acc.boards

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
        cpu = RunCpu(boards)
        load_before = os.getloadavg()[0]
        busy0, total0 = host_cpu()
        started = time.monotonic()
        with open(work / f"n{n}" / "fleet.log", "wb") as log:
            proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ))
            _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        busy1, total1 = host_cpu()
        proc.returncode = os.waitstatus_to_exitcode(status)
        time.sleep(0.3)  # the last sessions end and are reaped
        acc = cpu.finish(proc.pid)
        doc = json.loads(next((out / "fleet").glob("*/fleet.json")).read_text())
        cells = [c["seconds"] for b in doc["boards"] for c in b["cells"] if c["status"] == "complete"]
        return Row(n, n, proc.returncode, wall, usage.ru_utime + usage.ru_stime, acc, usage.ru_maxrss / 1024,
                   os.getloadavg()[0], sum(cells) / max(1, len(cells)), float(doc["seconds"]),
                   (busy1 - busy0) / max(1e-9, total1 - total0), load_before)


def write_table(rows: list[Row], build: Path, path: Path) -> str:
    cores = os.cpu_count() or 1
    one = next((r.wall for r in rows if r.boards == 1), None)
    fp = json.loads((build / "manifest.json").read_text())["fingerprint"][:16]
    inputs = len(list((build / "golden" / "inputs").glob("*.npy")))
    lines = [
        f"# Fleet deploy: {', '.join(str(r.boards) for r in rows)} emulated boards against the floor of the work",
        "",
        f"`bench/fleet.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; build `{build.name}` "
        f"(fingerprint {fp}, {inputs} golden inputs), `rkdet fleet deploy --repeats 1 --warmup 0 --canary 0 "
        f"--forks N`, one cell per board, emulated RK3588 boards (OpenSSH sshd on 127.0.0.1, plain sysfs tree, "
        f"the emulated runtime computing on this host's CPU). Host: {platform.machine()}, {cores} CPUs, shared "
        "with other jobs (load average at the end of each row: 1-minute). Repeats: 1.",
        "",
        "floor = max(one board's wall, total CPU s / cores); total CPU = rkdet's own CPU + the boards': sshd "
        "daemons and every session they reaped, the detached run jobs (re-parented to the bench by "
        "PR_SET_CHILD_SUBREAPER and reaped by it with wait4), any other child alive across the run and the "
        "bench process itself (found by process tree, never by name). others' CPU s = the host's busy CPU "
        "seconds during the row minus ours: what other jobs on the machine took meanwhile.",
        "",
        "| boards | exit | wall s | rkdet CPU s | sshd sessions CPU s | detached jobs CPU s (n) | other children + bench "
        "CPU s | total CPU s | floor s | wall / floor | per board: rkdet / sessions / jobs CPU s | rkdet peak RSS MB "
        "| fleet s (in run_fleet) | mean cell s | host CPU busy | others' CPU s | load before / after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        floor = max(one or r.wall, r.total_cpu / cores)
        a, k = r.acc, max(1, r.boards)
        lines.append(f"| {r.boards} | {r.exit_code} | {r.wall:.1f} | {r.rkdet_cpu:.1f} | {a.sessions:.1f} | "
                     f"{a.jobs:.1f} ({a.job_count}) | {a.helpers + a.bench:.2f} | "
                     f"{r.total_cpu:.1f} | {floor:.1f} | {r.wall / floor:.2f} | "
                     f"{r.rkdet_cpu / k:.2f} / {a.sessions / k:.2f} / {a.jobs / k:.2f} | {r.rkdet_rss_mb:.0f} | "
                     f"{r.fleet_seconds:.1f} | {r.cell_seconds_mean:.1f} | {r.host_busy:.0%} | "
                     f"{max(0.0, r.host_busy * r.wall * cores - r.total_cpu):.1f} | {r.load_before:.2f} / {r.load:.2f} |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, default=None)
    ap.add_argument("--sizes", default="1,4,16", help="board counts; a 1-board row is always measured (the floor)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "fleet.md")
    args = ap.parse_args()
    become_subreaper()
    with tempfile.TemporaryDirectory(prefix="rkdet-bench-fleet-") as tmp:
        os.chmod(tmp, 0o755)
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "xdg")
        build = ensure_build(args.build, Path(tmp) / "build")
        rows = []
        sizes = [int(s) for s in args.sizes.split(",")]
        if 1 not in sizes:  # the floor needs one board's wall, measured in the same run
            sizes.insert(0, 1)
        for n in sizes:
            row = run_size(n, build, Path(tmp))
            print(json.dumps({**row.__dict__, "acc": row.acc.__dict__}), flush=True)
            rows.append(row)
        print(write_table(rows, build, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
