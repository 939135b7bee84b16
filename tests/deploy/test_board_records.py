"""The typed records the one-board steps share: RunSettings (from a config, round-tripped whole through
deploy.json), BuildInfo (the manifest fields the board side reads), RemoteLayout, DeployState's status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rkdet.records.build import BuildInfo
from rkdet.deploy.deploy_state import DeployState, DeployStatus, latest_unfinished, public_settings
from rkdet.deploy.layout import RemoteLayout
from rkdet.deploy.settings import RunOverrides, RunSettings
from rkdet.config import BoardSection, DeploySettings, RunSection
from rkdet.errors import InputError
from rkdet.records.deploy_record import DeployRecord, TransitionError
from rkdet.tolerance import Tolerance


def _sections() -> DeploySettings:
    return DeploySettings(run=RunSection(repeats=3, warmup=1, core_mask="0_1", cpu_affinity=[4, 5]),
                          board=BoardSection(workdir="/opt/rk", sudo=True, npu_freq_hz=594000000, pin=True),
                          tolerances=Tolerance(max_abs=0.5, max_lsb=2, min_cosine=0.99), source="test")


def test_from_config_takes_every_section_and_flags_win() -> None:
    s = RunSettings.from_config(_sections())
    assert (s.repeats, s.warmup, s.core_mask, s.cpu_affinity, s.workdir, s.sudo) == (3, 1, "0_1", (4, 5), "/opt/rk", True)
    assert s.pin_env["RKDET_NPU_FREQ"] == "594000000" and s.tolerances.max_lsb == 2
    flags = RunSettings.from_config(_sections(), RunOverrides(
        repeats=7, warmup=0, sudo=False, no_pin=True, workdir="/w", backend="onnxruntime", fault='{"bit": 0}',
        emulate_npu=3, timeout=5.0))
    assert (flags.repeats, flags.warmup, flags.sudo, flags.pin, flags.workdir, flags.backend) == \
        (7, 0, False, False, "/w", "onnxruntime")
    assert (flags.fault, flags.emulate_npu, flags.timeout) == ('{"bit": 0}', 3, 5.0)


def test_run_settings_round_trip_whole_through_json() -> None:
    s = RunSettings.from_config(_sections(), RunOverrides(state_dir="/run/x", keep=True, fault='{"bit": 1}',
                                                          emulate_npu=0))
    doc = json.loads(json.dumps(s.to_json()))  # as deploy.json stores it
    assert RunSettings.from_json(doc) == s
    public = public_settings(s)
    assert not {"workdir", "state_dir", "fault"} & set(vars(public))  # the typed deploy.json `settings`
    assert public.fault_injected is True and public.emulated_npu_lsb_k == 0 and public.sudo is True
    assert (public.core_mask, public.cpu_affinity, public.repeats) == ("0_1", (4, 5), 3)


def test_older_records_fill_from_base_and_wrong_types_are_one_line() -> None:
    base = RunSettings(timeout=9.0, keep=True)
    old = {"repeats": 4, "warmup": 0, "backend": "rknnlite", "pin": False, "sudo": True, "fault_injected": False}
    got = RunSettings.from_json(old, base=base)
    assert (got.repeats, got.pin, got.sudo, got.timeout, got.keep) == (4, False, True, 9.0, True)
    with pytest.raises(InputError, match=r"deploy.json: repeats has the wrong type"):
        RunSettings.from_json({"repeats": "4"}, where="deploy.json")
    with pytest.raises(InputError, match=r"deploy.json: tolerances: "):
        RunSettings.from_json({"tolerances": {"max_abs": -1}}, where="deploy.json")


def test_build_info_reads_the_fields_the_board_needs(tmp_path: Path) -> None:
    (tmp_path / "golden" / "inputs").mkdir(parents=True)
    (tmp_path / "model.rknn").write_bytes(b"x")
    (tmp_path / "model.io.json").write_text("{}")
    manifest = {"fingerprint": "ab" * 32, "platform": "rk3588",
                "fed_input": {"layout": "NHWC", "mean": [0, 0, 0], "std": [255, 255, 255]},
                "rknn": {"header": {"toolkit_version": "2.5.0", "format_version": 6}},
                "inputs": {"golden": [{"file": "a.npy", "tensor": "x"}, {"file": "b.npy", "tensor": "y"}], "onnx_prepared": {"outputs": [{"name": "o", "shape": [1, 4, 2]}]}}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    info = BuildInfo.load(tmp_path)
    assert (info.short, info.platform, info.toolkit_version, info.format_version) == ("ab" * 8, "rk3588", "2.5.0", 6)
    assert info.output_shapes == ((1, 4, 2),) and info.golden_inputs == 2 and info.need_fed_input().std == (255.0,) * 3
    (tmp_path / "manifest.json").write_text(json.dumps({"platform": "rk3588"}))
    with pytest.raises(InputError, match="malformed manifest"):
        BuildInfo.load(tmp_path)


def test_layout_round_trip_and_status_only_through_advance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    layout = RemoteLayout.for_run("/w", "cd" * 32, "20260101T000000Z-abcd", "onnxruntime")
    assert layout.fp32_inputs and layout.model("onnxruntime").endswith("model.onnx")
    assert RemoteLayout.from_json(json.loads(json.dumps(layout.to_json()))) == layout
    with pytest.raises(InputError, match="not a complete remote layout"):
        RemoteLayout.from_json({"workdir": "/w"})
    folder = tmp_path / "res" / "host_22" / "cdcd" / "20260101T000000Z-abcd"
    folder.mkdir(parents=True)
    state = DeployState(folder, "me@host:22", "host_22", "me", DeployRecord(run_id=folder.name, remote=layout.to_json()))
    with pytest.raises(TransitionError):
        state.update(status="complete")
    with pytest.raises(TransitionError, match="new -> running is not allowed"):
        state.advance(DeployStatus.RUNNING)
    assert not (folder / "deploy.json").exists()
    state.advance(DeployStatus.PREFLIGHT)
    state.advance(DeployStatus.RUNNING)
    assert json.loads((folder / "deploy.json").read_text())["status"] == "running"
    assert latest_unfinished(tmp_path / "res", "host_22") == folder
    state.advance(DeployStatus.COMPLETE)
    with pytest.raises(InputError, match="no unfinished deploy"):
        latest_unfinished(tmp_path / "res", "host_22")
