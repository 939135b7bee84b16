"""One board, one holder: the board lock's records (board_scripts/lock.sh) as typed values, and what
the host says and hides about them.

run-pinned.sh takes an exclusive lock in the pin state directory before pin and lets it go after
restore, so a second pinned job on the board waits for it (`rkdet deploy --lock-timeout`) or is
refused, and one job's restore never unpins the board under another's run. The holder record names
the deploying ``user@workstation``: that name is shown to the user who is kept waiting, and kept out
of every published run folder (`private_names` feeds the deploy's scrubber).
"""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rkdet.errors import BoardError
from rkdet.records.ids import is_run_id
from rkdet.textsafe import visible

#: the environment run-pinned.sh reads for the lock (the holder's name is private: not in deploy.json)
TIMEOUT_ENV, HOLDER_ENV, BUILD_ENV, RUN_ENV = "RKDET_LOCK_TIMEOUT", "RKDET_LOCK_HOLDER", "RKDET_LOCK_BUILD", "RKDET_LOCK_RUN"
PRIVATE_ENV = (HOLDER_ENV,)
#: what published files say instead of a lock holder's user@workstation
REDACTED = "<lock holder>"
#: how much of one board-written lock field a line shows (a hostile board may write megabytes)
SHOWN_CHARS = 80


class LockRecordError(ValueError):
    """A lock record of the wrong shape (a broken or hostile board); the message names the field."""


def _text(rec: Mapping[str, Any], key: str) -> str:
    value = rec.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise LockRecordError(f"lock record: field {key!r} is {str(value)[:60]!r}, not a string")
    return value


def _int(rec: Mapping[str, Any], key: str) -> int | None:
    value = rec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise LockRecordError(f"lock record: field {key!r} is {str(value)[:60]!r}, not an integer")
    return value


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or held) the board lock: the holder record of lock.sh."""

    pid: int | None
    pid_start: int | None
    method: str  # "flock" | "link"
    holder: str  # the deploying user@workstation (private)
    board_user: str
    build: str
    run: str
    started: str  # UTC, the board's clock

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> LockHolder:
        return cls(pid=_int(rec, "pid"), pid_start=_int(rec, "pid_start"), method=_text(rec, "method"),
                   holder=_text(rec, "holder"), board_user=_text(rec, "board_user"), build=_text(rec, "build"),
                   run=_text(rec, "run"), started=_text(rec, "started"))

    def describe(self) -> str:
        """One line naming the holder, for the user kept waiting (never for a published file). Every field is
        the board's word (a hostile board writes what it likes): shown through textsafe, cut, so a newline,
        escape codes or U+202E cannot forge a second line, recolour or reorder the refusal; a `run` that is
        not an id rkdet makes (records/ids.py) is said to be one, and is only ever shown, never used."""
        def shown(value: str, default: str) -> str:
            return visible(value, SHOWN_CHARS) if value else default

        run = self.run if is_run_id(self.run) else f"{shown(self.run, '?')} (not an rkdet run id)" if self.run else "?"
        return (f"{shown(self.holder, 'unknown')} (board user {shown(self.board_user, '?')}, "
                f"build {shown(self.build, '?')}, run {run}, pid {self.pid if self.pid is not None else '?'}, "
                f"since {shown(self.started, '?')})")


@dataclass(frozen=True)
class LockState:
    """probe.sh's "lock" record: is the board free, held, or is a stale lock left (its job is gone)."""

    status: str  # "free" | "held" | "stale" | "unknown" (no lock record: scripts older than the lock)
    method: str
    holder: LockHolder | None

    def line(self) -> str:
        if self.status == "free":
            return f"free ({self.method})"
        if self.status == "unknown" or self.holder is None:
            return self.status
        if self.status == "stale":
            return f"stale: left by {self.holder.describe()}, whose job is gone; the next deploy takes it over"
        return f"held by {self.holder.describe()} ({self.method})"


@dataclass(frozen=True)
class JobLock:
    """What one run-pinned.sh job's lock records say (in its log)."""

    acquired: bool
    waited_s: int | None
    busy: LockHolder | None  # gave up: this holder kept the board
    waited_for: LockHolder | None  # the holder it found (and waited for) first
    taken_over: LockHolder | None  # a stale lock of a killed job, replaced
    mine: LockHolder | None  # this job's own record

    def holders(self) -> list[LockHolder]:
        return [h for h in (self.busy, self.waited_for, self.taken_over, self.mine) if h is not None]


def _lock_records(records: Sequence[Mapping[str, Any]], script: str) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("record") == "lock" and r.get("script") == script]


def _named(label: str, parse: Callable[[], Any]) -> Any:
    try:
        return parse()
    except LockRecordError as err:
        raise BoardError(f"{label}: the board scripts answered a malformed {err} (a broken or hostile board?)") from None


