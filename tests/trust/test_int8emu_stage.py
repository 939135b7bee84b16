"""The INT8 emulation a build folder holds is staged for an emulated board only as a regular file inside
the folder whose sha256 is the manifest's: a changed file or a link is one line naming it, before any push."""

from __future__ import annotations

import hashlib
import os

import pytest

from rkdet.backends.emulator_stage import push_int8_emulation
from rkdet.errors import InputError
from rkdet.records.manifest import INT8_EMULATION_FILE


class NoPush:
    """A link that fails the test if anything reaches the board."""

    def __getattr__(self, name):
        raise AssertionError(f"nothing may reach the board, yet {name} was asked for")


def test_a_changed_int8_emulation_is_refused_before_the_push(tmp_path):
    (tmp_path / INT8_EMULATION_FILE).write_bytes(b"changed after convert")
    recorded = hashlib.sha256(b"what convert wrote").hexdigest()
    with pytest.raises(InputError) as err:
        push_int8_emulation(NoPush(), tmp_path, "/board/model", sha256=recorded)
    message = str(err.value)
    assert "\n" not in message and INT8_EMULATION_FILE in message and "int8_emulation.sha256" in message


def test_a_linked_int8_emulation_is_refused_and_its_target_unread(tmp_path):
    secret = tmp_path / "outside"
    secret.write_bytes(b"host file")
    build = tmp_path / "build"
    build.mkdir()
    os.symlink(secret, build / INT8_EMULATION_FILE)
    with pytest.raises(InputError) as err:
        push_int8_emulation(NoPush(), build, "/board/model", sha256=hashlib.sha256(b"host file").hexdigest())
    assert INT8_EMULATION_FILE in str(err.value) and "host file" not in str(err.value)


def test_a_build_without_one_stages_nothing(tmp_path):
    stats, name = push_int8_emulation(NoPush(), tmp_path, "/board/model", sha256="0" * 64)
    assert name is None and stats.files_sent == 0
