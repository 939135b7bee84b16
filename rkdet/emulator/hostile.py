"""TEST CONTROL: the hostile emulated board (`rkdet emulator start --variant hostile`).

Why: rkdet treats every answer of a board as untrusted (docs/SECURITY.md); this board lies on
purpose so the tests can prove the host stays as it was. It is the standard emulated board plus
three shims, all driven by one control file (`<board dir>/hostile.json`, see `write_control`):

- the runner (`python3 .../rkdet-onboard.pyz run`): the real runner runs, then its result folder is
  doctored: symlinks to host paths, a FIFO, a 10 GB sparse file, names with markup and escape
  sequences, malformed snapshots.jsonl lines or run.json, markup in its messages;
- `find`: a listing of a result folder gains absolute names (one naming a host file whose bytes
  the board also serves), `./`, `../` and names with escape sequences;
- the SFTP subsystem: a proxy in front of OpenSSH's sftp-server that stops answering (forever) a
  STAT, LSTAT or OPEN of anything under a `runs/` folder.

The module is stdlib-only and also runs as a script (copied into the board's bin dir and run by
the board's python3): `rkdet-hostile.py runner|find|sftp ...`. Host-side code only uses
`MODES`, `install` and `write_control`.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

# What the board lies about; a control file names a subset (default: all of them at once).
MODES = ("names", "types", "huge", "markup", "records", "runjson", "stall")
CONTROL = "hostile.json"
SCRIPT = "rkdet-hostile.py"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
HUGE_BYTES = 10 * 10**9  # a sparse file: no disk used on the board, 10 GB declared
MARKUP = "[green]SAME[/green]\x1b[2J\x1b]0;owned\x07"  # rich markup, clear-screen, set-title
_STALL_TYPES = {3: "open", 7: "lstat", 17: "stat"}  # SFTP packet types that stall under runs/


# ---- host side ---------------------------------------------------------------------------------


def victim_path(board_dir: Path) -> Path:
    """The file an absolute name in the crafted listing points at. The emulated board shares the
    host's file system, so this one file is both what the board serves and the host file an
    escaping pull would replace (tests check it keeps its inode and bytes)."""
    return Path(board_dir) / "hostile-victim.txt"


def crafted_names(board_dir: Path) -> list[str]:
    """The names mode "names" appends to a result folder's listing (in this order)."""
    return [str(victim_path(board_dir)), "./", "./../escaped.npy", "./outputs/\x1b[2Jclear.npy"]


def write_control(board_dir: Path, modes: tuple[str, ...] = MODES, names: list[str] | None = None) -> Path:
    """(Re)write the control file naming which lies to tell (and, for "names", which names to add:
    default `crafted_names`); creates the victim file if missing."""
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f"unknown hostile mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}")
    victim = victim_path(board_dir)
    if not victim.exists():
        victim.write_text("a host file: a pull must never replace it\n")
        os.chmod(victim, 0o644)
    path = Path(board_dir) / CONTROL
    # host side only (the board runs this file as a stdlib script and never calls write_control), so
    # the one atomic writer is imported here, not at the top of a module the board must run alone
    from rkdet.records.io import write_atomic

    write_atomic(str(path), json.dumps({"modes": list(modes), "names": crafted_names(board_dir) if names is None
                                        else names}), perms=0o644)  # the board's user reads it
    return path


def install(bindir: Path, python: str) -> str:
    """Put this script and the `find` shim into the board's bin dir; returns the script's path."""
    script = Path(bindir) / SCRIPT
    shutil.copyfile(__file__, script)
    os.chmod(script, 0o644)
    shim = Path(bindir) / "find"
    shim.write_text(f'#!/bin/sh\nexec "{python}" "{script}" find "$@"\n')
    os.chmod(shim, 0o755)
    return str(script)


def wrapper_text(python: str, bindir: Path) -> str:
    """The board's python3: the runner goes through the doctoring shim, everything else is plain."""
    script = Path(bindir) / SCRIPT
    return (f'#!/bin/sh\ncase "${{1:-}}" in */rkdet-onboard.pyz) exec "{python}" "{script}" runner "$@" ;; esac\n'
            f'exec "{python}" "$@"\n')


