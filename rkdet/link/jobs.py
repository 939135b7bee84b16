"""Detached jobs on a board: start, re-attach, is it running, its exit code, wait, signal.

Why its own module: a job outlives the connection that started it (setsid, SIGHUP ignored; its pid,
log and exit code in files), so deploy, `--resume` and a fleet scheduler follow it from any later
connection. These are functions over a `CommandRunner` (what a board can do), not SSH methods; the
one polling loop (`wait`) serves deploy's progress and the tests alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from rkdet.link.shell import QUICK_S, CommandRunner, build_command
from rkdet.errors import BoardError

_START = (
    'pidfile=$1; logfile=$2; shift 2\n'
    'rm -f "$pidfile" "$pidfile.rc"\n'
    "setsid sh -c 'trap \"\" HUP; echo $$ > \"$0.tmp\" && mv -f \"$0.tmp\" \"$0\" || exit 125; "
    "\"$@\"; echo $? > \"$0.rc.tmp\"; mv -f \"$0.rc.tmp\" \"$0.rc\"' \"$pidfile\" \"$@\" "
    '> "$logfile" 2>&1 < /dev/null &\n'
    'i=0; while [ ! -s "$pidfile" ]; do i=$((i+1)); '
    'if [ $i -gt 400 ]; then echo "no pid file after 20 s: $pidfile" >&2; exit 1; fi; '
    'sleep 0.05 2>/dev/null || sleep 1; done\n'
    'cat "$pidfile"\n'
)
# running = the pid is alive, not a zombie, and still leads its own session (guards pid reuse)
# THE reading of a /proc/PID/stat line already in $s: fields counted after the last ')' (a process name
# may hold spaces), so $1 state, $2 ppid, $3 process group, $4 session
_STAT_FIELDS = 's=${s##*) }; set -- $s'
_ALIVE = ('p=$(cat "$1" 2>/dev/null) || exit 2; '
          'read -r s 2>/dev/null < "/proc/$p/stat" || exit 1; ' + _STAT_FIELDS + '; [ "$1" != Z ] && [ "$4" = "$p" ]')
# The group is signalled only while it is still the job's session: the pid file names it, and either its
# leader lives as leader of session P (and has not written its exit code: a live P after that is another
# process) or, the leader gone, some process still has process group and session P. Linux keeps a pid
# that is any living process's group or session id from being reused, so a P found that way is the
# job's; once the whole session has ended, P may be a stranger's and nothing is sent. `read` (a builtin)
# takes each stat line without a fork; _STAT_FIELDS splits it.
# The shell builtin (dash, bash, ash) takes `-SIG -PGID`; procps' /usr/bin/kill would not.
_KILL = ('sig=$1; p=$2; pf=$3; read -r named 2>/dev/null < "$pf" || exit 0; [ "$named" = "$p" ] || exit 0\n'
         'if read -r s 2>/dev/null < "/proc/$p/stat"; then\n'
         '  [ -e "$pf.rc" ] && exit 0; ' + _STAT_FIELDS + '; [ "$4" = "$p" ] || exit 0\n'
         'else\n'
         '  found=; for f in /proc/[0-9]*/stat; do read -r s 2>/dev/null < "$f" || continue\n'
         '    ' + _STAT_FIELDS + '; if [ "$3" = "$p" ] && [ "$4" = "$p" ]; then found=1; break; fi; done\n'
         '  [ -n "$found" ] || exit 0\n'
         'fi\n'
         'kill -"$sig" -"$p" 2>/dev/null')


@dataclass(frozen=True)
class DetachedJob:
    """A board-side process group started by `start`; poll, re-attach or kill it."""

    pid: int
    pidfile: str
    logfile: str
    sudo: bool = False

    @property
    def rcfile(self) -> str:
        return self.pidfile + ".rc"


def start(conn: CommandRunner, argv: Sequence[str], pidfile: str, logfile: str, *, sudo: bool = False,
          env: Mapping[str, str] | None = None, keep_env: Iterable[str] = (), timeout: float = 35.0) -> DetachedJob:
    """Start argv in its own session (setsid, SIGHUP ignored) that outlives this connection.

    The pid (= process group id) goes to `pidfile`, output to `logfile`, the exit code to
    `pidfile.rc` when it ends; `is_running`, `attach`, `signal` work from any later connection.
    `env` applies inside the job; `keep_env` names survive `sudo` (see `shell.build_command`).
    """
    pidfile, logfile = conn.abspath(pidfile), conn.abspath(logfile)
    inner = ["env", *[f"{k}={v}" for k, v in (env or {}).items()], *argv] if env else list(argv)
    line = build_command(["sh", "-c", _START, "sh", pidfile, logfile, *inner], sudo=sudo, keep_env=keep_env)
    out, err = bytearray(), bytearray()
    rc = conn.stream(line, stdout=out.extend, stderr=err.extend, timeout=timeout, what=f"start {argv[0]}")
    text = out.decode().strip()
    if rc != 0 or not text.isdigit():
        msg = err.decode("utf-8", "replace").strip().splitlines()
        raise BoardError(f"{conn.target.label}: could not start `{argv[0]}` detached: "
                         f"{msg[-1] if msg else 'exit ' + str(rc)}")
    return DetachedJob(int(text), pidfile, logfile, sudo)


def attach(conn: CommandRunner, pidfile: str, logfile: str, *, sudo: bool = False) -> DetachedJob:
    """Re-attach to a job started earlier (maybe by another connection) from its pid file."""
    pidfile, logfile = conn.abspath(pidfile), conn.abspath(logfile)
    res = conn.run(["cat", pidfile], check=False, sudo=sudo)
    if res.rc != 0 or not res.out.strip().isdigit():
        raise BoardError(f"{conn.target.label}: no job pid in {pidfile}")
    return DetachedJob(int(res.out.strip()), pidfile, logfile, sudo)


def is_running(conn: CommandRunner, job: DetachedJob) -> bool:
    """True while the job's session leader lives (zombies count as finished)."""
    return conn.run(["sh", "-c", _ALIVE, "sh", job.pidfile], check=False, sudo=job.sudo).rc == 0


