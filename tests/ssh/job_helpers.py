"""Test helpers over rkdet.link.jobs (the product follows and stops jobs with jobs.wait and
pinned_run.stop; these follow a job's log and kill it outright)."""

from __future__ import annotations

import time

from rkdet.link import jobs
from rkdet.link.jobs import DetachedJob
from rkdet.link.shell import CommandRunner, remote_command


def read_log(conn: CommandRunner, job: DetachedJob, offset: int = 0) -> bytes:
    """The job's log from byte `offset` on (poll with the previous length to follow it)."""
    out = bytearray()
    conn.stream(remote_command(["tail", "-c", f"+{offset + 1}", job.logfile]), stdout=conn.capped(out, "tail log"),
                what="tail log")
    return bytes(out)


def kill(conn: CommandRunner, job: DetachedJob, grace: float = 5.0) -> None:
    """SIGTERM the job's process group, then SIGKILL it after `grace` seconds."""
    jobs.signal(conn, job, "TERM")
    deadline = time.monotonic() + grace
    while jobs.is_running(conn, job):
        if time.monotonic() > deadline:
            jobs.signal(conn, job, "KILL")
            break
        time.sleep(0.1)
