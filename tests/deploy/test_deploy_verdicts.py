"""Both named verdicts of a deploy on the emulated board, in every combination (issue 12 §1): the emulated
runtime's NPU mode answers with the build's simulator outputs (K elements one LSB off), run.json says it
emulates an NPU, so the one reference rule judges it against golden/simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deploy_helpers import CONFIG, deploy, rkdet, run_folders

from rkdet.emulator.sshd import EmulatedBoard


def _config(tmp_path: Path, tolerances: str) -> Path:
    """configs/yolov8.yaml with its `tolerances` section replaced."""
    text = CONFIG.read_text()
    start = text.index("tolerances:")
    end = text.index("\n\n", start)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text[:start] + tolerances.rstrip() + text[end:])
    return cfg


def _deploy(board: EmulatedBoard, build: Path, tmp_path: Path, *extra: str, tolerances: str | None = None):
    out = tmp_path / "results"
    args = list(extra)
    cfg = ["--config", str(_config(tmp_path, tolerances))] if tolerances is not None else []
    proc = deploy(board, build, out, *args, *cfg, repeats=3, warmup=1)
    [folder] = run_folders(out)
    report = json.loads((folder / "report.json").read_text())
    record = json.loads((folder / "deploy.json").read_text())
    run = json.loads((folder / "result" / "run.json").read_text())
    # `rkdet diff RUN-FOLDER BUILD` (the README's line) judges it exactly as deploy did: same rule, same verdicts
    again = rkdet(["diff", str(folder), str(build), "--json", *cfg])
    assert again.returncode == proc.returncode, again.stderr[-2000:]
    redo = json.loads(again.stdout)
    assert (redo["repeatable"], redo["agrees"]) == (report["repeatable"], report["agrees"])
    return proc, report, record, run


@pytest.mark.slow
@pytest.mark.parametrize("k,tolerances,agrees", [
    (0, None, True),                                      # repeatable and agrees
    (3, "tolerances:\n  max_lsb: 1\n", True),            # repeatable, 1 LSB off, within max_lsb: 1
    (3, None, False),                                     # repeatable, disagrees beyond (bitwise)
])
def test_emulated_npu_verdicts(board: EmulatedBoard, fast_build: Path, tmp_path: Path, k: int,
                               tolerances: str | None, agrees: bool) -> None:
    proc, report, record, run = _deploy(board, fast_build, tmp_path, "--emulator-npu", str(k), tolerances=tolerances)
    assert proc.returncode == (0 if agrees else 1), proc.stderr[-3000:]
    assert run["emulated"] is True and run["emulates_npu"] is True and "EMULATED NPU mode" in run["backend_detail"]
    assert report["repeatable"]["ok"] is True
    assert report["agrees"]["reference"] == "simulator" and report["agrees"]["ok"] is agrees
    assert record["agrees"]["ok"] is agrees and record["repeatable"]["ok"] is True
    assert report["agrees"]["max_lsb"] == pytest.approx(1.0 if k else 0.0, abs=0.01)  # measured even when within
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "repeatable: YES" in said and f"agrees with the reference (simulator): {'YES' if agrees else 'NO'}" in said
    if not agrees:
        assert "disagrees with the reference" in record["verdict"] and "not repeatable" not in record["verdict"]


@pytest.mark.slow
def test_not_repeatable_is_the_failed_verdict(board: EmulatedBoard, fast_build: Path, tmp_path: Path) -> None:
    """The fault knob flips one bit of one later run: not repeatable (bitwise even under max_lsb: 1)."""
    fault = {"occurrence": 2, "input_sha256": None, "output": "cls0", "index": 7, "bit": 0}
    proc, report, record, run = _deploy(board, fast_build, tmp_path, "--emulator-npu", "0", "--emulator-fault",
                                        json.dumps(fault), tolerances="tolerances:\n  max_lsb: 1\n")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert report["repeatable"]["ok"] is False and report["repeatable"]["max_ulp"] == 1
    assert report["agrees"]["ok"] is True  # one ULP of a float32 is far within one LSB of the simulator
    assert "not repeatable" in record["verdict"] and "disagrees" not in record["verdict"]
    assert "repeatable: NO" in " ".join((proc.stdout + proc.stderr).split())


@pytest.mark.slow
@pytest.mark.parametrize("variant,flags,tolerances,agrees", [
    ("sudo", ("--sudo",), "tolerances:\n  max_lsb: 1\n", True),   # a sudo login: within max_lsb: 1
    ("busybox", (), None, False),                                 # busybox userland: beyond bitwise
])
def test_verdicts_on_other_board_kinds(variant: str, flags: tuple[str, ...], tolerances: str | None, agrees: bool,
                                       fast_build: Path, tmp_path: Path) -> None:
    """The two verdicts do not depend on the board kind: the same NPU mode judged the same way on a sudo and a
    busybox board as on the standard one."""
    with EmulatedBoard("rk3588", tmp_path / "board", variant) as b:
        extra = (*flags, "--state-dir", f"{b.home}/pin-state") if variant == "sudo" else flags
        proc, report, record, run = _deploy(b, fast_build, tmp_path, *extra, "--emulator-npu", "3",
                                            tolerances=tolerances)
    assert proc.returncode == (0 if agrees else 1), proc.stderr[-3000:]
    assert run["emulates_npu"] is True and report["repeatable"]["ok"] is True
    assert report["agrees"]["reference"] == "simulator" and report["agrees"]["ok"] is agrees
    assert report["agrees"]["max_lsb"] == pytest.approx(1.0, abs=0.01)
    assert record["restored"] is True and record["settings"]["sudo"] is (variant == "sudo")


@pytest.mark.slow
def test_int8_emulation_verdicts(fast_build: Path, tmp_path: Path) -> None:
    """The emulated NPU's default computation, the build's INT8 emulation: repeatable bit for bit, judged
    against the simulator, which on the default model's golden pages it equals bit for bit (docs/EMULATOR.md:
    the toolkit's rules it follows), so the config's bitwise tolerance holds, as `rkdet demo` shows."""
    with EmulatedBoard("rk3588", tmp_path / "board", env={"RKDET_EMU_COMPUTE": "int8"}) as board:
        proc, report, record, run = _deploy(board, fast_build, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run["emulated"] is True and run["emulates_npu"] is True and "INT8 emulation" in run["backend_detail"]
    assert report["repeatable"]["ok"] is True and report["agrees"]["reference"] == "simulator"
    assert report["agrees"]["ok"] is True
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "repeatable: YES [bitwise]" in said and "EMULATED" in said
    assert "agrees with the reference (simulator): YES [bitwise]: bit-identical" in said