def sftp_command(python: str, bindir: Path) -> str:
    return f'"{python}" "{Path(bindir) / SCRIPT}" sftp'


# ---- board side --------------------------------------------------------------------------------


def _control() -> dict:
    """The control file next to the bin dir this script runs from ({} when absent)."""
    path = Path(__file__).resolve().parent.parent / CONTROL
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _modes() -> set[str]:
    return set(_control().get("modes", MODES))


def _runner(argv: list[str]) -> int:
    """Run the real runner, then doctor its result folder as the control file says."""
    rc = subprocess.call([sys.executable, *argv])
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
    if out is None or not out.is_dir():
        return rc
    modes = _modes()
    if "types" in modes:
        os.symlink("/etc/passwd", out / "outputs" / "passwd.npy")
        os.symlink(str(Path.home()), out / "home-link")
        os.mkfifo(out / "outputs" / "fifo.npy")
    if "huge" in modes:
        with open(out / "outputs" / "huge.npy", "wb") as f:
            f.truncate(HUGE_BYTES)
    if "markup" in modes:
        (out / "[bold red]DIFFERENT[green].txt").write_text("a legal name with markup\n")
        shots = out / "snapshots.jsonl"  # a clock "moves" on a devfreq node named with markup
        first, last = ({"at": at, "run": None if at == "before" else 0, "cpu": {}, "thermal": {},
                        "devfreq": {MARKUP: {"cur_hz": hz, "governor": "userspace"}}}
                       for at, hz in (("before", 1000000000), ("periodic", 300000000)))
        shots.write_text(json.dumps(first) + "\n" + shots.read_text() + json.dumps(last) + "\n")
        print(f"rkdet-run: {MARKUP} board message", flush=True)
    if "records" in modes:
        with open(out / "snapshots.jsonl", "a") as f:
            f.write('{"at": "periodic", "run": 1, "cpu": [1, 2], "devfreq": "x"}\n')
    if "runjson" in modes:
        (out / "run.json").write_text("[1, 2, 3]\n")
    return rc


def _find(argv: list[str]) -> int:
    """The real find; a `-print0` listing of a result folder gains crafted names."""
    sys.stdout.flush()
    rc = subprocess.call(["/usr/bin/find", *argv])
    if "-print0" in argv and "!" not in argv and Path("run.json").exists() and "names" in _modes():
        crafted = [str(n) for n in _control().get("names", ())]
        sys.stdout.buffer.write(b"".join(os.fsencode(n) + b"\0" for n in crafted))
        sys.stdout.buffer.flush()
    return rc


def _sftp() -> int:
    """A pass-through SFTP proxy that stalls forever on a STAT/LSTAT/OPEN under a runs/ folder."""
    server = subprocess.Popen([SFTP_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stall = "stall" in _modes()

    def answers() -> None:
        while True:
            data = server.stdout.read1(1 << 16)  # type: ignore[union-attr]
            if not data:
                return
            stdout.write(data)
            stdout.flush()

    threading.Thread(target=answers, daemon=True).start()
    stalled = False
    while True:
        head = stdin.read(4)
        if len(head) < 4:
            break
        body = stdin.read(struct.unpack(">I", head)[0])
        if stall and not stalled and body and body[0] in _STALL_TYPES and len(body) >= 9:
            size = struct.unpack(">I", body[5:9])[0]
            if b"/runs/" in body[9:9 + size]:
                stalled = True  # from now on nothing is answered: the client must time out
        if not stalled:
            server.stdin.write(head + body)
            server.stdin.flush()
    server.stdin.close()
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: rkdet-hostile.py runner|find|sftp ...", file=sys.stderr)
        return 2
    if argv[0] == "runner":
        return _runner(argv[1:])
    if argv[0] == "find":
        return _find(argv[1:])
    if argv[0] == "sftp":
        return _sftp()
    print(f"rkdet-hostile.py: unknown command {argv[0]!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
