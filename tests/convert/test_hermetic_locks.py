"""Issue 30 finding 18: converts leave no growing heap of empty lock files in `$TMPDIR/rkdet-hermetic-<uid>/`;
the sweep never removes a lock someone holds or has just opened."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from rkdet.convert.hermetic import STALE_LOCK_S, sweep_stale_locks, work_folder


def _lock(base: Path, name: str, age: float) -> Path:
    path = base / f"{name}.lock"
    path.touch()
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_only_stale_unheld_lock_files_are_swept(tmp_path: Path) -> None:
    stale, fresh, held = (_lock(tmp_path, "a", 2 * STALE_LOCK_S), _lock(tmp_path, "b", 10),
                          _lock(tmp_path, "c", 2 * STALE_LOCK_S))
    link = tmp_path / "d.lock"
    link.symlink_to(stale)
    fd = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert sweep_stale_locks(tmp_path) == 1
    finally:
        os.close(fd)
    assert not stale.exists() and fresh.exists() and held.exists() and link.is_symlink()


def test_work_folder_sweeps_earlier_locks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    base = tmp_path / f"rkdet-hermetic-{os.getuid()}"
    base.mkdir(mode=0o700)
    olds = [_lock(base, f"{i:024x}", 2 * STALE_LOCK_S) for i in range(20)]
    with work_folder("f" * 64) as folder:
        assert folder.is_dir()
    assert not any(p.exists() for p in olds)
    assert [p.name for p in base.iterdir()] == ["f" * 24 + ".lock"]
