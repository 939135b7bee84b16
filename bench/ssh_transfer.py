"""Bench: rkdet's SSH layer vs OpenSSH, side by side in one run over loopback (emulated board).

Measures (best of N, same board, same files, same run):
  * upload of models/yolov8n-doclaynet.onnx and a 64 MiB random file: `conn.push` (verified:
    local + board sha256, temp name, rename) and the raw SFTP put it uses, vs `scp` (OpenSSH);
  * download of the 64 MiB file: `conn.pull` vs `scp`;
  * a repeat push of an unchanged file (must send 0 bytes);
  * per-command round trip: `conn.run(["true"])` vs `ssh` over a ControlMaster connection.
Writes bench/results/ssh.md. Target: rkdet push >= 0.9x scp throughput. Run as root:
    .venv/bin/python bench/ssh_transfer.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rkdet.emulator.sshd import EmulatedBoard  # noqa: E402
from rkdet.link.pull import pull  # noqa: E402
from rkdet.link.transfer import push  # noqa: E402

MODEL = REPO / "models" / "yolov8n-doclaynet.onnx"
MiB = 1 << 20


def race(fns: dict[str, Callable[[int], object]], repeats: int) -> dict[str, float]:
    """Fastest wall time of each fn over `repeats` rounds; the order rotates every round so the
    machine's background load falls on all contenders alike. Each call gets its round number."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(repeats):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter()
            fns[name](i)
            times[name].append(time.perf_counter() - t0)
    return {n: min(t) for n, t in times.items()}


def mux_options(control: Path) -> list[str]:
    """OpenSSH connection sharing, so scp/ssh timings exclude the handshake (as rkdet's reuse does)."""
    return ["-o", f"ControlPath={control}", "-o", "ControlMaster=auto", "-o", "ControlPersist=120"]


