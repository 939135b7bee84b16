"""A run's `deploy.json` (and its private part): the status machine and the one place that writes it.

Why its own module: `--resume`, `rkdet history` and a fleet scheduler read a run's state; the status
moves preflight -> running -> complete | interrupted | failed | disconnected only through
`DeployState.advance`, and every write goes through `DeployState.save`, which publishes the record
without user names or paths (docs/FORMATS.md) and keeps what `--resume` needs in a private file of
the user who deployed, removed once the run is final.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from enum import Enum
from pathlib import Path
from typing import Any

from rkdet.boardinfo import lock as board_lock
from rkdet.errors import InputError
from rkdet.records.io import read_json, read_json_object
from rkdet.records.io import write_atomic

DEPLOY_SCHEMA = "rkdet.deploy/1"
# What a published run folder must not hold (user names, host and board paths) but --resume needs:
# kept in a private file of the user who deployed, one per run id (docs/FORMATS.md).
PRIVATE_SCHEMA = "rkdet.deploy-private/1"
PRIVATE_KEYS = ("board", "build", "remote", "job_env", "reference", "run_settings")
_PATH_ENV = ("RKDET_STATE_DIR", "RKDET_WORK_DIR")
# RunSettings fields that name board paths or carry test-control text: in the private part only
_PRIVATE_SETTINGS = ("workdir", "state_dir", "fault")


class DeployStatus(str, Enum):
    """Where a run is; `deploy.json`'s `status`."""

    PREFLIGHT = "preflight"  # nothing on the board changed yet
    RUNNING = "running"  # pushed, the job started (or about to)
    DISCONNECTED = "disconnected"  # the connection broke: `--resume` picks it up
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    COMPLETE = "complete"

    @property
    def resumable(self) -> bool:
        return self in (DeployStatus.RUNNING, DeployStatus.DISCONNECTED)


def write_json(path: Path, obj: Any, mode: int = 0o644) -> None:
    """A JSON file of a run folder, written atomically (the one writer)."""
    write_atomic(str(path), json.dumps(obj, indent=2, sort_keys=True) + "\n", perms=mode)


def private_dir() -> Path:
    """`$XDG_STATE_HOME/rkdet/deploys` (default `~/.local/state/rkdet/deploys`)."""
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "rkdet" / "deploys"


def private_record_path(run_id: str) -> Path:
    if not re.fullmatch(r"[0-9A-Za-z-]+", run_id or ""):
        raise InputError(f"run id {run_id!r} is not one rkdet deploy makes")
    return private_dir() / f"{run_id}.json"


def load_record(folder: Path) -> dict[str, Any]:
    """A run's deploy.json merged with its private part (what --resume needs)."""
    try:
        record = read_json_object(folder / "deploy.json")
    except FileNotFoundError:
        raise InputError(f"{folder / 'deploy.json'}: missing; not a run folder rkdet deploy made") from None
    path = private_record_path(str(record.get("run_id")))
    try:
        private = read_json_object(path)
    except FileNotFoundError:
        raise InputError(f"{folder}: its private resume data {path} is missing; a run can be resumed only by the "
                         "user (and machine) that started it") from None
    record.update({k: private[k] for k in PRIVATE_KEYS if k in private})
    return record


def _status_of(doc: Any) -> DeployStatus | None:
    try:
        return DeployStatus(doc.get("status")) if isinstance(doc, dict) else None
    except ValueError:
        return None


def latest_unfinished(results_root: Path, label: str) -> Path:
    """The newest run folder of this board whose deploy did not complete (for --resume)."""
    candidates = []
    for record in (results_root / label).glob("*/*/deploy.json"):
        try:
            doc = read_json(record)
        except (OSError, InputError):
            continue
        status = _status_of(doc)
        if status is not None and status.resumable:
            candidates.append(record.parent)
    if not candidates:
        raise InputError(f"{results_root / label}: no unfinished deploy to resume for this board")
    return max(candidates, key=lambda p: p.name)


def remove_partial(folder: Path) -> None:
    """Drop a local run folder that never got past preflight (nothing worth keeping)."""
    try:
        doc = read_json(folder / "deploy.json")
    except (OSError, InputError):
        doc = None
    if doc is None or (isinstance(doc, dict) and doc.get("status") in (None, DeployStatus.PREFLIGHT.value)):
        shutil.rmtree(folder, ignore_errors=True)


class DeployState:
    """One run's record: `advance` moves its status (the only writer of `status`), `update` sets
    other facts, `save` writes deploy.json (public) and the private part."""

    def __init__(self, folder: Path, private_label: str, public_label: str, user: str | None,
                 record: dict[str, Any] | None = None) -> None:
        self.folder = folder
        self.private_label, self.public_label, self.user = private_label, public_label, user
        self.record: dict[str, Any] = record if record is not None else {}
        self.lock_names: set[str] = set()  # board lock holders' user@host: kept out of published files

    @property
    def status(self) -> DeployStatus | None:
        return _status_of(self.record)

    def advance(self, status: DeployStatus, **facts: Any) -> None:
        """Set the status (and facts learned with it) and save."""
        self.record.update(facts, status=DeployStatus(status).value)
        self.save()

    def update(self, **facts: Any) -> None:
        """Record facts that do not change the status (not saved until the next save/advance)."""
        if "status" in facts:
            raise ValueError("status changes go through DeployState.advance")
        self.record.update(facts)

    def save(self) -> None:
        """deploy.json without user names or paths (publishable); the rest, while the run may still be
        resumed, in the private record (removed once the run is final)."""
        write_json(self.folder / "deploy.json", self.public())
        path = private_record_path(self.record["run_id"])
        status = self.status
        if status is not None and status.resumable:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            private = {"schema": PRIVATE_SCHEMA, "run_id": self.record["run_id"], "folder": str(self.folder.resolve()),
                       **{k: self.record[k] for k in PRIVATE_KEYS if k in self.record}}
            write_json(path, private, mode=0o600)
        else:
            path.unlink(missing_ok=True)

    def _secrets(self) -> list[tuple[str, str]]:
        """(private text, what the published files say instead), longest first."""
        pairs = [(self.private_label, self.public_label)]
        own = (self.record.get("job_env") or {}).get(board_lock.HOLDER_ENV)
        pairs += [(name, board_lock.REDACTED) for name in self.lock_names | ({own} if own else set())]
        if self.record.get("build"):
            pairs.append((str(self.record["build"]), os.path.relpath(self.record["build"], self.folder)))
        remote = self.record.get("remote") or {}
        env = self.record.get("job_env") or {}
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

    def public(self) -> dict[str, Any]:
        """The publishable deploy.json."""
        record = self.record
        public = {k: v for k, v in record.items() if k not in PRIVATE_KEYS}
        public["board"] = self.public_label
        if record.get("build"):
            public["build"] = os.path.relpath(record["build"], self.folder)
        if record.get("reference"):
            public["reference"] = os.path.relpath(record["reference"], self.folder)
        public["job_env"] = {k: v for k, v in (record.get("job_env") or {}).items()
                             if k not in _PATH_ENV + board_lock.PRIVATE_ENV}
        return self.scrub(public)


def public_settings(settings_json: dict[str, Any]) -> dict[str, Any]:
    """deploy.json's `settings`: the run settings without board paths and test-control text, plus
    `fault_injected` and `emulated_npu_lsb_k` (what a reader needs of the test controls)."""
    public = {k: v for k, v in settings_json.items() if k not in _PRIVATE_SETTINGS}
    public["fault_injected"] = bool(settings_json.get("fault"))
    public["emulated_npu_lsb_k"] = settings_json.get("emulate_npu")
    return public