def probe_lock(records: Sequence[Mapping[str, Any]], label: str = "board") -> LockState:
    """The lock state from probe.sh's records; a malformed record is the board's fault (exit 3 naming it)."""
    return _named(label, lambda: _probe_lock(records))


def job_lock(records: Sequence[Mapping[str, Any]], label: str = "board") -> JobLock:
    """The lock records of run-pinned.sh in a job's log; a malformed record is exit 3 naming the board."""
    return _named(label, lambda: _job_lock(records))


def _probe_lock(records: Sequence[Mapping[str, Any]]) -> LockState:
    own = _lock_records(records, "probe")
    if not own:
        return LockState("unknown", "", None)
    rec = own[-1]
    status = _text(rec, "status")
    if status not in ("free", "held", "stale"):
        raise LockRecordError(f"lock record: status {status[:40]!r} is not free, held or stale")
    holder = LockHolder.from_record(rec) if status != "free" else None
    return LockState(status, _text(rec, "method"), holder)


def _job_lock(records: Sequence[Mapping[str, Any]]) -> JobLock:
    own = _lock_records(records, "run-pinned")

    def first(status: str) -> Mapping[str, Any] | None:
        return next((r for r in own if r.get("status") == status), None)

    acquired, busy, waiting, taken = first("acquired"), first("busy"), first("waiting"), first("taken_over")
    previous = taken.get("previous") if taken is not None else None
    if taken is not None and not isinstance(previous, Mapping):
        raise LockRecordError("lock record: field 'previous' is not an object")
    done = acquired or busy
    return JobLock(acquired=acquired is not None, waited_s=_int(done, "waited_s") if done else None,
                   busy=LockHolder.from_record(busy) if busy is not None and busy.get("pid") is not None else None,
                   waited_for=LockHolder.from_record(waiting) if waiting is not None else None,
                   taken_over=LockHolder.from_record(previous) if isinstance(previous, Mapping) else None,
                   mine=LockHolder.from_record(acquired) if acquired is not None else None)


def private_names(holders: Sequence[LockHolder | None]) -> set[str]:
    """The holder names to keep out of published files: as written, and as they read inside JSON."""
    names: set[str] = set()
    for h in holders:
        if h is not None and h.holder and h.holder != "unknown":
            names |= {h.holder, json.dumps(h.holder)[1:-1], visible(h.holder, SHOWN_CHARS)}  # as `describe` shows it
    return names


def this_holder() -> str:
    """user@workstation of the deploying user (the board-side record only; never published)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname() or 'unknown'}"


def holder_env(fingerprint: str, run_id: str, timeout: int) -> dict[str, str]:
    """run-pinned.sh's lock settings for one deploy."""
    return {TIMEOUT_ENV: str(int(timeout)), HOLDER_ENV: this_holder(), BUILD_ENV: fingerprint[:16], RUN_ENV: run_id}


def busy_error(label: str, holder: LockHolder | None, waited: int | None) -> BoardError:
    """Exit 3 naming who holds the board."""
    who = holder.describe() if holder is not None else "another pinned job"
    waited_text = f"waited {waited} s; " if waited else ""
    return BoardError(f"{label}: busy: the board is held by {who}; {waited_text}nothing was changed: try again "
                      "later, or wait for it with --lock-timeout SECONDS")


def refusal(records: Sequence[Mapping[str, Any]], lock: JobLock, label: str) -> BoardError | None:
    """Why a pinned job never got the board (nothing changed on it), or None when it did, or when its log
    has no word of the lock (cut off before it, or a job of scripts older than the lock)."""
    if lock.acquired:
        return None
    if lock.busy is not None or any(r.get("record") == "lock" and r.get("status") == "busy" for r in records):
        return busy_error(label, lock.busy, lock.waited_s)
    ended = [r for r in records if r.get("script") == "run-pinned" and r.get("record") == "result"]
    if ended and not any(r.get("script") == "pin" for r in records):
        return BoardError(f"{label}: run-pinned.sh: {visible(ended[-1].get('reason') or 'failed before pin', 300)}")
    return None


def check_before_push(state: LockState, label: str, timeout: int, pinned: bool, log: Callable[[str], None]) -> None:
    """Preflight: refuse at once (exit 3, nothing pushed) when the board is held and the deploy will not
    wait (--lock-timeout 0, or --no-pin: an unpinned run takes no lock and does not wait, but would share
    the NPU with the pinned run); else say what the job will find."""
    if state.status == "held":
        if timeout <= 0 or not pinned:
            raise busy_error(label, state.holder, None)
        log(f"the board is held by {state.holder.describe() if state.holder else 'another job'}; "
            f"the run waits up to {timeout} s for it")
    elif state.status == "stale" and state.holder is not None and pinned:
        log(f"a stale board lock (left by {state.holder.describe()}, whose job is gone) will be taken over")