def scp(board: EmulatedBoard, control: Path, src: str, dst: str) -> None:
    subprocess.run(["scp", "-q", "-F", str(board.ssh_config_file), *mux_options(control), src, dst], check=True,
                   env={**os.environ, "SSH_AUTH_SOCK": ""})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ssh.md")
    args = ap.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="rkdet-bench-ssh-") as tmp, EmulatedBoard("rk3588", Path(tmp) / "w") as board:
        big = Path(tmp) / "random-64MiB.bin"
        big.write_bytes(os.urandom(64 * MiB))
        conn = board.connect()
        remote = conn.default_workdir() + "/bench"
        conn.run(["mkdir", "-p", remote])
        alias = board.alias
        control = Path(tmp) / "cm"
        env = {**os.environ, "SSH_AUTH_SOCK": ""}
        master = ["ssh", "-F", str(board.ssh_config_file), *mux_options(control), alias]
        subprocess.run([*master, "true"], check=True, env=env)
        sftp = conn.sftp()
        assert sftp is not None
        for path in (MODEL, big):
            size, name = path.stat().st_size / MiB, path.name
            t = race({
                "scp": lambda i: scp(board, control, str(path), f"{alias}:{remote}/scp-{i}-{name}"),
                "put": lambda i: sftp.put(str(path), f"{remote}/put-{i}-{name}", confirm=False),
                "push": lambda i: push(conn, path, f"{remote}/push-{i}-{name}"),
            }, args.repeats)
            rows.append((f"upload {name} ({size:.1f} MiB)", f"scp {size / t['scp']:.0f} MiB/s ({t['scp'] * 1000:.0f} ms)",
                         f"paramiko stock put {size / t['put']:.0f} MiB/s ({t['put'] * 1000:.0f} ms); verified push "
                         f"{size / t['push']:.0f} MiB/s ({t['push'] * 1000:.0f} ms)",
                         f"put {t['scp'] / t['put']:.2f}x; push {t['scp'] / t['push']:.2f}x"))
        for path in (MODEL, big):
            size, src = path.stat().st_size / MiB, f"{remote}/push-0-{path.name}"
            t = race({
                "scp": lambda i: scp(board, control, f"{alias}:{src}", f"{tmp}/scp-back-{i}"),
                "get": lambda i: sftp.get(src, f"{tmp}/get-back-{i}"),
                "pull": lambda i: pull(conn, src, Path(tmp) / f"pull-back-{i}"),
            }, args.repeats)
            rows.append((f"download {path.name} ({size:.1f} MiB)",
                         f"scp {size / t['scp']:.0f} MiB/s ({t['scp'] * 1000:.0f} ms)",
                         f"paramiko stock get {size / t['get']:.0f} MiB/s ({t['get'] * 1000:.0f} ms); verified pull "
                         f"{size / t['pull']:.0f} MiB/s ({t['pull'] * 1000:.0f} ms)",
                         f"get {t['scp'] / t['get']:.2f}x; pull {t['scp'] / t['pull']:.2f}x"))

        def fresh_push(i: int) -> None:
            with board.connect() as c:
                push(c, MODEL, f"{remote}/fresh-{i}-{MODEL.name}")

        t = race({
            "scp": lambda i: subprocess.run(["scp", "-q", "-F", str(board.ssh_config_file), str(MODEL),
                                             f"{alias}:{remote}/fresh-scp-{i}"], check=True, env=env),
            "push": fresh_push,
        }, args.repeats)
        rows.append(("model upload incl. a new connection", f"scp {t['scp'] * 1000:.0f} ms",
                     f"open + verified push + close {t['push'] * 1000:.0f} ms", f"{t['scp'] / t['push']:.2f}x"))
        again = push(conn, big, f"{remote}/push-0-{big.name}")
        rows.append(("repeat push of unchanged 64 MiB", "scp: sends 64 MiB again",
                     f"sent {again.bytes_sent} B, skipped {again.files_skipped} file, {again.seconds * 1000:.0f} ms "
                     f"(two sha256 passes)", "-"))
        conn.run(["true"])
        n = 200
        t0 = time.perf_counter()
        for _ in range(n):
            conn.run(["true"])
        t_run = (time.perf_counter() - t0) / n
        m = 50
        t0 = time.perf_counter()
        for _ in range(m):
            subprocess.run([*master, "true"], check=True, env=env)
        t_ssh = (time.perf_counter() - t0) / m
        subprocess.run(["ssh", "-o", f"ControlPath={control}", "-O", "exit", alias], capture_output=True, env=env)
        rows.append(("command round trip (`true`)", f"ssh+ControlMaster {t_ssh * 1000:.1f} ms",
                     f"conn.run {t_run * 1000:.1f} ms", f"{t_ssh / t_run:.1f}x"))
        conn.run(["rm", "-rf", remote])
        conn.close()
        with EmulatedBoard("rk3588", Path(tmp) / "w2", "nosftp") as plain, plain.connect() as c2:
            dest = c2.default_workdir() + "/bench"
            t = race({
                "scp": lambda i: subprocess.run(["scp", "-q", "-O", "-F", str(plain.ssh_config_file), str(big),
                                                 f"{plain.alias}:{dest}-scp-{i}"], check=True, env=env),
                "push": lambda i: push(c2, big, f"{dest}/exec-{i}"),
            }, args.repeats)
            rows.append(("upload 64 MiB, board without SFTP (exec `cat` fallback)",
                         f"scp -O (legacy scp protocol, new connection) {64 / t['scp']:.0f} MiB/s",
                         f"verified push {64 / t['push']:.0f} MiB/s ({t['push'] * 1000:.0f} ms)",
                         f"{t['scp'] / t['push']:.2f}x"))
    lines = [
        "# SSH layer vs OpenSSH (loopback, emulated board)",
        "",
        f"Written by `bench/ssh_transfer.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"paramiko {__import__('paramiko').__version__}, {subprocess.run(['ssh', '-V'], capture_output=True, text=True).stderr.strip()}.",
        f"Machine load: load average {load_before[0]:.1f} (1 min) / {load_before[1]:.1f} (5 min) before the run, "
        f"{os.getloadavg()[0]:.1f} / {os.getloadavg()[1]:.1f} after, on {os.cpu_count()} CPUs shared with other work.",
        f"Best of {args.repeats} for transfers. OpenSSH runs over one ControlMaster connection (no handshake per "
        "scp/ssh), as rkdet reuses its connection. Speed ratio = OpenSSH time / rkdet time "
        "(>= 0.9 is the target for uploads).",
        "",
        "| case | OpenSSH | rkdet | ratio |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows],
        "",
        "Reading it: `paramiko stock put/get` is `SFTPClient.put/get` with defaults (pipelined writes,",
        "prefetching reads, 32 KiB requests). `verified pull` is rkdet's path: files of 4 MiB and more come",
        "through `cat` on an exec channel (SFTP prefetch costs ~3x the host CPU), smaller ones over SFTP with",
        "requests sized by the server's limits@openssh.com answer; the board hashes each file (openssl when it",
        "works, else sha256sum) while the host hashes what it receives. `verified push` sends files",
        "of 4 MiB and more through one exec channel each into `tee tmp | sha256` on the board (openssl when",
        "it is there, else sha256sum) while the host hashes what it reads: one sha256 per side as the bytes",
        "stream, no re-read (smaller files: SFTP or `cat`, then one batched re-hash before the renames).",
        "Over a real link (GbE: ~110 MiB/s at best) the copy dominates. Everything shares 2 CPUs with",
        f"whatever else runs (load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs), so",
        "ratios move by +-50% between runs; rounds are interleaved and the best of each is kept.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_name(args.out.name + ".tmp")
    tmp_out.write_text("\n".join(lines))
    os.replace(tmp_out, args.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
