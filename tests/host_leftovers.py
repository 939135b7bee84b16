"""What an emulated board could leave on the host, listed before and after (tests of issue 9 item 7).

Other sessions may run emulators (including older rkdet versions that create host users) at the
same time, so the comparison is restricted to what *this* instance could create: host accounts
carrying the emulated-board marker or a uid from its range, sudo drop-ins, the legacy shell link,
mounts under its paths, and processes of its uid, its RKDET_ROOT or its recorded PIDs' subtree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rkdet.emulator import users


def _names(path: str, uid_field: int = 2) -> set[str]:
    """Entries of a colon file that an emulated board of this version would add: an id in its range
    (older versions, possibly running beside this test, add named users rkdetboard... outside it)."""
    found = set()
    for line in Path(path).read_text().splitlines():
        fields = line.split(":")
        if len(fields) > uid_field and fields[uid_field].isdigit() and int(fields[uid_field]) in users.UID_RANGE:
            found.add(line)
    return found


def children(pid: int) -> list[int]:
    """Direct children of `pid` (all its threads), from /proc/<pid>/task/*/children."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (not `pid` itself), walking /proc/<pid>/task/*/children."""
    out, todo = [], [pid]
    while todo:
        for kid in children(todo.pop()):
            if kid not in out:
                out.append(kid)
                todo.append(kid)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class Inventory:
    accounts: set[str]
    groups: set[str]
    sudoers: set[str]
    shell_links: set[str]
    mounts: set[str]
    processes: set[int] = field(default_factory=set)

    def new_since(self, before: Inventory) -> dict[str, list]:
        """What appeared since `before`, per kind (empty lists when the host is as found)."""
        return {"accounts": sorted(self.accounts - before.accounts), "groups": sorted(self.groups - before.groups),
                "sudoers": sorted(self.sudoers - before.sudoers),
                "shell links": sorted(self.shell_links - before.shell_links),
                "mounts": sorted(self.mounts - before.mounts), "processes": sorted(self.processes - before.processes)}


def inventory(paths: list[Path], uids: list[int] = (), roots: list[Path] = (), pids: list[int] = (),
              ports: list[int] = ()) -> Inventory:
    """The host's state as far as an emulated board using `paths` (work dir, board dir), `uids`,
    RKDET_ROOTs `roots`, started as `pids` and listening on `ports` could have changed it (an older
    emulator running beside the test adds rkdet-emulator-<its port> rules: not ours)."""
    sudo_dir = Path("/etc/sudoers.d")
    sudoers = set()
    for p in sudo_dir.iterdir() if sudo_dir.is_dir() else []:
        port = p.name.rsplit("-", 1)[-1]
        if not (p.name.startswith("rkdet-emulator-") and port.isdigit() and int(port) not in ports):
            sudoers.add(p.name)
    links = {str(p) for p in users.LEGACY_SHELL_DIR.glob("*")} if users.LEGACY_SHELL_DIR.is_dir() else set()
    prefixes = [str(p).rstrip("/") for p in paths]
    mounts = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split(" ")[4]
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            mounts.add(point)
    markers = [f"RKDET_ROOT={r}".encode() for r in roots]
    procs: set[int] = set()
    for pid in pids:
        procs |= {p for p in [pid, *descendants(pid)] if alive(p)}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid in uids and alive(int(entry)):
                procs.add(int(entry))
                continue
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(m in env for m in markers) and alive(int(entry)):
            procs.add(int(entry))
    return Inventory(_names("/etc/passwd"), _names("/etc/group"), sudoers, links, mounts, procs)
