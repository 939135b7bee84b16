"""`rkdet convert --search` without the toolkit: the documented order of the space, `--search-space`,
the searched config (the user's text plus exactly the changed keys), and the config key it sets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from convert_helpers import run_rkdet
from rkdet.config import load_config
from rkdet.errors import ConfigError, InputError
from rkdet.search.searched import render, searched_path
from rkdet.search.space import Space, hybrid_ks, hybrid_variants, parse_space, quantize_variants


def _changes(variants):
    return [v.changes for v in variants]


def test_the_default_space_in_its_documented_order():
    variants = quantize_variants(Space(), "normal", "channel", 8)
    A, M, N = "quantize.algorithm", "quantize.method", "quantize.max_images"
    assert _changes(variants) == [
        {},
        {A: "mmse"}, {A: "kl_divergence"}, {M: "layer"}, {N: 4}, {N: 2},
        {A: "mmse", M: "layer"}, {A: "kl_divergence", M: "layer"},
        {A: "mmse", N: 4}, {A: "mmse", N: 2}, {A: "kl_divergence", N: 4}, {A: "kl_divergence", N: 2},
        {M: "layer", N: 4}, {M: "layer", N: 2},
        {A: "mmse", M: "layer", N: 4}, {A: "mmse", M: "layer", N: 2},
        {A: "kl_divergence", M: "layer", N: 4}, {A: "kl_divergence", M: "layer", N: 2},
    ]
    assert [v.index for v in variants] == list(range(18))
    assert [v.stage for v in variants] == ["config"] + ["quantize"] * 17
    assert _changes(quantize_variants(Space(), "normal", "channel", 8)) == _changes(variants)  # same every time


def test_the_configs_own_values_change_nothing():
    variants = quantize_variants(Space(), "mmse", "layer", 3)
    A, M, N = "quantize.algorithm", "quantize.method", "quantize.max_images"
    assert _changes(variants)[:6] == [{}, {A: "normal"}, {A: "kl_divergence"}, {M: "channel"}, {N: 2}, {N: 1}]
    assert len(variants) == 18
    assert _changes(quantize_variants(Space(), "normal", "channel", 1)) == [  # one image: no subset to try
        {}, {A: "mmse"}, {A: "kl_divergence"}, {M: "layer"}, {A: "mmse", M: "layer"}, {A: "kl_divergence", M: "layer"}]


def test_hybrid_k_doubles_below_the_layer_count():
    assert hybrid_ks(Space(), 9, 64) == [1, 2, 4, 8]
    assert hybrid_ks(Space(), 8, 64) == [1, 2, 4]  # 8 of 8 layers would be a whole-float build
    assert hybrid_ks(Space(), 9, 3) == [1, 2]  # no more than `rkdet layers` ranked
    assert hybrid_ks(Space(hybrid=(3, 1)), 9, 64) == [3, 1]
    assert hybrid_ks(Space(hybrid=()), 9, 64) == []
    variants = hybrid_variants(18, [1, 2], ["c2", "r1", "y"], ["kept"])
    assert [(v.index, v.stage, v.changes) for v in variants] == [
        (18, "hybrid", {"quantize.float_layers": ["kept", "c2"]}),
        (19, "hybrid", {"quantize.float_layers": ["kept", "c2", "r1"]})]


def test_no_hybrid_variant_repeats_the_configs_own_float_layers():
    """Issue 36 §3: the worst layers the config already runs in float16 are not proposed again; a variant
    that would add no layer (the build that just failed) is not in the table."""
    variants = hybrid_variants(5, [1, 2, 4], ["c2", "r1", "y"], ["c2"])
    assert [(v.index, v.changes) for v in variants] == [
        (5, {"quantize.float_layers": ["c2", "r1"]}), (6, {"quantize.float_layers": ["c2", "r1", "y"]})]
    assert hybrid_variants(5, [1, 2], ["c2", "r1"], ["r1", "c2"]) == []
    for v in hybrid_variants(0, [1, 2, 4, 8], ["a", "b", "a", "c"], ["b"]):
        assert v.changes["quantize.float_layers"] != ["b"] and len(set(v.changes["quantize.float_layers"])) == len(
            v.changes["quantize.float_layers"])


def test_the_search_advice_does_not_propose_the_float_build_a_float_config_is():
    from rkdet.cli.search import _remedies
    from rkdet.search.run import LossShape, Outcome, SearchResult
    from rkdet.search.space import SearchVariant

    loss = LossShape(True, 0.98, 0.99, "conv3", 0.9, 0.9)

    def result(force_fp16: bool) -> SearchResult:
        given = Outcome(SearchVariant(0, "config"), "fail", {"algorithm": "normal", "force_fp16": force_fp16})
        return SearchResult("rk3588", Space(), False, [given], None, None, None, loss=loss)

    assert "quantize.force_fp16: true" in _remedies(result(False))
    assert "force_fp16" not in _remedies(result(True))


def test_search_space_narrows_a_dimension():
    space = parse_space(("algorithm=mmse,normal", "calibration=1", "hybrid=none"))
    assert space.algorithms == ("mmse", "normal") and space.methods == ("channel", "layer")
    assert space.calibration == (1,) and space.hybrid == ()
    assert _changes(quantize_variants(space, "normal", "channel", 8)) == [
        {}, {"quantize.algorithm": "mmse"}, {"quantize.method": "layer"},
        {"quantize.algorithm": "mmse", "quantize.method": "layer"}]
    for bad, said in (("colour=red", "expected DIM=V1,V2"), ("algorithm=fast", "fast not allowed"),
                      ("hybrid=two", "whole numbers"), ("calibration=0", ">= 1"), ("method=", "expected DIM")):
        with pytest.raises(InputError, match=said):
            parse_space((bad,))
    with pytest.raises(InputError, match="given twice"):
        parse_space(("hybrid=1", "hybrid=2"))


def test_search_flags_bad_input_is_one_line(tiny_config):
    cfg = tiny_config()
    for args, said in ((("--search-all",), "--search-all, --search-space and --search-budget go with --search"),
                       (("--search-budget", "5m"), "go with --search"),
                       (("--search", "--search-budget", "soon"), "--search-budget 'soon': expected a duration"),
                       (("--search", "--search-space", "hybrid=x"), "whole numbers"),
                       (("--search", "--verify"), "run --verify (or --keep-failed) on the searched config")):
        proc = run_rkdet("convert", "--config", str(cfg), "--out", str(Path(cfg).parent / "out"), *args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], proc.stderr
    missing = tiny_config(model={"onnx": str(Path(cfg).parent / "missing.onnx")})  # the config itself: exit 2 at once
    proc = run_rkdet("convert", "--config", str(missing), "--out", str(Path(cfg).parent / "out2"), "--search")
    assert proc.returncode == 2 and "missing.onnx" in proc.stderr.strip().splitlines()[-1], proc.stderr
    assert not (Path(cfg).parent / "out2" / "search.json").exists()
    assert not list((Path(cfg).parent / "out2").glob(".search-*"))
    two = tiny_config(target={"platforms": ["rk3588", "rk3566"]})
    proc = run_rkdet("convert", "--config", str(two), "--out", str(Path(two).parent / "out"), "--search")
    assert proc.returncode == 2 and "pass --target" in proc.stderr.strip().splitlines()[-1]


def test_float_layers_config_key(tiny_config):
    assert load_config(tiny_config(quantize={"float_layers": ["c2"]})).quantize.float_layers == ["c2"]
    for value, said in ((["c2", "c2"], "must not repeat"), ([" "], "empty")):
        with pytest.raises(ConfigError, match=said):
            load_config(tiny_config(quantize={"float_layers": value}))
    with pytest.raises(ConfigError, match="float_layers is hybrid quantization of a quantized build"):
        load_config(tiny_config(quantize={"float_layers": ["c2"], "force_fp16": True}))


def test_a_fully_quantized_build_is_fingerprinted_as_before(tiny_config):
    from rkdet.convert.manifest import build_config

    plain = build_config(load_config(tiny_config()), "rk3588")
    assert "float_layers" not in plain["quantize"]
    hybrid = build_config(load_config(tiny_config(quantize={"float_layers": ["c2"]})), "rk3588")
    assert hybrid["quantize"]["float_layers"] == ["c2"]


CONFIG = """\
# my model
name: mine   # the name

