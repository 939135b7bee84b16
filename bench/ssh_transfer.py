"""Bench: rkdet's SSH layer vs OpenSSH, side by side in one run over loopback (emulated board).

Measures, in rounds whose order rotates (A B C, B C A, ...) so the shared machine's load falls on
every contender alike, the median of each and the median (and range) of the per-round ratios:
  * upload of models/yolov8n-doclaynet.onnx (12 MiB) and a 64 MiB random file: `push` (verified: the
    host's sha256 of what it read, the board's of what it wrote, temp name, rename) and stock SFTP put,
    vs `scp` with OpenSSH's default cipher (chacha20-poly1305, what a user types) and vs
    `scp -c aes128-gcm@openssh.com` (the cipher rkdet's connection negotiates: like for like);
  * download of the same files: `pull` (verified) and stock SFTP get vs the same two scp;
  * a repeat push of an unchanged file (must send 0 bytes);
  * per-command round trip: `conn.run(["true"])` vs `ssh` over a ControlMaster connection.
Writes bench/results/ssh.md. Target: push and pull >= 0.9x scp in every cell of one run. Run as root:
    .venv/bin/python bench/ssh_transfer.py [--repeats 7]
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
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rkdet.emulator.sshd import EmulatedBoard  # noqa: E402
from rkdet.link.pull import pull  # noqa: E402
from rkdet.link.transfer import push  # noqa: E402

MODEL = REPO / "models" / "yolov8n-doclaynet.onnx"
MiB = 1 << 20


def race(fns: dict[str, Callable[[int], object]], repeats: int) -> dict[str, list[float]]:
    """Wall time of each fn in each of `repeats` rounds; the order rotates every round so the
    machine's background load falls on all contenders alike. Each call gets its round number."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(repeats):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter()
            fns[name](i)
            times[name].append(time.perf_counter() - t0)
    return times


def med(times: list[float]) -> float:
    return statistics.median(times)


def ratio(peer: list[float], ours: list[float]) -> str:
    """peer time / our time per round (same round, same load): median [lowest-highest]."""
    per_round = [p / o for p, o in zip(peer, ours)]
    return f"{med(per_round):.2f}x [{min(per_round):.2f}-{max(per_round):.2f}]"


def speed(size_mib: float, times: list[float]) -> str:
    return f"{size_mib / med(times):.0f} MiB/s ({med(times) * 1000:.0f} ms)"


def mux_options(control: Path) -> list[str]:
    """OpenSSH connection sharing, so scp/ssh timings exclude the handshake (as rkdet's reuse does)."""
    return ["-o", f"ControlPath={control}", "-o", "ControlMaster=auto", "-o", "ControlPersist=120"]


GCM = ["-c", "aes128-gcm@openssh.com"]  # the cipher rkdet's connection prefers and negotiates here


def scp(board: EmulatedBoard, control: Path, src: str, dst: str, cipher: list[str] | None = None) -> None:
    """scp over the ControlMaster of its cipher (one master per cipher: a shared master would carry
    every scp on the cipher it was opened with)."""
    subprocess.run(["scp", "-q", "-F", str(board.ssh_config_file), *(cipher or []), *mux_options(control), src, dst],
                   check=True, env={**os.environ, "SSH_AUTH_SOCK": ""})