# _ALIVE in a subshell, then a caller's report (a line of sh with its own arguments), one round trip
_ALIVE_AND = '( ' + _ALIVE + ' ); a=$?; shift; r=$1; shift; eval "$r"; exit $a'


def running_and(conn: CommandRunner, job: DetachedJob, report: str, *args: str) -> tuple[bool, str]:
    """`is_running` and the output of `report` (sh over "$@" = `args`, e.g. counting a result file's
    lines) in one round trip: a run followed every few tenths of a second costs one session per poll."""
    res = conn.run(["sh", "-c", _ALIVE_AND, "sh", job.pidfile, report, *args], check=False, sudo=job.sudo,
                   timeout=QUICK_S)
    return res.rc == 0, res.out


def exit_code(conn: CommandRunner, job: DetachedJob) -> int | None:
    """The job's exit code once it finished normally; None while running or when killed."""
    res = conn.run(["cat", job.rcfile], check=False, sudo=job.sudo)
    return int(res.out.strip()) if res.rc == 0 and res.out.strip().lstrip("-").isdigit() else None


def wait(conn: CommandRunner, job: DetachedJob, timeout: float, poll: float = 0.2,
         on_poll: Callable[[], object] | None = None, still_running: str | None = None,
         report: tuple[str, ...] = (), on_report: Callable[[str], object] | None = None,
         max_poll: float | None = None) -> int | None:
    """Poll until the job ends; return its exit code (None if killed). `on_poll` is called once per
    poll while it runs (progress); past `timeout` seconds BoardError, saying `still_running` if given.
    With `report` (a line of sh and its arguments, see `running_and`) each poll also runs it in the same
    round trip and hands its output to `on_report`, also once more after the job ended. The pause
    between polls starts at `poll` and grows by half each time up to `max_poll` (default: `poll`):
    a short job is seen ending soon, a long one is not asked about every few tenths of a second."""
    deadline = time.monotonic() + timeout
    pause = poll
    while True:
        if report:
            running, out = running_and(conn, job, *report)
            if on_report is not None:
                on_report(out)
        else:
            running = is_running(conn, job)
        if not running:
            break
        if time.monotonic() > deadline:
            raise BoardError(f"{conn.target.label}: "
                             + (still_running or f"job {job.pid} still running after {timeout:g} s"))
        if on_poll is not None:
            on_poll()
        time.sleep(pause)
        pause = min(pause * 1.5, max(poll, max_poll or poll))
    return exit_code(conn, job)


def signal(conn: CommandRunner, job: DetachedJob, name: str, timeout: float | None = None) -> None:
    """Send signal `name` (TERM, KILL, ...) to the job's whole process group while it is still the job's
    (see `_KILL`: a pid reused by another process after the job ended gets nothing); best effort."""
    conn.run(["sh", "-c", _KILL, "sh", name, str(job.pid), job.pidfile], check=False, sudo=job.sudo,
             timeout=timeout)
