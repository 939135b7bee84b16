"""Every `E RKNN`/`W RKNN` line of toolkit.log is classified; an error-class line fails the build unless
accepted by pattern (real rknn-toolkit2 builds of tiny models that make the toolkit log them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convert_helpers import run_rkdet
from rkdet.convert import toolkit_log
from rkdet.errors import ConversionError
from tiny_models import classifier_model, wide_tail_model, write_config

REGTASK = ("\x1b[0mE RKNN: [13:46:20.584] REGTASK: The bit width of field value exceeds the limit, target: v2, "
           "offset: 0x6024, shift = 16, limit: 0x1fff, value: 0x3f80")


def test_table_classifies_known_unknown_and_strips_colour():
    log = "\n".join([REGTASK, REGTASK, "I rknn building ...", "E RKNN: [1:2:3.4] Unkown op target: 0",
                     "E RKNN: [1:2:3.4] Something new broke: 7", "W RKNN: [1:2:3.4] a new warning 1",
                     "\x1b[1;33mW\x1b[0m \x1b[1;33mbuild: not an RKNN library line\x1b[0m"])
    report = toolkit_log.classify(log)
    assert [(g.key, g.count) for g in report.errors] == [("regtask-overflow", 2), ("unknown-error", 1)]
    assert [g.key for g in report.warnings] == ["unknown-op-target", "unknown-warning"]
    assert report.errors[0].first_line.startswith("E RKNN: REGTASK")
    with pytest.raises(ConversionError, match=r"\(\+2 more\): .E RKNN: REGTASK.*yolov8-split-head.*toolkit.accept_errors: \['REGTASK'\]"):
        toolkit_log.gate(report, "rk3588")


def test_accepted_pattern_is_recorded_and_unknown_errors_still_fail():
    report = toolkit_log.classify(f"{REGTASK}\nE RKNN: [1:2] Something new broke: 7", ["REGTASK"])
    assert report.errors[0].accepted_by == "REGTASK"
    with pytest.raises(ConversionError, match="Something new broke"):
        toolkit_log.gate(report, "rk3588")
    toolkit_log.gate(toolkit_log.classify(REGTASK, [r"bit width"]), "rk3588")


def test_clean_log_has_no_summary():
    assert toolkit_log.classify("I rknn building done.\n").summary() is None


@pytest.fixture(scope="module")
def wide(tiny_assets, tmp_path_factory) -> Path:
    return wide_tail_model(tmp_path_factory.mktemp("wide") / "wide.onnx")


@pytest.mark.slow
def test_regtask_overflow_fails_the_build_exit_4(wide, tiny_assets, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", wide, tiny_assets["cal"], tiny_assets["gold"])
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 4, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("rkdet: rk3588: the toolkit logged an error (+")
    assert "REGTASK: The bit width of field value exceeds the limit" in last
    assert "model.prepare: yolov8-split-head" in last and "smaller input size" in last
    assert not any((tmp_path / "out").glob("tiny-rk3588*"))  # nothing installed, nothing half-written


@pytest.mark.slow
def test_regtask_accepted_by_pattern_builds_and_is_recorded(wide, tiny_assets, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", wide, tiny_assets["cal"], tiny_assets["gold"],
                       toolkit={"accept_errors": ["REGTASK"]})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    build = json.loads(proc.stdout)["builds"][0]
    assert any(w.startswith("toolkit.log: regtask-overflow x") and "(accepted)" in w for w in build["warnings"])
    doc = json.loads((Path(build["folder"]) / "manifest.json").read_text())
    (group,) = doc["toolkit_log"]["errors"]
    assert group["key"] == "regtask-overflow" and group["accepted_by"] == "REGTASK" and group["count"] > 1
    assert doc["toolkit_log"]["accept_errors"] == ["REGTASK"]
    assert doc["inputs"]["config"]["resolved"]["toolkit"]["accept_errors"] == ["REGTASK"]


@pytest.mark.slow
def test_classifier_unknown_op_target_is_a_summarised_warning(tiny_assets, tmp_path):
    onnx_path = classifier_model(tmp_path / "cls.onnx", softmax=False)
    cfg = write_config(tmp_path / "c.yaml", onnx_path, tiny_assets["cal"], tiny_assets["gold"])
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    build = json.loads(proc.stdout)["builds"][0]
    assert [w for w in build["warnings"] if w.startswith("toolkit.log:")] == [
        "toolkit.log: unknown-op-target x1 (meaning and fix in manifest.json toolkit_log)"]
    doc = json.loads((Path(build["folder"]) / "manifest.json").read_text())
    assert doc["toolkit_log"]["errors"] == []
    assert doc["toolkit_log"]["warnings"][0]["first_line"] == "E RKNN: Unkown op target: 0"


def test_bad_accept_pattern_is_a_config_error(tiny_config):
    cfg = tiny_config(toolkit={"accept_errors": ["REGTASK("]})
    proc = run_rkdet("config", "show", "--config", str(cfg))
    assert proc.returncode == 2
    assert "toolkit.accept_errors" in proc.stderr and "not a valid regular expression" in proc.stderr


@pytest.mark.slow
def test_regtask_fails_the_fp16_build_too(wide, tiny_assets, tmp_path):
    """FP16 (what an INT8 failure suggests) logs the same overflow: it must not print "built" silently."""
    cfg = write_config(tmp_path / "c.yaml", wide, tiny_assets["cal"], tiny_assets["gold"],
                       quantize={"enabled": False, "force_fp16": True})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert "REGTASK" in proc.stderr.strip().splitlines()[-1] and "built" not in proc.stderr


def test_a_fix_names_the_gate_the_model_has():
    """`Unkown op target` on a model with a decoded layout points at the decision gate; on one without (no
    decision gate) it names the numeric gates instead of a gate the model does not have (issue 24 §7)."""
    line = "E RKNN: [1:2:3.4] Unkown op target: 0"
    with_decisions = toolkit_log.classify(line).warnings[0].fix
    numeric = toolkit_log.classify(line, decisions=False).warnings[0].fix
    assert "the decision gate compares" in with_decisions
    assert "decision gate compares" not in numeric and "numeric gates" in numeric and "no decision gate" in numeric
    assert "{gate}" not in with_decisions + numeric


def test_the_worst_failing_output_is_named_and_every_output_listed():
    """Convert's gate names the worst failing output of a kind (as the search table does), and the detail
    line lists every output's value (issue 24 §7)."""
    from rkdet.config import FidelitySection
    from rkdet.convert.fidelity import FidelityReport, GateResult, detail_line, gate, summary_line
    from rkdet.errors import FidelityGateError

    limit = FidelitySection().min_cosine
    report = FidelityReport({"kind": "none"}, [GateResult("cosine", f"transpose_{i}", v, limit, v >= limit, True)
                                                for i, v in enumerate((0.5298, 0.99, 0.1317, 0.7))])
    with pytest.raises(FidelityGateError) as err:
        gate(report, "rk3588")
    assert "transpose_2 cosine 0.1317" in str(err.value) and err.value.gate == "cosine"
    assert err.value.subject == "transpose_2"
    assert "cosine transpose_2 0.1317" in summary_line(report, "rk3588")
    detail = detail_line(report, "rk3588")
    assert all(f"transpose_{i} " in detail for i in range(4))
    assert "transpose_2 0.1317 FAIL worst" in detail and "transpose_1 0.99," in detail
    assert err.value.details == (summary_line(report, "rk3588"), detail)
