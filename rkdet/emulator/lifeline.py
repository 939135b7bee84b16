"""Power an emulated board off when its emulator dies (SIGKILL included); sweep what a dead one left.

Why: the board's sshd and FUSE daemon run in their own sessions (Ctrl-C in a terminal must not
reach them), so a killed emulator would leave them running. Each board gets a *reaper*: a small
process in its own session whose stdin is a pipe the emulator holds open. A normal stop writes
"stop" and the reaper exits; if the emulator dies the pipe ends without it and the reaper powers
the board off: ends the board's processes, stops its sshd, waits for the FUSE daemon (it unmounts
when its parent dies) and removes the temp dirs the emulator made. Each instance also records
itself in `<workdir>/rkdet-emulator.json`; the next start sweeps records whose owner is dead (the
reaper was killed too). Processes are found by what is unique to the instance (its uid from the
emulated-board range, its RKDET_ROOT, its sshd's pid and config path), never by a process name.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

RECORD = "rkdet-emulator.json"


@dataclass
class Instance:
    """What one running emulated board is, for its reaper and a later sweep."""

    owner_pid: int
    owner_start: int  # /proc/<pid>/stat starttime: a reused pid is not the owner
    sshd_pid: int
    sshd_config: str
    uid: int
    root: str
    workdir: str  # holds the record (RECORD)
    remove: list[str] = field(default_factory=list)  # temp dirs this instance made

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Instance:
        data = json.loads(text)
        return cls(int(data["owner_pid"]), int(data["owner_start"]), int(data["sshd_pid"]), str(data["sshd_config"]),
                   int(data["uid"]), str(data["root"]), str(data["workdir"]), [str(p) for p in data.get("remove", [])])


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 = state), or None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and fields[0] != "Z" else None


def owner_alive(inst: Instance) -> bool:
    return start_time(inst.owner_pid) == inst.owner_start


def _uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def board_processes(listener: int | None, uid: int, root: str | Path) -> list[int]:
    """This board's processes: its user's (a uid no other board or host user has), those whose
    environment carries this board's RKDET_ROOT (jobs run as root under sudo, reparented to init),
    and everything under its sshd listener. Never this process."""
    marker = f"RKDET_ROOT={root}".encode()
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        fields = _stat_fields(pid)
        if fields is None:
            continue
        parents[pid] = int(fields[1])
        if _uid(pid) == uid:
            found.add(pid)
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in env:
            found.add(pid)
    if listener is not None:
        for pid in parents:
            seen, cur = set(), pid
            while cur in parents and cur not in seen and cur > 1:
                seen.add(cur)
                cur = parents[cur]
                if cur == listener:
                    found.add(pid)
                    break
    found.discard(listener or -1)
    return sorted(found)


def _is_sshd_of(inst: Instance) -> bool:
    try:  # sshd rewrites its title ("sshd: /usr/sbin/sshd -D -e -f CONFIG [listener] ..."): a substring
        cmdline = Path(f"/proc/{inst.sshd_pid}/cmdline").read_bytes()
    except OSError:
        return False
    return inst.sshd_config.encode() in cmdline


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fields = _stat_fields(pid)
        if fields is None or fields[0] == "Z":
            return True
        time.sleep(0.02)
    return False


def _mounts_under(path: str) -> list[str]:
    from rkdet.emulator.mount import _unescape

    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = _unescape(line.split(" ")[4])
            if point == path or point.startswith(path.rstrip("/") + "/"):
                found.append(point)
    return found


def power_off(inst: Instance, mount_wait: float = 5.0) -> None:
    """End the board's processes and sshd, then remove its temp dirs once nothing is mounted there."""
    sshd = inst.sshd_pid if _is_sshd_of(inst) else None
    if sshd is not None:
        with contextlib.suppress(OSError):
            os.kill(sshd, signal.SIGTERM)  # stop accepting first
    for pid in board_processes(sshd, inst.uid, inst.root):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if sshd is not None and not _wait_gone(sshd, 5.0):
        with contextlib.suppress(OSError):
            os.kill(sshd, signal.SIGKILL)
    for path in inst.remove:
        deadline = time.monotonic() + mount_wait
        while _mounts_under(path) and time.monotonic() < deadline:
            time.sleep(0.05)  # the FUSE daemon unmounts within ~0.5 s of its parent's death
        for point in reversed(_mounts_under(path)):
            from rkdet.emulator.mount import clear_stale_mount

            with contextlib.suppress(Exception):
                clear_stale_mount(Path(point))
        if not _mounts_under(path):  # never rmtree into a mount
            shutil.rmtree(path, ignore_errors=True)


def write_record(workdir: Path, inst: Instance) -> Path:
    path = workdir / RECORD
    from rkdet.records.io import write_atomic  # the one atomic writer

    write_atomic(str(path), inst.to_json())
    return path


def live_owner(workdir: Path) -> int | None:
    """The pid of a live emulator whose board uses `workdir`, or None."""
    try:
        inst = Instance.from_json((workdir / RECORD).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return inst.owner_pid if owner_alive(inst) else None


def sweep(workdirs: list[Path] | None = None) -> list[Instance]:
    """Power off instances whose emulator (and reaper) died: records in the temp dir's
    rkdet-emu-* work dirs and in `workdirs` whose owner is gone. Returns what was swept."""
    candidates = sorted(Path(tempfile.gettempdir()).glob(f"rkdet-emu-*/{RECORD}"))
    candidates += [Path(w) / RECORD for w in workdirs or []]
    swept = []
    for record in candidates:
        try:
            inst = Instance.from_json(record.read_text())
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if owner_alive(inst) or not (record.parent.stat().st_uid == 0 and record.stat().st_uid == 0):
            continue
        power_off(inst)
        record.unlink(missing_ok=True)
        swept.append(inst)
    return swept


class Reaper:
    """The emulator's side of the lifeline: `Reaper(inst)` starts it; `disarm()` on a normal stop."""

    def __init__(self, inst: Instance) -> None:
        read_end, self._write_end = os.pipe()  # the write end is close-on-exec: only we hold it
        package_parent = str(Path(__file__).resolve().parents[2])
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": package_parent}
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "rkdet.emulator.lifeline", inst.to_json()],
                                         stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        finally:
            os.close(read_end)

    def disarm(self) -> None:
        """Tell the reaper the board is being stopped normally, and reap it."""
        if self._write_end < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._write_end, b"stop")
        os.close(self._write_end)
        self._write_end = -1
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(argv: list[str]) -> int:
    """Reaper: block on stdin; EOF without "stop" means the emulator died: power the board off."""
    inst = Instance.from_json(argv[0])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    data = b""
    while True:
        chunk = os.read(0, 64)
        if not chunk:
            break
        data += chunk
    if data.startswith(b"stop"):
        return 0
    power_off(inst)
    (Path(inst.workdir) / RECORD).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
