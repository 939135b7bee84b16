"""probe.sh: machine-readable board description, parts found by name, absent parts reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bs_helpers import VARIANTS

from rkdet.boardinfo.scripts import run_script_locally_full
from rkdet.records.probe import parse_probe


@pytest.mark.parametrize("soc", sorted(VARIANTS))
def test_probe_describes_each_soc(soc: str, shell: str, make_tree, state_dir: Path) -> None:
    prof = VARIANTS[soc]
    root = make_tree(soc)
    run = run_script_locally_full("probe", root, state_dir, shell=shell, env={"RKDET_WORK_DIR": str(root)})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines and all(json.loads(line)["script"] == "probe" for line in lines)  # every line is a record
    rep = parse_probe(run.records)
    assert rep.ok and rep.soc == prof.soc and rep.compatible == prof.compatible and rep.model == prof.model
    assert rep.kernel == prof.kernel
    assert [p.name for p in rep.cpu_policies] == [p.name for p in prof.cpu_policies]
    assert [p.frequencies_khz for p in rep.cpu_policies] == [p.frequencies_khz for p in prof.cpu_policies]
    for kind in ("npu", "gpu", "ddr"):
        want = prof.devfreq_of(kind)
        got = rep.devfreq_of(kind)
        if want is None:
            assert got is None and kind in rep.missing
        else:
            assert got is not None and got.name == want.name and got.frequencies_hz == want.frequencies_hz
            assert got.governor == want.governor and got.max_hz == max(want.frequencies_hz)
    assert rep.thermal == {z.type: z.millicelsius for z in prof.thermal_zones}
    assert rep.runtime_version == prof.runtime_version
    assert rep.runtime_library == "/" + prof.runtime_library
    assert rep.rknpu_version == (prof.rknpu_driver or None)
    if prof.rknpu_driver:
        assert rep.npu_load is not None and "Core0" in rep.npu_load
    else:
        assert "rknpu" in rep.missing
    assert rep.compaction_proactiveness == (prof.compaction_proactiveness if prof.has_compaction_proactiveness else None)
    assert rep.thp == ("madvise" if prof.thp_enabled else None)
    if not prof.has_compaction_proactiveness:
        assert ("CONFIG_COMPACTION" in rep.missing["compaction_proactiveness"]) == (prof.kernel >= "5")
    assert rep.work_dir_free_kb is not None and rep.work_dir_free_kb > 0
    assert rep.pinned_state is False


def test_rv1126_has_no_gpu_and_no_compaction(make_tree, state_dir: Path) -> None:
    rep = parse_probe(run_script_locally_full("probe", make_tree("rv1126"), state_dir).records)
    assert rep.devfreq_of("gpu") is None and "gpu" in rep.missing
    assert rep.compaction_proactiveness is None and "compaction_proactiveness" in rep.missing
    assert rep.devfreq_of("npu") is not None and rep.devfreq_of("npu").name == "ffbc0000.npu"


def test_nodes_found_by_name_not_index(make_tree, state_dir: Path) -> None:
    root = make_tree("rk3568")
    devfreq = root / "sys/class/devfreq"
    # Vendor kernels without a named OPP table expose the NPU as devfreq0; the GPU may be absent.
    (devfreq / "fde40000.npu").rename(devfreq / "devfreq0")
    (devfreq / "fde60000.gpu").unlink()
    rep = parse_probe(run_script_locally_full("probe", root, state_dir).records)
    assert rep.devfreq_of("npu").name == "devfreq0"
    assert rep.devfreq_of("npu").frequencies_hz[1] == 297000000
    assert rep.devfreq_of("gpu") is None and "gpu" in rep.missing
    assert rep.devfreq_of("ddr").name == "dmc"


def test_probe_of_an_empty_root_reports_missing_not_fatal(tmp_path: Path, state_dir: Path) -> None:
    run = run_script_locally_full("probe", tmp_path, state_dir, env={"RKDET_PYTHON": "no-such-python-rkdet"})
    assert run.returncode == 0, run.stderr
    rep = parse_probe(run.records)
    assert rep.ok and rep.soc is None and rep.kernel is None
    assert {"soc", "kernel", "cpufreq", "npu", "gpu", "ddr", "thermal", "rknpu", "runtime", "python"} <= set(rep.missing)


def test_probe_sees_a_leftover_pin_state(make_tree, state_dir: Path) -> None:
    root = make_tree("rk3588")
    assert run_script_locally_full("pin", root, state_dir).returncode == 0
    assert parse_probe(run_script_locally_full("probe", root, state_dir).records).pinned_state is True


def test_relative_root_is_refused(tmp_path: Path) -> None:
    run = run_script_locally_full("probe", "relative/root", tmp_path)
    assert run.returncode == 2 and "RKDET_ROOT must be an absolute path" in run.stderr


def test_python_and_rknnlite_detection(make_tree, state_dir: Path, tmp_path: Path) -> None:
    """rknnlite availability is what `python3 -c "import rknnlite"` says on the board."""
    fake_site = tmp_path / "site"
    (fake_site / "rknnlite").mkdir(parents=True)
    (fake_site / "rknnlite" / "__init__.py").write_text("")
    root = make_tree("rk3588")
    without = parse_probe(run_script_locally_full("probe", root, state_dir).records)
    with_lite = parse_probe(run_script_locally_full("probe", root, state_dir,
                                                  env={"PYTHONPATH": str(fake_site)}).records)
    assert without.python_version and without.rknnlite is False
    assert with_lite.rknnlite is True
