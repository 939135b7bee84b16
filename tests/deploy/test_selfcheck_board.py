"""rkdet-selfcheck on the emulated board: installed with install_selfcheck over real sshd, run by the board's
python3 against the emulated RKNNLite. Identical (0), a flipped output bit (1, located), a wrong model (3)
and a crafted bundle (2), each one line; the identical case on every board variant."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rkdet.emulator.sshd import EmulatedBoard
from rkdet.deploy.selfcheck_install import SelfcheckInstall, install_selfcheck
from rkdet.link.shell import CommandResult
from rkdet.link.ssh import BoardConnection
from rkdet.link.transfer import push
from rkdet.errors import InputError
from rkdet.onboard.resultset import read_index


@pytest.fixture(scope="module")
def conn(board: EmulatedBoard) -> Iterator[BoardConnection]:
    with board.connect() as c:
        yield c


@pytest.fixture(scope="module")
def installed(conn: BoardConnection, default_build: Path) -> SelfcheckInstall:
    return install_selfcheck(conn, default_build, f"{conn.home}/selfcheck", emulated=True)


def _run(conn: BoardConnection, argv: list[str], env: dict[str, str] | None = None) -> CommandResult:
    return conn.run(argv, check=False, env=env, timeout=300)


def _one_line(res: CommandResult, stream: str) -> str:
    text = res.out if stream == "out" else res.err
    other = res.err if stream == "out" else res.out
    assert "Traceback" not in res.err and not other.strip(), res.err[-3000:]
    lines = [ln for ln in text.splitlines() if ln.startswith("rkdet-selfcheck: ")]
    assert len(lines) == 1 and lines[0] == text.strip(), text[-3000:]
    return lines[0]


def test_the_default_bundle_is_identical_on_the_board(conn: BoardConnection, installed: SelfcheckInstall,
                                                     default_build: Path) -> None:
    listing = _run(conn, ["ls", installed.remote_dir]).out.split()
    assert sorted(listing) == ["model.emu.json", "model.io.json", "model.onnx", "model.rknn", "rkdet-onboard.pyz",
                               "selfcheck.json"]  # the on-board program is one file
    assert installed.command[:3] == ["python3", f"{installed.remote_dir}/rkdet-onboard.pyz", "selfcheck"]
    res = _run(conn, installed.command)
    assert res.rc == 0, res.err
    line = _one_line(res, "out")
    doc = json.loads((default_build / "selfcheck.json").read_text())
    assert line.startswith(f"rkdet-selfcheck: IDENTICAL to onnx-fp32: {len(doc['inputs'])} inputs x 6 outputs")
    assert "EMULATED" in line and doc["fingerprint"][:16] in line
    # the installed command line is what docs/SELFCHECK.md's unit runs: quoted, and it works as printed
    res = _run(conn, ["sh", "-c", installed.command_line])
    assert res.rc == 0, res.err
    # a second install sends nothing: every file is already there with its sha256
    again = install_selfcheck(conn, default_build, installed.remote_dir, emulated=True)
    assert again.transfer.files_sent == 0 and again.transfer.files_skipped == 6  # the zipapp too: same bytes


def test_a_flipped_output_bit_is_caught_and_located(conn: BoardConnection, installed: SelfcheckInstall,
                                                    default_build: Path) -> None:
    doc = json.loads((default_build / "selfcheck.json").read_text())
    name = doc["inputs"][1]["name"]
    page = np.load(default_build / "golden" / "inputs" / f"{name}.npy")
    fault = {"occurrence": 0, "input_sha256": hashlib.sha256(page.tobytes()).hexdigest(), "output": "cls0",
             "index": 4321, "bit": 0}
    res = _run(conn, installed.command, env={"RKDET_EMU_FAULT": json.dumps(fault)})
    assert res.rc == 1, res.out + res.err
    line = _one_line(res, "err")
    record = next(r for r in read_index(str(default_build / "golden" / "onnx-fp32")) if r["input"] == name)
    cls0 = np.load(default_build / "golden" / "onnx-fp32" / "outputs" /
                   f"{next(o['hash'] for o in record['outputs'] if o['name'] == 'cls0')}.npy").reshape(-1)
    flipped = cls0.copy()
    flipped.view(np.uint32)[4321] ^= np.uint32(1)
    assert (f"DIFFERS from onnx-fp32: input {name}, output cls0, element 4321: got {float(flipped[4321])!r}, "
            f"expected {float(cls0[4321])!r}") in line


def test_a_wrong_model_is_refused(conn: BoardConnection, installed: SelfcheckInstall, default_build: Path,
                                  tmp_path: Path) -> None:
    wrong = tmp_path / "other.rknn"
    data = bytearray((default_build / "model.rknn").read_bytes())
    data[100] ^= 0xFF
    wrong.write_bytes(bytes(data))
    remote = f"{installed.remote_dir}/other.rknn"
    push(conn, wrong, remote)
    argv = [*installed.command[:4], "--model", remote]  # python3 PROGRAM selfcheck BUNDLE
    res = _run(conn, argv)
    assert res.rc == 3, res.out + res.err
    line = _one_line(res, "err")
    manifest = json.loads((default_build / "manifest.json").read_text())
    assert f"{remote}: wrong model: sha256 {hashlib.sha256(bytes(data)).hexdigest()[:16]} is not the bundle's " \
           f"model.rknn {manifest['rknn']['sha256'][:16]}" in line


def test_a_crafted_bundle_is_bad_input(conn: BoardConnection, installed: SelfcheckInstall, default_build: Path,
                                       tmp_path: Path) -> None:
    doc = json.loads((default_build / "selfcheck.json").read_text())
    doc["inputs"][0]["tensor"]["shape"] = [1, 640, 640, 4]  # more bytes than the data holds
    crafted = tmp_path / "crafted.json"
    crafted.write_text(json.dumps(doc))
    remote = f"{installed.remote_dir}/crafted.json"
    push(conn, crafted, remote)
    res = _run(conn, [*installed.command[:3], remote, *installed.command[4:]])
    assert res.rc == 2, res.out + res.err
    line = _one_line(res, "err")
    assert "inputs[0]" in line and "tensor.zlib: holds 1228800 bytes, uint8 [1, 640, 640, 4] needs 1638400" in line


def test_core_mask_and_a_missing_runtime(conn: BoardConnection, installed: SelfcheckInstall) -> None:
    res = _run(conn, [*installed.command, "--core-mask", "0_1_2"])
    assert res.rc == 0 and _one_line(res, "out").startswith("rkdet-selfcheck: IDENTICAL"), res.err
    res = _run(conn, installed.command, env={"PYTHONPATH": ""})  # the board's rknnlite is not importable
    assert res.rc == 3, res.out + res.err
    assert "rknnlite (rknn-toolkit-lite2) is not installed" in _one_line(res, "err")


def test_install_refuses_a_build_without_a_bundle(conn: BoardConnection, default_build: Path, tmp_path: Path) -> None:
    build = tmp_path / default_build.name
    shutil.copytree(default_build, build)
    (build / "selfcheck.json").unlink()
    with pytest.raises(InputError, match="no selfcheck.json; re-run `rkdet convert`"):
        install_selfcheck(conn, build, f"{conn.home}/nothing")


def test_install_refuses_a_folder_without_a_manifest(conn: BoardConnection, tmp_path: Path) -> None:
    """A folder with no readable manifest is not a build: refused naming the file, nothing pushed."""
    with pytest.raises(InputError, match="manifest.json: missing"):
        install_selfcheck(conn, tmp_path, f"{conn.home}/nothing")
    assert conn.run(["test", "-e", f"{conn.home}/nothing"], check=False).rc == 1


@pytest.mark.parametrize("variant", ["busybox", "sudo", "nosftp"])
def test_identical_on_every_board_variant(variant: str, default_build: Path, tmp_path: Path) -> None:
    with EmulatedBoard("rk3588", tmp_path / "board", variant) as board, board.connect() as c:
        done = install_selfcheck(c, default_build, f"{c.home}/sc", emulated=True)
        res = c.run(done.command, check=False, timeout=300)
        assert res.rc == 0, res.err
        assert _one_line(res, "out").startswith("rkdet-selfcheck: IDENTICAL to onnx-fp32")
