"""The bisection's pure parts: cut points and frontiers of a branched graph, the search's question count,
and the emulator's --fault-tensor form (exit 2 on a malformed one)."""

from __future__ import annotations

import math

import pytest

from layer_models import fragile_model

from rkdet.bisection.plan import bisect, cut_points, max_cut_builds
from rkdet.cli.emulator import fault_tensor_value
from rkdet.errors import InputError


@pytest.mark.parametrize("count", [1, 2, 3, 14, 100, 257])
def test_bisect_finds_every_position_within_the_bound(count):
    for fault in range(count):
        asked: list[int] = []
        found = bisect(count, lambda i: (asked.append(i), i >= fault)[1])
        assert found.first_departing == fault and found.last_agreeing == (fault - 1 if fault else None)
        assert asked[0] == count - 1 and len(asked) <= 1 + math.ceil(math.log2(count))
        assert len(asked) - 1 <= max_cut_builds(count)  # the first question runs the build's own model


def test_no_departure_asks_once():
    asked: list[int] = []
    assert bisect(9, lambda i: (asked.append(i), False)[1]).first_departing is None and asked == [8]


def test_frontier_of_a_branched_graph(tmp_path):
    points = cut_points(fragile_model(tmp_path / "f.onnx").read_bytes())
    by_node = {p.node: p for p in points}
    assert [p.node for p in points] == ["conv1", "relu1", "huge_a", "huge_b", "cancel", "head"]
    assert by_node["huge_a"].frontier == ("r1", "big_a")  # r1 is still read by huge_b
    assert by_node["huge_b"].frontier == ("big_a", "big_b")
    assert by_node["head"].frontier == ("y",)


@pytest.mark.parametrize("bad", ["", "a b", "x:run=", ":run=1", "x:run=-1"])
def test_fault_tensor_form(bad):
    with pytest.raises(InputError):
        fault_tensor_value(bad)
    assert fault_tensor_value("c3:run=2") == "c3:run=2" and fault_tensor_value("x:0") == "x:0"


def test_no_rkdet_module_shadows_the_standard_library():
    """A script run from rkdet/ (a checkout) puts rkdet/ first on sys.path: a module or package there named like a
    stdlib one (a `bisect` package did) breaks numpy's import."""
    import sys
    from pathlib import Path

    import rkdet

    names = {p.stem for p in Path(rkdet.__file__).parent.iterdir() if p.suffix == ".py" or p.is_dir()}
    assert not names & set(sys.stdlib_module_names)


def test_cut_takes_the_full_builds_parameters_where_it_shares_a_tensor():
    from rkdet.bisection.cut_worker import patch_params

    full = {"x": {"dtype": "float32", "max": [1.0]}, "c0": {"dtype": "int8", "scale": [0.01], "zero_point": [-128]},
            "r0": {"dtype": "int8", "scale": [0.02], "zero_point": [-128]}}
    cut = {"x": {"dtype": "float32", "max": [1.0]}, "c0": {"dtype": "int8", "scale": [0.03], "zero_point": [0]},
           "r0": {"dtype": "float32", "max": [2.5]}, "r0_int8": {"dtype": "int8", "scale": [0.05], "zero_point": [-1]}}
    report = patch_params(cut, full)
    assert cut["c0"] == full["c0"] and report["changed"] == ["c0"]  # shared, same dtype: the full build's
    assert cut["r0"] == {"dtype": "float32", "max": [2.5]}  # a cut output stays float: never re-typed
    assert report["own"] == ["r0_int8"] and cut["r0_int8"]["scale"] == [0.05] and report["tensors"] == 4
