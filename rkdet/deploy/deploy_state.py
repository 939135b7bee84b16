"""A run's `deploy.json` (and its private part): the one place that writes it.

Why its own module: `--resume`, `rkdet history` and a fleet scheduler read a run's state. The record
is the typed `DeployRecord` (rkdet/records/deploy_record.py, with its reader and status machine);
here its status moves preflight -> running -> complete | interrupted | failed | disconnected only
through `DeployState.advance` (a move the machine does not allow is a TransitionError: a bug), and
every write goes through `DeployState.save`, which publishes the record without user names or paths
(docs/FORMATS.md) and keeps what `--resume` needs in a private file of the user who deployed,
removed once the run is final.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from rkdet.boardinfo import lock as board_lock
from rkdet.deploy.settings import RunSettings
from rkdet.errors import InputError
from rkdet.records.ids import check_run_id
from rkdet.records.deploy_record import (DEPLOY_SCHEMA, PRIVATE_KEYS, PRIVATE_SCHEMA, DeployRecord, DeployStatus,
                                         PrivateRecord, PublishedSettings, read_deploy_record, read_private_record,
                                         settings_from_json, write_deploy_record, write_private_record)

__all__ = ["DEPLOY_SCHEMA", "PRIVATE_KEYS", "PRIVATE_SCHEMA", "DeployState", "DeployStatus", "latest_unfinished",
           "load_record", "private_dir", "private_record_path", "public_settings", "refuse_session_step", "remove_partial"]

_PATH_ENV = ("RKDET_STATE_DIR", "RKDET_WORK_DIR")
# RunSettings fields that name board paths or carry test-control text: in the private part only
_PRIVATE_SETTINGS = ("workdir", "state_dir", "fault", "inputs")


def private_dir() -> Path:
    """`$XDG_STATE_HOME/rkdet/deploys` (default `~/.local/state/rkdet/deploys`)."""
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "rkdet" / "deploys"


def private_record_path(run_id: str) -> Path:
    return private_dir() / f"{check_run_id(run_id)}.json"


def load_record(folder: Path) -> DeployRecord:
    """A run's deploy.json merged with its private part (what --resume needs)."""
    try:
        record = read_deploy_record(folder / "deploy.json")
    except FileNotFoundError:
        raise InputError(f"{folder / 'deploy.json'}: missing; not a run folder rkdet deploy made") from None
    path = private_record_path(record.run_id)
    try:
        private = read_private_record(path)
    except FileNotFoundError:
        raise InputError(f"{folder}: its private resume data {path} is missing; a run can be resumed only by the "
                         "user (and machine) that started it") from None
    return private.merged(record)


def _status_of(path: Path) -> DeployStatus | None:
    """The status of a deploy.json; None when it is unreadable or malformed (not a run to pick)."""
    try:
        return read_deploy_record(path).status
    except (OSError, InputError):
        return None


def latest_unfinished(results_root: Path, label: str) -> Path:
    """The newest run folder of this board whose deploy did not complete (for --resume)."""
    candidates = []
    for record in (results_root / label).glob("*/*/deploy.json"):
        status = _status_of(record)
        if status is not None and status.resumable:
            candidates.append(record.parent)
    if not candidates:
        raise InputError(f"{results_root / label}: no unfinished deploy to resume for this board")
    return max(candidates, key=lambda p: p.name)


def refuse_session_step(folder: Path, record: DeployRecord | None = None) -> None:
    """`--resume` takes plain runs only: a step of a pinned session (`deploy --backends A,B`, a fleet board's
    cells) shares ONE job, its log and its pin with the other steps, and resuming one run alone would leave
    the others (and the pair's verdict) behind, so it is refused, one line naming the run and the rerun, before
    any board command. The board needs no resume for its own sake: the session's job restores it when it ends."""
    if record is None:
        try:
            record = read_deploy_record(folder / "deploy.json")
        except FileNotFoundError:
            raise InputError(f"{folder / 'deploy.json'}: missing; not a run folder rkdet deploy made") from None
    session = record.session
    if session is None:
        return
    rerun = (f"rkdet deploy --backends {','.join(session.backends)}" if len(session.backends) > 1
             else f"rkdet deploy --backend {session.backends[0]}")
    raise InputError(f"{folder}: run {record.run_id} is step {session.index + 1} of {len(session.runs)} "
                     f"({session.backends[session.index]}) of pinned session {session.id}; --resume does not resume "
                     f"a session's runs (the session's own job restores the board when it ends): rerun `{rerun}` "
                     "(or the `rkdet fleet deploy` that started it)")


