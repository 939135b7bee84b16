"""Issue 21 §2 and §8 (init): every file rkdet writes beside a user's config goes through the one
"may I write here" rule (`rkdet.records.io.check_may_write`), checked before the long work starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rkdet.errors import InputError
from rkdet.records.io import check_may_write
from tiny_models import classifier_model, conv_model, image_folder, write_config
from trust_helpers import one_line, rkdet, tree


def _hostile(path: Path, kind: str, victim: Path) -> str:
    if kind == "symlink":
        path.symlink_to(victim)
        return "a symlink"
    if kind == "fifo":
        os.mkfifo(path)
        return "a FIFO"
    if kind == "folder":
        path.mkdir()
        return "a directory"
    path.parent.rename(path.parent.with_name(path.parent.name + ".moved"))
    path.parent.write_text("a file where the folder should be")
    return "cannot create the folder"


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder", "unwritable"])
def test_the_one_rule(tmp_path: Path, kind: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "d").mkdir()
    path = tmp_path / "d" / "out.yaml"
    want = _hostile(path, kind, victim)
    with pytest.raises(InputError) as err:
        check_may_write(path, "thing")
    assert want in str(err.value) and path.name in str(err.value)
    assert victim.read_text() == "mine"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-trust")
    return {"onnx": conv_model(root / "tiny.onnx"), "cal": image_folder(root / "cal", 6, seed=1),
            "gold": image_folder(root / "gold", 2, seed=2)}


@pytest.mark.parametrize("kind", ["symlink", "fifo", "search-json"])
def test_search_refuses_before_it_searches(tmp_path: Path, tiny: dict[str, Path], kind: str) -> None:
    cfg = write_config(tmp_path / "tiny.yaml", tiny["onnx"], tiny["cal"], tiny["gold"])
    victim = tmp_path / "victim.yaml"
    victim.write_text("mine\n")
    out = tmp_path / "builds"
    if kind == "search-json":
        out.mkdir()
        target, want = out / "search.json", "a symlink"
        target.symlink_to(victim)
    else:
        target = tmp_path / "tiny.searched.yaml"
        want = _hostile(target, kind, victim)
    proc = rkdet(["convert", "--config", cfg, "--search", "--out", out])  # a FIFO hung after the whole search
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = one_line(proc)
    assert str(target) in line and want in line
    assert victim.read_text() == "mine\n"
    assert not [p for p in tree(out) if not p.startswith(".") and p != "search.json"]  # nothing was built


@pytest.mark.parametrize("kind", ["unwritable", "fifo"])
def test_init_into_a_bad_place_is_one_line(tmp_path: Path, kind: str) -> None:
    onnx_path = classifier_model(tmp_path / "c.onnx", softmax=False)
    (tmp_path / "d").mkdir()
    out = tmp_path / "d" / "rkdet.yaml"
    want = _hostile(out, kind, tmp_path / "none")
    proc = rkdet(["init", "--onnx", onnx_path, "--out", out, "--force"])
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc)
    assert want in line and "rkdet.yaml" in line
