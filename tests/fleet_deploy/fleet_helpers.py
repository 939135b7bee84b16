"""Helpers for the fleet deploy tests: emulated boards as a lab, an inventory for them, the real CLI."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rkdet.emulator.sshd import EmulatedBoard, free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Lab:
    """Emulated boards by name, one known_hosts for all, and each board's TEST CONTROL dir (fault.json)."""

    folder: Path
    boards: dict[str, EmulatedBoard] = field(default_factory=dict)
    controls: dict[str, Path] = field(default_factory=dict)
    dead: dict[str, int] = field(default_factory=dict)  # names of boards nobody answers for: port

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    def inventory(self, path: Path | None = None, *, dead_first: bool = False) -> Path:
        """An Ansible YAML inventory: group `rk3588` / `rk3568` … by SoC, every board's ansible_* vars;
        the dead boards in group `unreachable` (first in the file with `dead_first`)."""
        groups: dict[str, dict] = {"unreachable": {"hosts": {}}} if dead_first and self.dead else {}
        for name, b in self.boards.items():
            groups.setdefault(b.soc, {"hosts": {}})["hosts"][name] = {
                "ansible_host": b.host, "ansible_port": b.port, "ansible_user": b.user,
                "ansible_ssh_private_key_file": str(b.identity_file), "rkdet_soc": b.soc}
        any_key = str(next(iter(self.boards.values())).identity_file) if self.boards else "/dev/null"
        for name, port in self.dead.items():
            groups.setdefault("unreachable", {"hosts": {}})["hosts"][name] = {
                "ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "nobody",
                "ansible_ssh_private_key_file": any_key}
        doc = {"all": {"children": groups}}
        path = path or self.folder / "inventory.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def arm_fault(self, name: str, fault: dict | None) -> None:
        """TEST CONTROL: the emulated runtime of board `name` flips a bit (None: disarm)."""
        import json

        target = self.controls[name] / "fault.json"
        if fault is None:
            target.unlink(missing_ok=True)
        else:
            target.write_text(json.dumps(fault))
            target.chmod(0o644)


@contextlib.contextmanager
def lab(folder: Path, socs: Sequence[tuple[str, str]], dead: Sequence[str] = ()) -> Iterator[Lab]:
    """Start one emulated board per (name, soc); `dead` names get a port nothing listens on."""
    folder.mkdir(parents=True, exist_ok=True)
    result = Lab(folder)
    with contextlib.ExitStack() as stack:
        for name, soc in socs:
            control = Path(tempfile.mkdtemp(prefix=f"rkdet-fleet-ctl-{name}-"))
            control.chmod(0o755)  # the board user reads fault.json from here
            stack.callback(_rmtree, control)
            result.controls[name] = control
            board = stack.enter_context(EmulatedBoard(soc, folder / name, env={"RKDET_EMU_CONTROL_DIR": str(control)}))
            result.boards[name] = board
        for name in dead:
            result.dead[name] = free_port()
        result.known_hosts.write_text("".join(b.known_hosts_file.read_text() for b in result.boards.values()))
        yield result


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def rkdet(args: Sequence[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout, env=dict(os.environ))


def fleet_deploy(lab_: Lab, inventory: Path, out: Path, *extra: str, builds: Sequence[str] = (),
                 timeout: float = 600) -> subprocess.CompletedProcess:
    return rkdet(["fleet", "deploy", "--inventory", inventory, "--known-hosts", lab_.known_hosts,
                  "--ssh-config", "/dev/null", *builds, "--out", out, "--repeats", "1", "--warmup", "0",
                  "--connect-timeout", "5", *extra], timeout=timeout)