quantize:
  dataset: cal          # relative to this file
  algorithm: normal     # was normal
  float_layers:
    - old
  method: channel

golden:
  inputs: gold
"""


@pytest.mark.parametrize("changes", [
    {"quantize.algorithm": "mmse"},
    {"quantize.float_layers": ["a/b:c", "d e"], "quantize.max_images": 3},
    {"quantize.method": "layer", "toolkit.optimization_level": 0},
])
def test_searched_config_is_the_users_plus_exactly_the_changed_keys(tmp_path, changes):
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(CONFIG)
    text = render(cfg, changes, "variant 3 passes", "header one\nheader two")
    raw = yaml.safe_load(CONFIG)
    for dotted, value in changes.items():
        section, key = dotted.split(".")
        raw.setdefault(section, {})[key] = value
    assert yaml.safe_load(text) == raw
    lines = text.splitlines()
    assert lines[:2] == ["# header one", "# header two"]
    for dotted in changes:
        key = dotted.split(".")[1]
        assert any(ln.strip().startswith(f"{key}:") and ln.endswith("# rkdet convert --search: variant 3 passes")
                   for ln in lines), text
    untouched = [ln for ln in CONFIG.splitlines()
                 if not any(ln.strip().startswith(f"{d.split('.')[1]}:") for d in changes)
                 and not (ln.strip() == "- old" and "quantize.float_layers" in changes)]
    assert all(ln in lines for ln in untouched), text  # comments and order kept
    assert searched_path(cfg) == tmp_path / "mine.searched.yaml"


def test_searched_config_in_flow_style_is_dumped_whole(tmp_path):
    cfg = tmp_path / "flow.yml"
    cfg.write_text("name: x\nquantize: {dataset: cal, algorithm: normal}\ngolden: {inputs: gold}\n")
    text = render(cfg, {"quantize.algorithm": "mmse"}, "why", "head")
    assert yaml.safe_load(text) == {"name": "x", "quantize": {"dataset": "cal", "algorithm": "mmse"},
                                    "golden": {"inputs": "gold"}}
    assert "could not be edited in place" in text and "# rkdet convert --search changed quantize.algorithm: why" in text
    assert searched_path(cfg) == tmp_path / "flow.searched.yaml"