def remove_partial(folder: Path) -> None:
    """Drop a local run folder that never got past preflight (nothing worth keeping)."""
    path = folder / "deploy.json"
    if not path.exists() or _status_of(path) in (None, DeployStatus.PREFLIGHT):
        shutil.rmtree(folder, ignore_errors=True)


class DeployState:
    """One run's record: `advance` moves its status (the only writer of `status`, through the status
    machine of rkdet/records/deploy_record.py), `update` sets other facts, `save` writes deploy.json
    (public) and the private part."""

    def __init__(self, folder: Path, private_label: str, public_label: str, user: str | None,
                 record: DeployRecord | None = None) -> None:
        self.folder = folder
        self.private_label, self.public_label, self.user = private_label, public_label, user
        self.record: DeployRecord | None = record
        self.lock_names: set[str] = set()  # board lock holders' user@host: kept out of published files

    @property
    def status(self) -> DeployStatus | None:
        return self.record.status if self.record is not None else None

    def start(self, record: DeployRecord) -> None:
        """The new run's record (status not set yet): the first `advance` moves it to preflight."""
        if self.record is not None:
            raise RuntimeError("DeployState.start: this run already has a record")
        self.record = record

    def _current(self) -> DeployRecord:
        if self.record is None:
            raise RuntimeError("DeployState: no record yet (start it first)")
        return self.record

    def advance(self, status: DeployStatus, **facts: Any) -> None:
        """Set the status (and facts learned with it) and save; a move the status machine does not
        allow raises TransitionError (a bug)."""
        self.record = self._current().advanced(status, **facts)
        self.save()

    def update(self, **facts: Any) -> None:
        """Record facts that do not change the status (not saved until the next save/advance)."""
        self.record = self._current().with_facts(**facts)

    def save(self) -> None:
        """deploy.json without user names or paths (publishable); the rest, while the run may still be
        resumed, in the private record (removed once the run is final)."""
        record = self._current()
        write_deploy_record(self.folder / "deploy.json", self.public())
        path = private_record_path(record.run_id)
        status = self.status
        if status is not None and status.resumable:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_private_record(path, PrivateRecord.of(record, self.folder))
        else:
            path.unlink(missing_ok=True)

    def _secrets(self) -> list[tuple[str, str]]:
        """(private text, what the published files say instead), longest first."""
        record = self._current()
        pairs = [(self.private_label, self.public_label)]
        env = dict(record.job_env or {})
        own = env.get(board_lock.HOLDER_ENV)
        pairs += [(name, board_lock.REDACTED) for name in self.lock_names | ({own} if own else set())]
        if record.build:
            pairs.append((record.build, os.path.relpath(record.build, self.folder)))
        remote = record.remote or {}
        if env.get("RKDET_STATE_DIR"):
            pairs.append((env["RKDET_STATE_DIR"], "<state_dir>"))
        if remote.get("workdir"):
            pairs.append((remote["workdir"], "<workdir>"))
        if self.user:
            pairs.append((f"/home/{self.user}", "<home>"))
        return sorted(pairs, key=lambda p: -len(p[0]))

    def scrub(self, obj: Any) -> Any:
        """`obj` with user@host:port, host build paths and board work/state paths replaced."""
        if isinstance(obj, str):
            for secret, public in self._secrets():
                obj = obj.replace(secret, public)
            return obj
        if isinstance(obj, dict):
            return {k: self.scrub(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.scrub(v) for v in obj]
        return obj

    def public(self) -> DeployRecord:
        """The publishable deploy.json: no private keys, board as host_port, build and reference
        relative to the run folder, the job environment without paths or the holder, every text scrubbed."""
        record = self._current()
        public = {k: v for k, v in record.to_json().items() if k not in PRIVATE_KEYS}
        public["board"] = self.public_label
        if record.build:
            public["build"] = os.path.relpath(record.build, self.folder)
        if record.reference:
            public["reference"] = os.path.relpath(record.reference, self.folder)
        public["job_env"] = {k: v for k, v in (record.job_env or {}).items()
                             if k not in _PATH_ENV + board_lock.PRIVATE_ENV}
        return DeployRecord.from_json(self.scrub(public), where=str(self.folder / "deploy.json"))


def public_settings(settings: RunSettings) -> PublishedSettings:
    """deploy.json's `settings`: the run settings without board paths and test-control text, plus
    `fault_injected` and `emulated_npu_lsb_k` (what a reader needs of the test controls)."""
    whole = settings.to_json()
    public = {k: v for k, v in whole.items() if k not in _PRIVATE_SETTINGS}
    public["fault_injected"] = bool(settings.fault)
    public["emulated_npu_lsb_k"] = settings.emulate_npu
    return settings_from_json(public)
