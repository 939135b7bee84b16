"""The board scripts (probe, pin, restore) run over a connection, and what deploy learns from them.

Why its own module: `rkdet deploy`, `rkdet board info|pin|restore`, the demo and a fleet scheduler
run the same scripts the same way: quoted, settings validated, the session's variables kept through
`sudo` (which resets the environment), a sudo that wants a password named in one line.
"""

from __future__ import annotations

from typing import Any

from rkdet.boardinfo import scripts as board_scripts
from rkdet.link.shell import FILES_S, QUICK_S, CommandRunner
from rkdet.records.probe import ProbeReport, RecordError, parse_probe
from rkdet.errors import BoardError

# Session variables board-side work must keep through `sudo` (which resets the environment): above all
# RKDET_ROOT, without which a script under sudo on an emulated board would address the host's real /sys.
SESSION_ENV = ("RKDET_ROOT", "PYTHONPATH", "PATH")


def run_board_script(conn: CommandRunner, name: str, scripts_dir: str, env: dict[str, str],
                     sudo: bool) -> tuple[int, list[dict[str, Any]]]:
    """Run one board script (quoted, env applied after sudo); return its exit code and JSON records."""
    board_scripts.check_board_env(env)
    res = conn.run(["sh", f"{scripts_dir}/{name}.sh"], check=False, sudo=sudo, env=env,
                   keep_env=SESSION_ENV if sudo else ())
    records = board_scripts.parse_records(res.out)
    if sudo and res.rc != 0 and not records and conn.sudo_wants_password(res):  # the script never started
        raise BoardError(conn.sudo_password_message())
    return res.rc, records


def parse_probe_of(label: str, records: list[dict[str, Any]]) -> ProbeReport:
    """probe.sh's report; a malformed record is the board's fault: exit 3 naming it."""
    try:
        return parse_probe(records)
    except RecordError as err:
        raise BoardError(f"{label}: probe.sh answered a malformed {err}; check the board's board scripts "
                         "(a broken or hostile board?)") from None


def probe_board(conn: CommandRunner, scripts_dir: str, env: dict[str, str], sudo: bool) -> ProbeReport:
    """Run probe.sh (changes nothing on the board); BoardError when it failed or the board is not usable."""
    rc, records = run_board_script(conn, "probe", scripts_dir, env, sudo)
    report = parse_probe_of(conn.target.label, records)
    if rc != 0 or not report.ok:
        report.raise_for_status(conn.target.label)
    return report


def state_dir_for(conn: CommandRunner, workdir: str, sudo: bool, given: str | None = None) -> str:
    """Where pin keeps its saved state: as given, else /run/rkdet for root (survives a dropped
    connection, cleared by a reboot that resets the knobs anyway), else the user's own work dir."""
    if given:
        return given
    login_is_root = conn.run(["id", "-u"], timeout=QUICK_S).out.strip() == "0"
    return board_scripts.DEFAULT_STATE_DIR if (login_is_root or sudo) else f"{workdir}/state"


def is_emulated_runtime(conn: CommandRunner) -> bool:
    """True when the board's rknnlite declares itself a test double (the rkdet emulator's)."""
    probe = "import rknnlite.api as a; print(bool(getattr(a, 'RKDET_EMULATED', '')))"
    res = conn.run(["python3", "-c", probe], check=False, timeout=FILES_S)
    return res.rc == 0 and res.out.strip() == "True"