def negotiated(board: EmulatedBoard, extra: list[str]) -> str:
    """The cipher OpenSSH negotiates with the board (from `ssh -v`)."""
    res = subprocess.run(["ssh", "-v", "-F", str(board.ssh_config_file), *extra, board.alias, "true"],
                         capture_output=True, text=True, env={**os.environ, "SSH_AUTH_SOCK": ""})
    for line in res.stderr.splitlines():
        if "client->server cipher:" in line:
            return line.split("cipher:", 1)[1].split()[0]
    return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ssh.md")
    args = ap.parse_args()
    cells: list[str] = []  # the target table: one row per transfer
    rows: list[tuple[str, str, str, str]] = []
    load_before = os.getloadavg()
    env = {**os.environ, "SSH_AUTH_SOCK": ""}
    with tempfile.TemporaryDirectory(prefix="rkdet-bench-ssh-") as tmp, EmulatedBoard("rk3588", Path(tmp) / "w") as board:
        big = Path(tmp) / "random-64MiB.bin"
        big.write_bytes(os.urandom(64 * MiB))
        conn = board.connect()
        ours = conn.transport.local_cipher
        defaults, gcm = negotiated(board, []), negotiated(board, GCM)
        remote = conn.default_workdir() + "/bench"
        conn.run(["mkdir", "-p", remote])
        alias = board.alias
        control, control_gcm = Path(tmp) / "cm", Path(tmp) / "cg"
        master = ["ssh", "-F", str(board.ssh_config_file), *mux_options(control), alias]
        subprocess.run([*master, "true"], check=True, env=env)
        subprocess.run(["ssh", "-F", str(board.ssh_config_file), *GCM, *mux_options(control_gcm), alias, "true"],
                       check=True, env=env)
        sftp = conn.sftp()
        assert sftp is not None
        for path in (MODEL, big):
            size, name = path.stat().st_size / MiB, path.name
            t = race({
                "scp": lambda i: scp(board, control, str(path), f"{alias}:{remote}/scp-{i}-{name}"),
                "scp-gcm": lambda i: scp(board, control_gcm, str(path), f"{alias}:{remote}/scpg-{i}-{name}", GCM),
                "put": lambda i: sftp.put(str(path), f"{remote}/put-{i}-{name}", confirm=False),
                "push": lambda i: push(conn, path, f"{remote}/push-{i}-{name}"),
            }, args.repeats)
            cells.append(f"| push {size:.0f} MiB | {speed(size, t['scp'])} | {speed(size, t['scp-gcm'])} | "
                         f"{speed(size, t['push'])} | **{ratio(t['scp'], t['push'])}** | "
                         f"**{ratio(t['scp-gcm'], t['push'])}** | put {speed(size, t['put'])} |")
        for path in (MODEL, big):
            size, src = path.stat().st_size / MiB, f"{remote}/push-0-{path.name}"
            t = race({
                "scp": lambda i: scp(board, control, f"{alias}:{src}", f"{tmp}/scp-back-{i}"),
                "scp-gcm": lambda i: scp(board, control_gcm, f"{alias}:{src}", f"{tmp}/scpg-back-{i}", GCM),
                "get": lambda i: sftp.get(src, f"{tmp}/get-back-{i}"),
                "pull": lambda i: pull(conn, src, Path(tmp) / f"pull-back-{i}"),
            }, args.repeats)
            cells.append(f"| pull {size:.0f} MiB | {speed(size, t['scp'])} | {speed(size, t['scp-gcm'])} | "
                         f"{speed(size, t['pull'])} | **{ratio(t['scp'], t['pull'])}** | "
                         f"**{ratio(t['scp-gcm'], t['pull'])}** | get {speed(size, t['get'])} |")
        load_mid = os.getloadavg()

        def fresh_push(i: int) -> None:
            with board.connect() as c:
                push(c, MODEL, f"{remote}/fresh-{i}-{MODEL.name}")

        t = race({
            "scp": lambda i: subprocess.run(["scp", "-q", "-F", str(board.ssh_config_file), str(MODEL),
                                             f"{alias}:{remote}/fresh-scp-{i}"], check=True, env=env),
            "push": fresh_push,
        }, args.repeats)
        rows.append(("model upload incl. a new connection", f"scp {med(t['scp']) * 1000:.0f} ms",
                     f"open + verified push + close {med(t['push']) * 1000:.0f} ms", ratio(t["scp"], t["push"])))
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
        for cm in (control, control_gcm):
            subprocess.run(["ssh", "-o", f"ControlPath={cm}", "-O", "exit", alias], capture_output=True, env=env)
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
                         f"scp -O (legacy scp protocol, new connection) {speed(64, t['scp'])}",
                         f"verified push {speed(64, t['push'])}", ratio(t["scp"], t["push"])))
    load_after = os.getloadavg()
    lines = [
        "# SSH layer vs OpenSSH (loopback, emulated board)",
        "",
        f"Written by `bench/ssh_transfer.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"paramiko {__import__('paramiko').__version__}, {subprocess.run(['ssh', '-V'], capture_output=True, text=True).stderr.strip()}.",
        f"Machine load (load average 1 / 5 min, {os.cpu_count()} CPUs shared with other work): "
        f"{load_before[0]:.1f} / {load_before[1]:.1f} before the run, {load_mid[0]:.1f} / {load_mid[1]:.1f} after "
        f"the transfers, {load_after[0]:.1f} / {load_after[1]:.1f} at the end.",
        f"{args.repeats} rounds per row, the contenders' order rotating every round; times are medians; a ratio is "
        "scp's time / rkdet's time in the same round: median [lowest-highest] over the rounds (>= 0.9 is the "
        "target). OpenSSH runs over a ControlMaster connection per cipher (no handshake per scp), as rkdet "
        f"reuses its connection. Ciphers: scp with OpenSSH's defaults negotiates `{defaults}`; `scp -c` "
        f"`{gcm}` is like for like with rkdet's connection (`{ours}`; paramiko {__import__('paramiko').__version__} "
        "has no chacha20-poly1305).",
        "",
        "| transfer | scp (defaults) | scp -c aes128-gcm | rkdet verified | ratio vs scp (defaults) | "
        "ratio vs scp (same cipher) | stock paramiko (not verified) |",
        "|---|---|---|---|---|---|---|",
        *cells,
        "",
        "| case | OpenSSH | rkdet | ratio |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows],
        "",
        "Reading it: `push` hashes each file on the host as it reads it and sends files of 4 MiB and more",
        "through one exec channel into `tee tmp | sha256` on the board (openssl when it gives the known",
        "empty hash, else sha256sum): one sha256 per side as the bytes stream, no re-read. The skip check",
        "(nothing at the name, the folder there) and the chmod + rename after the hashes matched are",
        "SFTP requests to the running sftp-server (lstat, posix-rename@openssh.com): the only process",
        "started on the board per file is the receiving pipeline. `pull` asks a file's kind and size in",
        "one shell round trip, takes files of 4 MiB and more through `cat` on an exec channel (smaller ones over",
        "SFTP), capped at their declared size, while the board hashes the file on a second channel and",
        "the host hashes what it receives; nothing lands unless both hashes match. scp verifies nothing",
        "beyond the SSH MAC. Stock paramiko put/get: `SFTPClient.put/get` with defaults.",
        "Everything (host, board, scp) shares the same CPUs with whatever else runs, so single rounds",
        "move a lot; read the median ratio with its range.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_name(args.out.name + ".tmp")
    tmp_out.write_text("\n".join(lines))
    os.replace(tmp_out, args.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
