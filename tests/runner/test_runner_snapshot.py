"""Board snapshots read a fake sysfs tree under RKDET_ROOT, finding nodes by name, never by index."""

import json
import os

from rkdet.emulator.fake_tree import build_fake_tree, devfreq_initial_freq
from rkdet.emulator.socs import RK3568, RK3588, RV1126
from rkdet.onboard.resultset import read_jsonl
from rkdet.onboard.snapshot import board_snapshot
from runner_helpers import base_env, make_inputs, make_model, run_cli


def test_snapshot_of_an_rk3588_tree(tmp_path):
    root = build_fake_tree(RK3588, tmp_path)
    snap = board_snapshot("before", None, root=str(root))
    assert snap["at"] == "before" and snap["run"] is None
    assert list(snap["cpu"]) == [p.name for p in RK3588.cpu_policies]
    for policy in RK3588.cpu_policies:
        cur = int((root / "sys/devices/system/cpu/cpufreq" / policy.name / "scaling_cur_freq").read_text())
        assert snap["cpu"][policy.name] == {"governor": policy.governor, "cur_khz": cur}
    for node in RK3588.devfreq:
        assert snap["devfreq"][node.name] == {"governor": node.governor,
                                              "cur_hz": devfreq_initial_freq(node.frequencies_hz, node.governor,
                                                                                  node.boot_hz)}
    assert snap["thermal"] == {z.type: z.millicelsius for z in RK3588.thermal_zones}
    assert snap["npu_load"].startswith("NPU load:") and "Core2" in snap["npu_load"]


def test_thermal_zones_are_keyed_by_type_whatever_their_index(tmp_path):
    root = build_fake_tree(RK3568, tmp_path)
    zones = root / "sys/class/thermal"
    os.rename(zones / "thermal_zone0", zones / "thermal_zone7")  # another kernel, another order
    (zones / "thermal_zone1" / "temp").write_text("55000\n")
    snap = board_snapshot("periodic", 3, root=str(root))
    assert snap["thermal"] == {"soc-thermal": 43000, "gpu-thermal": 55000}


def test_rv1126_has_no_rknpu_load_and_a_missing_node_is_null(tmp_path):
    root = build_fake_tree(RV1126, tmp_path)
    (root / "sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq").unlink()
    snap = board_snapshot("after", 0, root=str(root))
    assert snap["npu_load"] is None
    assert snap["cpu"]["policy0"]["cur_khz"] == int((root / "sys/devices/system/cpu/cpufreq/policy0/cpuinfo_cur_freq").read_text())
    assert snap["devfreq"]["ffbc0000.npu"]["governor"] == "userspace"  # the only one RV1126's defconfig builds
    empty = board_snapshot("before", None, root=str(tmp_path / "nothing"))
    assert empty["cpu"] == {} and empty["devfreq"] == {} and empty["thermal"] == {} and empty["npu_load"] is None


def test_runner_records_snapshots_from_rkdet_root(tmp_path):
    root = build_fake_tree(RK3588, tmp_path / "board")
    model = make_model(tmp_path / "m.onnx")
    inputs = make_inputs(tmp_path / "in", count=1)
    proc = run_cli(["--model", model, "--inputs", inputs, "--repeats", "4", "--snapshot-every", "2",
                    "--backend", "onnxruntime", "--out", tmp_path / "out"], env=base_env(RKDET_ROOT=str(root)))
    assert proc.returncode == 0, proc.stderr
    snaps = read_jsonl(str(tmp_path / "out" / "snapshots.jsonl"))
    assert [(s["at"], s["run"]) for s in snaps] == [("before", None), ("periodic", 1), ("after", 3)]
    assert all(s["thermal"] == {z.type: z.millicelsius for z in RK3588.thermal_zones} for s in snaps)
    assert all(s["devfreq"]["fdab0000.npu"]["governor"] == "rknpu_ondemand" for s in snaps)
    assert json.loads((tmp_path / "out" / "run.json").read_text())["snapshot_every"] == 2
