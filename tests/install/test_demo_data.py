"""`rkdet demo` finds the shipped model and pages (kept in the repository) through --data DIR."""

from __future__ import annotations

from pathlib import Path

import pytest

from rkdet.cli.demo import demo_config
from rkdet.config import DEFAULT_CONFIG
from rkdet.errors import EXIT_BAD_INPUT, InputError

REPO = Path(__file__).resolve().parents[2]


def test_data_dir_gives_its_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert demo_config(None, REPO) == REPO / DEFAULT_CONFIG
    assert demo_config(tmp_path / "mine.yaml", REPO) == tmp_path / "mine.yaml"  # --config wins


def test_data_dir_without_the_demo_is_one_line_exit_2(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        demo_config(None, tmp_path)
    assert err.value.exit_code == EXIT_BAD_INPUT
    message = str(err.value)
    assert "\n" not in message and str(tmp_path) in message and "--data DIR" in message


def test_a_checkout_run_finds_its_own_data_from_any_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no configs/ here: the checkout rkdet runs from has them
    assert demo_config(None, None) == REPO / DEFAULT_CONFIG
