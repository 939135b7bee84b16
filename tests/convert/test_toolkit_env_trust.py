"""Issue 30 findings 8 and 13: a toolkit environment is verified before it runs (the user's own, private
folder; the venv's interpreter link; the installed toolkit's RECORD as recorded at creation), a stamp
file alone is never trusted, killed creations are swept, and a FIFO in the wheel cache is not waited on."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rkdet.convert import toolkit_env
from rkdet.errors import InputError

VERSION = "2.3.2"


def _planted(cache: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[toolkit_env.ToolkitEnv, Path]:
    """What the attacker of finding 8 planted: the expected folder name and stamp, and a bin/python wrapper."""
    cache.mkdir(mode=0o700)
    monkeypatch.setenv(toolkit_env.CACHE_ENV, str(cache))
    env = toolkit_env.env_for(VERSION)
    (env.folder / "bin").mkdir(parents=True)
    env.folder.chmod(0o755)
    ran = cache.parent / "wrapper-ran"
    env.python.write_text(f"#!/bin/sh\necho ran > {ran}\n")
    env.python.chmod(0o755)
    (env.folder / toolkit_env.STAMP).write_text(
        f"{toolkit_env.DIST}=={VERSION} sha256={toolkit_env.pinned_sha256(VERSION)}\n")
    return env, ran


def test_a_planted_environment_with_the_right_stamp_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, ran = _planted(tmp_path / "cache", monkeypatch)
    with pytest.raises(InputError) as err:
        toolkit_env.ensure(VERSION)
    assert "\n" not in str(err.value) and str(env.folder) in str(err.value)
    assert not ran.exists()


@pytest.mark.parametrize("how", ["group-writable", "world-writable-cache", "other-owner"])
def test_a_cache_not_private_to_the_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    env, ran = _planted(tmp_path / "cache", monkeypatch)
    if how == "group-writable":
        env.folder.chmod(0o775)
    elif how == "world-writable-cache":
        (tmp_path / "cache").chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        os.chown(env.folder, 65534, 65534)
    with pytest.raises(InputError) as err:
        toolkit_env.ensure(VERSION)
    said = str(err.value)
    assert ("writable by group or others" in said) if how != "other-owner" else ("not to you" in said), said
    assert not ran.exists()


def test_a_real_environment_verifies_and_a_changed_toolkit_file_is_refused(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from tiny_models import toolkit_cache

    shared = toolkit_env.ToolkitEnv(VERSION, Path(toolkit_cache()) / toolkit_env.env_for(VERSION).folder.name)
    if not toolkit_env.ready(shared):
        pytest.fail("the pinned rknn-toolkit2 2.3.2 environment is missing: run bash .ci/setup")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv(toolkit_env.CACHE_ENV, str(cache))
    env = toolkit_env.env_for(VERSION)
    shutil.copytree(shared.folder, env.folder, symlinks=True)  # a copy of the user's own: never the shared one
    (env.folder / toolkit_env.STAMP).write_text(json.dumps(toolkit_env._record(env.folder, VERSION)))
    assert toolkit_env.ensure(VERSION) == env
    init = next(env.folder.glob("lib/python*/site-packages/rknn/api/__init__.py"))
    init.write_text(init.read_text() + "\nimport os  # planted\n")
    with pytest.raises(InputError, match="changed since the environment was made"):
        toolkit_env.ensure(VERSION)


def test_killed_creations_are_swept_and_a_fifo_wheel_is_not_waited_on(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv(toolkit_env.CACHE_ENV, str(cache))
    env = toolkit_env.env_for(VERSION)
    stale = cache / f".{env.folder.name}.new-abc123"
    (stale / "venv").mkdir(parents=True)
    (cache / "wheels").mkdir(mode=0o700)
    fifo = cache / "wheels" / f"rknn_toolkit2-{VERSION}-cp311-cp311-manylinux_2_17_x86_64.whl"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as err:
        toolkit_env.ensure(VERSION)
    assert f"{fifo}: not a regular file" in str(err.value)
    assert not stale.exists()
    assert [p.name for p in cache.iterdir() if ".new-" in p.name] == []
