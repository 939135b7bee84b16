"""Pinned per-version toolkit environments (issue 23): where they live, the pinned hashes, the refusals.

No network here: a wrong wheel put into the cache is refused by its hash (and removed) before anything
is installed; an unpinned version is refused in one line before a build starts; a config option an older
toolkit lacks is left out only at 2.5.0's default.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from pathlib import Path

import pytest
from convert_helpers import run_rkdet

from rkdet.convert import toolkit2_worker
from rkdet.convert.toolkit_env import PINNED_WHEELS, cache_root, ensure, env_for, pinned_sha256
from rkdet.errors import ConversionError, InputError


def test_the_cache_follows_the_user_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RKDET_TOOLKIT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "rkdet" / "toolkits"
    env = env_for("2.3.2")
    assert env.folder.parent == cache_root() and env.folder.name.startswith("rknn-toolkit2-2.3.2-cp311-")
    monkeypatch.setenv("RKDET_TOOLKIT_CACHE", str(tmp_path / "mine"))
    assert env_for("2.3.2").folder.parent == (tmp_path / "mine").resolve()


def test_unpinned_versions_are_refused(tmp_path: Path) -> None:
    assert set(PINNED_WHEELS) >= {"2.3.2", "2.5.0"} and all(len(h["cp311"]) == 64 for h in PINNED_WHEELS.values())
    with pytest.raises(InputError, match="rkdet pins the wheels of rknn-toolkit2 2.3.2, 2.5.0"):
        pinned_sha256("2.2.0")
    proc = run_rkdet("convert", "--config", "configs/yolov8.yaml", "--toolkit", "2.2.0", "--out", str(tmp_path / "o"))
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert proc.returncode == 2 and len(lines) == 1 and "toolkit.version '2.2.0'" in lines[0]
    assert not (tmp_path / "o").exists()


def test_a_wheel_with_the_wrong_hash_is_removed_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RKDET_TOOLKIT_CACHE", str(tmp_path / "cache"))
    wheels = tmp_path / "cache" / "wheels"
    wheels.mkdir(parents=True)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    fake = wheels / f"rknn_toolkit2-2.3.2-{tag}-{tag}-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    fake.write_bytes(b"not the toolkit")
    with pytest.raises(ConversionError, match=r"sha256 .* is not the pinned a05a8fd7"):
        ensure("2.3.2")
    assert not fake.exists() and hashlib.sha256(b"not the toolkit").hexdigest() != pinned_sha256("2.3.2")
    assert not env_for("2.3.2").folder.exists()  # nothing half-made left in place
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == ["wheels"]


def test_options_an_older_toolkit_lacks(tmp_path: Path) -> None:
    def config_232(self, mean_values=None, std_values=None, target_platform=None, **kwargs):  # type: ignore[no-untyped-def]
        pass

    assert "mini_rknn" not in inspect.signature(config_232).parameters
    kept, dropped, refused = toolkit2_worker._config_for(config_232, {
        "mean_values": [[0, 0, 0]], "target_platform": "rk3588", "mini_rknn": False, "compute_order": "WidthFirst"})
    assert kept == {"mean_values": [[0, 0, 0]], "target_platform": "rk3588"}
    assert dropped == ["compute_order", "mini_rknn"] and refused is None
    _, _, refused = toolkit2_worker._config_for(config_232, {"compute_order": "DepthFirst"})
    assert refused == "compute_order"  # a non-default value is never silently dropped
    _, _, refused = toolkit2_worker._config_for(config_232, {"something_new": 1})
    assert refused == "something_new"
