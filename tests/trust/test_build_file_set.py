"""Issue 30 finding 1: a build folder sends only regular files inside it that its manifest names.

`rkdet deploy --build B` used to push whatever `B/golden/inputs` held, following symlinks (a file link,
or the folder itself linked to an `~/.ssh`-like folder), and checked nothing against the manifest
before the push. These tests walk crafted folders (links, FIFOs, sockets, devices, odd names) through
the file selection (`rkdet.records.build_files`, `rkdet.deploy.stage.build_file_set`) and one real
deploy to an emulated board, and prove that nothing outside the folder is opened, staged or sent.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trust_helpers import GOOD_FP, fake_build, one_line, tree

from rkdet.errors import InputError
from rkdet.onboard.hashing import output_hash
from rkdet.records import build_files
from rkdet.records.build import BuildInfo
from rkdet.records.manifest import read_manifest

CANARY = "CANARY-host-secret-4f1b"

_AUDIT: list[tuple[str, int]] = []
_AUDITING = threading.local()


def _hook(event: str, args: tuple) -> None:
    if event == "open" and getattr(_AUDITING, "on", False) and not isinstance(args[0], int):  # int: fdopen
        path, _mode, flags = args
        _AUDIT.append((os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path), flags or 0))


sys.addaudithook(_hook)  # records opens only while a test switches it on (audit hooks cannot be removed)


def _page(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, size=(1, 4, 4, 3), dtype=np.uint8)


def _build(root: Path, names: list[str]) -> Path:
    """A build folder whose manifest names `names` as golden inputs, each a real .npy of its own."""
    folder = fake_build(root / "b")
    golden = []
    for i, name in enumerate(names):
        arr = _page(i)
        np.save(folder / "golden" / "inputs" / f"{name}.npy", arr, allow_pickle=False)
        golden.append({"file": f"{name}.jpg", "sha256": "0" * 64, "tensor": output_hash(arr)})
    doc = {"fingerprint": GOOD_FP, "platform": "rk3588", "rknn": {"header": {}}, "inputs": {"golden": golden}}
    (folder / "manifest.json").write_text(json.dumps(doc))
    return folder


def _outside(root: Path) -> Path:
    """A host folder with a secret and a valid .npy (a link to it must still be refused)."""
    out = root / "outside"
    out.mkdir()
    (out / "id_rsa").write_text(CANARY)
    np.save(out / "p0.npy", _page(0), allow_pickle=False)
    return out


def _stage(folder: Path, dest: Path) -> Path:
    return build_files.stage_golden_inputs(folder, read_manifest(folder / "manifest.json"), dest)


def test_an_untouched_build_stages_exactly_the_named_inputs(tmp_path: Path) -> None:
    folder = _build(tmp_path, ["p0", "p1"])
    (folder / "golden" / "inputs" / "extra.npy").write_bytes((folder / "golden" / "inputs" / "p0.npy").read_bytes())
    staged = _stage(folder, tmp_path / "s")
    assert sorted(p.name for p in staged.iterdir()) == ["p0.npy", "p1.npy"]  # extra.npy is not named: not sent
    for name in ("p0", "p1"):
        assert (staged / f"{name}.npy").read_bytes() == (folder / "golden" / "inputs" / f"{name}.npy").read_bytes()


@pytest.mark.parametrize("how", ["file-link", "inputs-link", "golden-link", "fifo", "socket", "device", "swapped",
                                 "missing", "pickle", "fortran", "short"])
def test_a_crafted_golden_input_is_one_line_and_nothing_is_staged(tmp_path: Path, how: str) -> None:
    folder = _build(tmp_path, ["p0"])
    outside = _outside(tmp_path)
    page = folder / "golden" / "inputs" / "p0.npy"
    if how == "file-link":
        page.unlink()
        page.symlink_to(outside / "p0.npy")  # right content, but outside the folder
    elif how == "inputs-link":
        shutil.rmtree(folder / "golden" / "inputs")
        (folder / "golden" / "inputs").symlink_to(outside)
    elif how == "golden-link":
        shutil.rmtree(folder / "golden")
        (outside / "inputs").mkdir()
        shutil.copy(outside / "p0.npy", outside / "inputs" / "p0.npy")
        (folder / "golden").symlink_to(outside)
    elif how == "fifo":
        page.unlink()
        os.mkfifo(page)
    elif how == "socket":
        page.unlink()
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(page))
        sock.close()
    elif how == "device":
        page.unlink()
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(page, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers: never opened
    elif how == "swapped":
        np.save(page, _page(99), allow_pickle=False)
    elif how == "missing":
        page.unlink()
    elif how == "pickle":
        np.save(page, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif how == "fortran":
        np.save(page, np.asfortranarray(np.zeros((1, 4, 4, 3), np.uint8).transpose(0, 2, 1, 3)))
    elif how == "short":
        page.write_bytes(page.read_bytes()[:-5])
    with pytest.raises(InputError) as err:
        _stage(folder, tmp_path / "s")
    line = str(err.value)
    assert "\n" not in line and str(folder / "golden") in line, line
    assert CANARY not in line
    assert tree(tmp_path / "s") == set() or not any((tmp_path / "s").glob("p0.npy")) or how == "swapped"


def test_crafted_names_in_the_manifest_are_refused(tmp_path: Path) -> None:
    for bad in ("../outside/p0", ".hidden", "a\x1bb", ""):
        folder = tmp_path / f"c{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        built = _build(folder, ["p0"])
        doc = json.loads((built / "manifest.json").read_text())
        doc["inputs"]["golden"] = [{"name": bad, "tensor": "0" * 64}]
        (built / "manifest.json").write_text(json.dumps(doc))
        with pytest.raises(InputError, match="inputs.golden"):
            _stage(built, folder / "s")
        assert not (folder / "s").exists() or not any((folder / "s").iterdir())


@pytest.mark.parametrize("target", ["model.rknn", "model.io.json"])
def test_a_linked_model_file_is_refused_before_the_push(tmp_path: Path, target: str) -> None:
    folder = _build(tmp_path, ["p0"])
    outside = _outside(tmp_path)
    (folder / target).unlink()
    (folder / target).symlink_to(outside / "id_rsa")
    from rkdet.deploy.stage import build_file_set

    with pytest.raises(InputError) as err:
        build_file_set(BuildInfo.load(folder), emulated=False)
    assert f"{folder / target}: is a symlink" in str(err.value)


# -- the property: any crafted folder, nothing outside it is opened or staged --

_KINDS = ["npy", "extra", "link-file", "link-dir", "dangling", "fifo", "socket", "dir", "device"]
_NAMES = st.one_of(st.sampled_from(["p0", "-rf", "a b", "päge", "x\u202ey", "\u00e9\u0301", "x" * 200, "--", "~"]),
                   st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1,
                           max_size=12))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(st.tuples(_NAMES, st.sampled_from(_KINDS), st.booleans()), min_size=1, max_size=6,
                        unique_by=lambda e: e[0]),
       link_inputs=st.booleans())
def test_property_nothing_outside_the_folder_is_opened_or_staged(tmp_path_factory: pytest.TempPathFactory,
                                                                  entries: list, link_inputs: bool) -> None:
    root = tmp_path_factory.mktemp("prop")
    outside = _outside(root)
    folder = fake_build(root / "b")
    inputs = folder / "golden" / "inputs"
    golden, expected = [], {}
    for i, (name, kind, named) in enumerate(entries):
        if name in (".", "..") or name.startswith(".") or len(f"{name}.npy".encode()) > 255:
            continue
        page = inputs / f"{name}.npy"
        arr = _page(i)
        if kind in ("npy", "extra"):
            np.save(page, arr, allow_pickle=False)
        elif kind == "link-file":
            page.symlink_to(outside / "p0.npy")
            arr = _page(0)
        elif kind == "link-dir":
            page.symlink_to(outside)
        elif kind == "dangling":
            page.symlink_to(root / "nowhere")
        elif kind == "fifo":
            os.mkfifo(page)
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            try:
                s.bind(str(page))
            except OSError:  # a path too long for a socket address: a FIFO instead
                os.mkfifo(page)
            finally:
                s.close()
        elif kind == "device":
            if os.geteuid() == 0:
                os.mknod(page, stat.S_IFCHR | 0o600, os.makedev(1, 3))
            else:
                os.mkfifo(page)
        elif kind == "dir":
            page.mkdir()
        if named and kind != "extra":
            golden.append({"name": name, "tensor": output_hash(arr)})
            expected[f"{name}.npy"] = kind
    if link_inputs:  # the whole folder a link to the host's secrets
        shutil.rmtree(inputs)
        inputs.symlink_to(outside)
    (folder / "manifest.json").write_text(json.dumps({"fingerprint": GOOD_FP, "platform": "rk3588",
                                                      "rknn": {"header": {}}, "inputs": {"golden": golden}}))
    dest = root / "staged"
    _AUDIT.clear()
    _AUDITING.on = True
    try:
        staged = _stage(folder, dest)
        refused = None
    except InputError as err:
        refused, staged = str(err), dest
    finally:
        _AUDITING.on = False
    odd = any(any(ord(c) < 32 or ord(c) == 127 for c in n) or "\\" in n for n in expected)  # names refused
    bad_named = link_inputs or odd or any(k != "npy" for k in expected.values())
    assert (refused is not None) == bad_named, (refused, expected, link_inputs)
    if refused is not None:
        assert "\n" not in refused and CANARY not in refused
    else:
        assert sorted(p.name for p in staged.iterdir()) == sorted(expected)  # exactly what the manifest names
        for p in staged.iterdir():
            assert p.read_bytes() == (inputs / p.name).read_bytes()
    for p in (dest.iterdir() if dest.exists() else ()):
        assert CANARY.encode() not in p.read_bytes()
    for path, flags in _AUDIT:  # every open below the folder: no symlink followed, no FIFO waited on
        assert not path.startswith(str(outside)), path
        if not os.path.isabs(path):
            assert flags & os.O_NOFOLLOW and flags & os.O_NONBLOCK or flags & os.O_DIRECTORY, (path, flags)
    shutil.rmtree(root)


# -- one real deploy: the linked inputs folder never reaches the board --

@pytest.mark.parametrize("how", ["inputs-link", "file-link"])
def test_deploy_of_a_linked_inputs_folder_sends_nothing(default_build: Path, tmp_path: Path, how: str) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "deploy"))
    from deploy_helpers import deploy

    from rkdet.emulator.sshd import EmulatedBoard

    build = tmp_path / "build"
    shutil.copytree(default_build, build)
    outside = tmp_path / "dot-ssh"
    outside.mkdir()
    page = sorted((build / "golden" / "inputs").glob("*.npy"))[0]
    if how == "inputs-link":  # the real pages and a secret, behind a link: refused for the link alone
        for p in (build / "golden" / "inputs").iterdir():
            shutil.move(str(p), outside / p.name)
        (build / "golden" / "inputs").rmdir()
        (build / "golden" / "inputs").symlink_to(outside)
        (outside / "id_rsa").write_text(CANARY)
    else:
        (outside / "id_rsa").write_text(CANARY)
        page.unlink()
        page.symlink_to(outside / "id_rsa")
    with EmulatedBoard("rk3588", tmp_path / "board") as board:
        proc = deploy(board, build, tmp_path / "out")
        assert proc.returncode == 2, proc.stderr[-3000:]
        line = one_line(proc)
        assert "is a symlink" in line and str(build / "golden" / "inputs") in line, line
        for p in board.board_dir.rglob("*"):  # the board's whole home: no host secret, no inputs folder
            if p.is_file() and not p.is_symlink():
                assert CANARY.encode() not in p.read_bytes(), p
            assert "inputs" not in p.relative_to(board.board_dir).parts or not any(p.glob("*.npy")), p
    assert not any(p.is_file() for p in (tmp_path / "out").rglob("*"))


# -- finding 2: `rkdet layers BUILD` never runs a program the build folder names --

@pytest.mark.parametrize("own_config", [False, True])
def test_layers_never_runs_the_toolkit1_python_a_build_names(default_build: Path, tmp_path: Path,
                                                             own_config: bool) -> None:
    from trust_helpers import REPO, rkdet

    build = tmp_path / "build"
    shutil.copytree(default_build, build)
    ran = tmp_path / "the-program-ran"
    prog = tmp_path / "prog"
    prog.write_text(f"#!/bin/sh\necho ran > {ran}\necho 1.7.5\n")
    prog.chmod(0o755)
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["platform"] = "rv1126"
    (build / "manifest.json").write_text(json.dumps(manifest))
    resolved = json.loads((build / "config.resolved.json").read_text())
    resolved["target"] = {"platforms": ["rv1126"], "toolkit1_python": str(prog)}
    (build / "config.resolved.json").write_text(json.dumps(resolved))
    extra = ["--config", str(REPO / "configs" / "yolov8.yaml")] if own_config else []
    proc = rkdet(["layers", str(build), *extra, "--out", str(tmp_path / "out")], timeout=300)
    assert proc.returncode in (2, 4), proc.stderr[-3000:]
    line = one_line(proc)
    assert not ran.exists(), line  # the build's program never ran
    assert str(prog) not in line
    if own_config:  # the toolkit-1 Python comes from the user's own config only
        assert "rv1126" in line and "target.toolkit1_python" in line, line
