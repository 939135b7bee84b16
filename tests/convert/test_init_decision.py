"""`rkdet init` on models whose outputs rkdet recognises no layout of: it proposes a `decision:` section,
every rule marked `# CHECK`, that loads and judges (tiny models made here; no toolkit run)."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from rkdet.config import load_config
from rkdet.convert.init import write_config
from rkdet.decode import detect_layout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "decode"))
from decision_models import S, dense_map_model, two_head_model  # noqa: E402


def test_init_proposes_a_checked_decision_for_a_two_head_classifier(tmp_path: Path) -> None:
    out, facts = write_config(two_head_model(tmp_path / "face.onnx"), tmp_path / "face.yaml")
    text = out.read_text()
    assert facts.kind == "unknown" and "a `decision:` section is proposed" in text
    lines = {ln.split(":")[0].strip(): ln for ln in text.splitlines() if ln.startswith("    ")}
    assert "# CHECK" in lines["prob"] and "rule: threshold, channel: 1, threshold: 0.5, range: [0, 1]" in lines["prob"]
    assert "a Softmax/Sigmoid output: values in [0, 1]" in lines["prob"]  # its near-tie band is bounded
    assert "# box [1, 4]: no rule proposed" in text  # a box head is judged numerically
    cfg = load_config(out)
    assert cfg.decision is not None and set(cfg.decision.outputs) == {"prob"}
    layout = detect_layout([("prob", (1, 2)), ("box", (1, 4))], declared=cfg.decision.outputs)
    assert layout.kind == "declared" and layout.roles == {"prob": "threshold"}


def test_init_proposes_a_per_pixel_rule_for_a_dense_map(tmp_path: Path) -> None:
    out, _ = write_config(dense_map_model(tmp_path / "pnet.onnx"), tmp_path / "pnet.yaml")
    doc = yaml.safe_load(out.read_text())
    assert doc["decision"]["outputs"]["map"] == {"rule": "pixel-threshold", "axis": -1, "channel": 1, "threshold": 0.5,
                                                 "range": [0, 1]}  # Softmax then Transpose: still probabilities
    cfg = load_config(out)
    assert cfg.decision is not None and cfg.decision.outputs["map"].range == (0.0, 1.0)
    assert detect_layout([("map", (1, S, S, 2))], declared=cfg.decision.outputs).kind == "declared"


def test_init_writes_core_0_and_a_config_without_it_gets_core_0(tmp_path: Path) -> None:
    from rkdet.deploy.settings import AUTO_WARNING, DeploySettings, RunSettings

    out, _ = write_config(two_head_model(tmp_path / "face.onnx"), tmp_path / "face.yaml")
    text = out.read_text()
    assert 'core_mask: "0"' in text and "run on NPU core randomly" in text
    assert load_config(out).run.core_mask == "0"
    doc = yaml.safe_load(text)
    del doc["run"]
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(doc))
    cfg = load_config(bare)
    assert cfg.run.core_mask == "0"
    assert RunSettings.from_config(DeploySettings(run=cfg.run, board=cfg.board, tolerances=cfg.tolerances, source="x")).core_mask == "0"
    assert RunSettings().core_mask == "0"
    assert "run on NPU core randomly" in AUTO_WARNING


def test_a_rule_naming_no_output_is_one_line_before_any_build(tmp_path: Path) -> None:
    from convert_helpers import run_rkdet
    from tiny_models import image_folder, write_config as tiny_config

    cfg = tiny_config(tmp_path / "bad.yaml", two_head_model(tmp_path / "m.onnx"), image_folder(tmp_path / "cal", 2, seed=1),
                      image_folder(tmp_path / "gold", 1, seed=2),
                      decision={"outputs": {"score": {"rule": "threshold", "channel": 1, "threshold": 0.7}}})
    proc = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "decision.outputs.score: the model has no output 'score'" in proc.stderr
    assert "building with" not in proc.stderr and not list((tmp_path / "out").glob("*"))


def test_a_threshold_on_raw_scores_gets_no_range(tmp_path: Path) -> None:
    """Logits (no Softmax or Sigmoid at the output): no bound is known, so init declares none and the
    near-tie band stays ± score_tolerance, said unbounded (rkdet/decode/tasks/declared.py)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from decision_models import _save
    from rkdet.convert.onnx_graph import _load, probability_outputs

    w = numpy_helper.from_array(np.random.default_rng(1).normal(0, 1, (1, 3, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["score"])]  # a one-channel logit map [1, 1, S, S]
    model = _save(helper.make_graph(nodes, "logits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, S, S])],
                                    [helper.make_tensor_value_info("score", TensorProto.FLOAT, [1, 1, S, S])], [w]),
                  tmp_path / "logits.onnx")
    assert probability_outputs(_load(model)) == set()
    assert probability_outputs(_load(two_head_model(tmp_path / "face.onnx"))) == {"prob"}
    out, _ = write_config(model, tmp_path / "logits.yaml")
    rule = yaml.safe_load(out.read_text())["decision"]["outputs"]["score"]
    assert rule == {"rule": "pixel-threshold", "axis": 1, "channel": 0, "threshold": 0.5}
