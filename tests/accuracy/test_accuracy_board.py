"""A board row of `rkdet accuracy` end to end, through the real deploy path (docs/ACCURACY.md "A board's row"):
`rkdet accuracy --save-inputs` writes the shipped labelled pages as the board is fed, `rkdet deploy --inputs`
runs exactly those tensors on an emulated RK3588 (real sshd, pinned run, verified pull), and `rkdet accuracy
--results` scores the pulled result set as a row labelled with the backend that made it.

The emulated board computes the build's INT8 emulation (`RKDET_EMU_COMPUTE=int8`, its own default; the
suite's boards compute FP32 unless asked) under the onnx-fp32 reference's one session definition, the same
model and session the host's `INT8 (emulation)` row runs: so its score equals that row's to the last bit.
Uses the session's default build (tests/shared_build.py); no toolkit build of its own."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from rkdet.emulator.sshd import EmulatedBoard
from rkdet.errors import InputError
from rkdet.records import build_files
from rkdet.records.accuracy import read_accuracy

sys.path.insert(0, str(Path(__file__).parents[1] / "convert"))
sys.path.insert(0, str(Path(__file__).parents[1] / "deploy"))
from convert_helpers import REPO, run_rkdet  # noqa: E402
from deploy_helpers import deploy, run_folders  # noqa: E402

SHIPPED = REPO / "calibration_data" / "labelled"


def test_a_deployed_board_row_is_labelled_emulated_and_scores_as_the_int8_emulation(default_build, tmp_path) -> None:
    labels = SHIPPED / "labels.json"
    first = run_rkdet("accuracy", str(default_build), "--labels", str(labels), "--save-inputs", str(tmp_path / "fed"),
                      "--out", str(tmp_path / "host"))
    assert first.returncode in (0, 1), first.stderr[-2000:]
    fed = sorted(p.stem for p in (tmp_path / "fed").glob("*.npy"))
    assert fed == sorted(p.stem for p in SHIPPED.glob("*.png")) and len(fed) == 6

    with EmulatedBoard("rk3588", tmp_path / "board", env={"RKDET_EMU_COMPUTE": "int8"}) as board:
        proc = deploy(board, default_build, tmp_path / "results", "--inputs", str(tmp_path / "fed"), repeats=1)
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, proc.stderr[-3000:]
    # only the repeatable verdict is judged: there is no reference output for inputs that are not the golden ones
    assert "agrees with the reference: NOT APPLICABLE (the inputs are fed/ (--inputs)" in said
    [run] = run_folders(tmp_path / "results")

    proc = run_rkdet("accuracy", str(default_build), "--labels", str(labels), "--results", str(run / "result"),
                     "--out", str(tmp_path / "scored"))
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    record = read_accuracy(tmp_path / "scored" / "accuracy.json")
    fp32, int8, board_row = record.rows
    assert (fp32.variant, int8.variant) == ("FP32", "INT8 (emulation)")
    assert board_row.variant == "board: rknnlite (emulated board)"
    assert "INT8 emulation" in board_row.detail, board_row.detail
    # the same model under the same session on the same tensors: every number of the row is the emulation's
    assert (board_row.value, board_row.delta, board_row.ratio, board_row.others) == (
        int8.value, int8.delta, int8.ratio, int8.others)
    assert board_row.others["detections"] > 0 and 0 < board_row.value <= 1
    assert board_row.others != fp32.others  # it ran the INT8 emulation, not the FP32 model (measured: 135 vs 172)
    # and the host-only record written before the deploy measured the same INT8 row
    assert read_accuracy(tmp_path / "host" / "accuracy.json").rows[1] == int8


def _npy(path: Path, array: np.ndarray) -> Path:
    np.save(path, array)
    return path


SHAPE = (1, 8, 8, 3)


def test_an_inputs_folder_is_staged_only_when_every_entry_is_a_fed_tensor(tmp_path) -> None:
    """`deploy --inputs`: the copy the board gets holds exactly the checked tensors; a wrong shape or dtype, a
    file that is not .npy, a symlink or a FIFO, a pickled array, an empty folder: one line naming it."""
    good = tmp_path / "good"
    good.mkdir()
    _npy(good / "a.npy", np.zeros(SHAPE, np.uint8))
    _npy(good / "b.npy", np.ones(SHAPE, np.uint8))
    dest, count = build_files.stage_input_folder(good, tmp_path / "staged", "|u1", SHAPE)
    assert count == 2 and sorted(p.name for p in dest.iterdir()) == ["a.npy", "b.npy"]
    assert (dest / "b.npy").read_bytes() == (good / "b.npy").read_bytes()

    def refused(name: str, make) -> str:  # type: ignore[no-untyped-def]
        folder = tmp_path / name
        folder.mkdir()
        _npy(folder / "ok.npy", np.zeros(SHAPE, np.uint8))
        make(folder)
        with pytest.raises(InputError) as err:
            build_files.stage_input_folder(folder, tmp_path / f"{name}-staged", "|u1", SHAPE)
        assert "\n" not in str(err.value)
        return str(err.value)

    assert "a |u1 [1, 8, 9, 3] tensor, the build is fed |u1 [1, 8, 8, 3]" in refused(
        "shape", lambda f: _npy(f / "x.npy", np.zeros((1, 8, 9, 3), np.uint8)))
    assert "a <f4 [1, 8, 8, 3] tensor" in refused("dtype", lambda f: _npy(f / "x.npy", np.zeros(SHAPE, np.float32)))
    assert "notes.txt: not a <name>.npy file" in refused("other", lambda f: (f / "notes.txt").write_text("x"))
    assert "is a symlink, not a regular file" in refused(
        "link", lambda f: (f / "x.npy").symlink_to(good / "a.npy"))
    assert "not a regular file" in refused("fifo", lambda f: os.mkfifo(f / "x.npy"))
    assert "not a plain .npy array" in refused(
        "pickle", lambda f: np.save(f / "x.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no .npy file"):
        build_files.stage_input_folder(tmp_path / "empty", tmp_path / "empty-staged", "|u1", SHAPE)


@pytest.mark.parametrize("backends", [(), ("--backends", "rknnlite,onnxruntime")], ids=["one backend", "a session"])
def test_deploy_refuses_inputs_that_are_not_the_fed_tensor_before_connecting(default_build, tmp_path, backends) -> None:
    """`deploy --inputs` checks every tensor against the build's fed input before any connection, for one
    backend and for a two-backend session alike: a port with nothing listening would be exit 3; a wrong
    tensor is exit 2, one line, no run folder."""
    (tmp_path / "fed").mkdir()
    _npy(tmp_path / "fed" / "page.npy", np.zeros(SHAPE, np.uint8))
    from deploy_helpers import rkdet, error_line

    proc = rkdet(["deploy", "--board", "127.0.0.1:1", "--build", str(default_build), "--inputs", str(tmp_path / "fed"),
                  "--out", str(tmp_path / "results"), "--known-hosts", str(tmp_path / "kh"), "--ssh-config", "/dev/null",
                  *backends])
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = error_line(proc)
    assert line.startswith(f"rkdet: --inputs {tmp_path / 'fed' / 'page.npy'}: a |u1 [1, 8, 8, 3] tensor, the build is "
                           "fed |u1 [1, ") and line.endswith(build_files.INPUTS_ADVICE)
    assert not (tmp_path / "results").exists()
