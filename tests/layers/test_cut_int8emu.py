"""A cached cut model is computed with this rkdet's INT8 emulation: `CutBuilder._int8_cut` makes the cut's
model.int8emu.onnx again from the build's table (no toolkit run), so a cut cached by an older rkdet (whose
emulation rounded differently) is not run with the older emulation, while the full build's model is the new."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rkdet.bisection.cuts import CutBuilder
from rkdet.convert import int8emu


def _cut(folder: Path) -> bytes:
    w = np.linspace(-0.5, 0.5, 8, dtype=np.float32).reshape(2, 4, 1, 1)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[1, 1])], "cut",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 2, 2, 2])],
                              [numpy_helper.from_array(w, "W")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(data)
    return data


def test_a_cached_cut_gets_this_rkdets_emulation(tmp_path: Path) -> None:
    build, cut = tmp_path / "build", tmp_path / "cache" / "cut-1"
    build.mkdir()
    table = {"c": {"dtype": "int8", "scale": [0.01], "zero_point": [0]}}
    (build / int8emu.TABLE).write_text(json.dumps(table))
    data = _cut(cut)
    (cut / int8emu.FILE).write_bytes(data)  # what an older emulation left: here, not rounded at all
    builder = CutBuilder.__new__(CutBuilder)  # only `build` is read by _int8_cut
    builder.build = build
    builder._int8_cut(cut, None)
    expected = int8emu.fake_quantize(data, table).onnx_bytes
    assert (cut / int8emu.FILE).read_bytes() == expected
    stamp = (cut / int8emu.FILE).stat().st_mtime_ns
    builder._int8_cut(cut, None)  # already current: left as it is
    assert (cut / int8emu.FILE).stat().st_mtime_ns == stamp
    ops = [n.op_type for n in onnx.load(str(cut / int8emu.FILE)).graph.node]
    assert "QuantizeLinear" in ops
