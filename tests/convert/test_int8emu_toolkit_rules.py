"""The INT8 emulation follows the toolkit where it departs from a plain fake-quantization (each rule
measured layer by layer against rknn-toolkit2 2.5.0's simulator on the default model, docs/EMULATOR.md):
weights rounded in float32, half to even; a Conv over a channel Concat split into one Conv per part, the
part over an int8 `<part>_conv` tensor rounded on its own grid before the sum; a Conv the toolkit follows by
an identity "select" Conv (a split head's first Conv) rounded on its `<input>_conv` grid; a hybrid build's
int8 <-> float16 conversions rounded for their readers; Sigmoid as 1 / (1 + exp(-x)), exp correctly
rounded. Tiny models, no
toolkit."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rkdet.convert import int8emu


def test_weights_round_in_float32_half_to_even() -> None:
    # measured: model.3's weight [11, 260] of the default model; w / scale is -42.5000016 in float64
    # but exactly -42.5 in float32, which the toolkit rounds to -42 (its simulator's Conv agrees)
    scale, zero = 0.0015038622944962745, 22
    w = np.array([-0.06391414999961853], np.float32).reshape(1, 1, 1, 1)
    entry = {"dtype": "int8", "scale": [scale], "zero_point": [zero]}
    rounded = int8emu.on_grid(w, entry, 0)
    assert rounded is not None and rounded.dtype == np.float32
    steps = float(rounded.ravel()[0]) / np.float32(scale)
    assert round(steps) == -42, steps  # float64 arithmetic would give -43
    assert float(np.float64(w.ravel()[0]) / scale) < -42.5  # what float64 says, for the record
    # half to even on an exact tie: 2.5 steps -> 2, 3.5 -> 4
    ties = int8emu.on_grid(np.array([2.5, 3.5], np.float32), {"dtype": "int32", "scale": [1.0]}, 0)
    assert ties is not None and ties.tolist() == [2.0, 4.0]
    assert int8emu.on_grid(w, None, 0) is None and int8emu.on_grid(w, {"dtype": "uint4"}, 0) is None


A_SCALE, A_ZERO, Y_SCALE, Y_ZERO = 0.05, 3, 0.04, -5
RNG = np.random.default_rng(31)
W = RNG.normal(0, 0.4, (4, 5, 1, 1)).astype(np.float32)
B = RNG.normal(0, 0.3, (4,)).astype(np.float32)


def _model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
         helper.make_node("Conv", ["cat", "W", "B"], ["y"], kernel_shape=[1, 1])],
        "concat_conv",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 2, 4, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


def _channel(values: np.ndarray, axis_size: int, dtype: str = "int8") -> dict:
    scale = (np.abs(values.reshape(axis_size, -1)).max(axis=1) / 120).tolist()
    return {"dtype": dtype, "scale": scale, "zero_point": [0] * axis_size, "shape": list(values.shape)}


TABLE = {
    "y": {"dtype": "int8", "scale": [Y_SCALE], "zero_point": [Y_ZERO]},
    "a_conv": {"dtype": "int8", "scale": [A_SCALE], "zero_point": [A_ZERO]},  # the part the simulator keeps in int8
    "a_conv_i1": _channel(W[:, :2], 4),
    "b_conv": {"dtype": "int8", "scale": [0.07], "zero_point": [0], "qmode": "replace"},  # fused into the sum
    "b_conv_i1": _channel(W[:, 2:], 4),
    "b_conv_i2": {"dtype": "int32", "scale": [1e-4] * 4, "zero_point": [0] * 4},
}


def _run(model: bytes, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, {"a": a, "b": b})[0]


def _q(x: np.ndarray, scale: float, zero: int) -> np.ndarray:
    return ((np.clip(np.round(x / scale) + zero, -128, 127) - zero) * scale).astype(np.float32)


def test_a_conv_over_a_concat_is_split_as_the_toolkit_builds_it() -> None:
    emulation = int8emu.fake_quantize(_model(), TABLE)
    model = onnx.load_from_string(emulation.onnx_bytes)
    produced = {o for n in model.graph.node for o in n.output}
    assert {"a_conv", "b_conv", "y"} <= produced  # the parts carry the toolkit's tensor names
    assert "W" not in {i.name for i in model.graph.initializer}  # the whole Conv's weights are gone
    a = RNG.normal(0, 1, (1, 2, 4, 4)).astype(np.float32)
    b = RNG.normal(0, 1, (1, 3, 4, 4)).astype(np.float32)
    got = _run(emulation.onnx_bytes, a, b)
    wa = int8emu.on_grid(W[:, :2], TABLE["a_conv_i1"], 0)
    wb = int8emu.on_grid(W[:, 2:], TABLE["b_conv_i1"], 0)
    bias = int8emu.on_grid(B, TABLE["b_conv_i2"], 0)
    part_a = _q(np.einsum("oc,nchw->nohw", wa[:, :, 0, 0], a), A_SCALE, A_ZERO)  # rounded on its own grid
    part_b = np.einsum("oc,nchw->nohw", wb[:, :, 0, 0], b) + bias.reshape(1, -1, 1, 1)  # not rounded: fused
    expected = _q(part_a + part_b, Y_SCALE, Y_ZERO)
    assert np.allclose(got, expected, atol=Y_SCALE * 1e-3), np.abs(got - expected).max() / Y_SCALE
    # the part's rounding is what makes it differ from one Conv over the Concat
    whole = _q(np.einsum("oc,nchw->nohw", np.concatenate([wa, wb], 1)[:, :, 0, 0], np.concatenate([a, b], 1))
               + bias.reshape(1, -1, 1, 1), Y_SCALE, Y_ZERO)
    assert not np.allclose(got, whole, atol=Y_SCALE * 1e-3)


def test_a_conv_over_a_concat_without_the_toolkits_parts_stays_whole() -> None:
    table = {k: v for k, v in TABLE.items() if not k.startswith("a_conv")}
    model = onnx.load_from_string(int8emu.fake_quantize(_model(), table).onnx_bytes)
    assert [n.op_type for n in model.graph.node if n.op_type in ("Conv", "Sum")] == ["Conv"]
    assert "a_conv" not in {o for n in model.graph.node for o in n.output}


def _first_conv() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W", "B"], ["y"], name="conv0", kernel_shape=[1, 1])], "first_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


FIRST = {"x_conv": {"dtype": "int8", "scale": [A_SCALE], "zero_point": [A_ZERO]},  # as a split head's `images_conv`
         "conv0_select_i1": {"dtype": "int8", "scale": [1 / 255] * 4, "zero_point": [-128] * 4, "shape": [4, 1, 1, 1]},
         "W": _channel(W, 4), "B": {"dtype": "int32", "scale": [1e-4] * 4, "zero_point": [0] * 4}}


def test_a_conv_the_toolkit_follows_by_a_select_conv_is_rounded_on_its_own_grid() -> None:
    import onnxruntime as ort

    x = RNG.normal(0, 1, (1, 5, 4, 4)).astype(np.float32)
    got = ort.InferenceSession(int8emu.fake_quantize(_first_conv(), FIRST).onnx_bytes,
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    w, bias = int8emu.on_grid(W, FIRST["W"], 0), int8emu.on_grid(B, FIRST["B"], 0)
    plain = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x) + bias.reshape(1, -1, 1, 1)
    assert np.allclose(got, _q(plain, A_SCALE, A_ZERO), atol=A_SCALE * 1e-3)
    assert not np.allclose(got, plain, atol=A_SCALE * 1e-3)
    # without the select Conv, `x_conv` is a Concat part's (the input feeds one elsewhere): the Conv stays whole
    alone = {k: v for k, v in FIRST.items() if k != "conv0_select_i1"}
    model = onnx.load_from_string(int8emu.fake_quantize(_first_conv(), alone).onnx_bytes)
    assert "x_conv" not in {o for n in model.graph.node for o in n.output}


def test_a_hybrid_builds_conversions_between_int8_and_float16_layers() -> None:
    # measured: a chain built with one float16 layer (quantize.float_layers) was 3 LSB off the simulator
    # until the readers of its int8 -> float16 -> int8 conversions (`c__float16`, `r__int8`) got them so
    import onnxruntime as ort

    scale = 0.006316714193306717  # float16 holds no multiple of it exactly
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Identity", ["r"], ["y"])], "hybrid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()
    grid = {"dtype": "int8", "scale": [scale], "zero_point": [-128]}
    table = {"c": grid, "c__float16": {**grid, "dtype": "float16"}, "r": {**grid, "dtype": "float16"}, "r__int8": grid}
    x = np.linspace(0.01, 1.5, 64, dtype=np.float32).reshape(1, 64)

    def steps(t: dict) -> np.ndarray:
        y = ort.InferenceSession(int8emu.fake_quantize(model, t).onnx_bytes,
                                 providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        return y.astype(np.float64) / scale

    on_grid = steps(table)
    assert np.abs(on_grid - np.round(on_grid)).max() < 1e-4  # read as int8 after the float16 layer
    assert np.allclose(on_grid * scale, _q(x, scale, -128), atol=scale * 1e-3)
    halved = steps({k: v for k, v in table.items() if k != "r__int8"})
    assert np.abs(halved - np.round(halved)).max() > 1e-3  # float16 values, off the grid


# measured on the default model: (Swish input, its output's int8 scale and zero point, the simulator's value)
# for elements on a rounding tie, where onnxruntime's Sigmoid kernel rounds one step the other way
SWISH_TIES = [(0.47088307, 0.03051286491693235, -119, -109), (-2.6005476, 0.03993467536627077, -121, -126),
              (8.600417, 0.25668164141037886, -127, -93), (-3.981133, 0.029177722860785092, -118, -121),
              (-1.5744789, 0.021611777590770348, -115, -128), (1.7219503, 0.05962726099818361, -123, -99),
              (-2.391931, 0.019087624199250166, -113, -124)]  # the last: onnxruntime's float32 Exp is 1 ulp off


def test_sigmoid_is_computed_as_the_simulator_computes_it() -> None:
    import onnxruntime as ort

    from rkdet.onboard.reference import session_options

    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])], "swish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()
    for x, scale, zero, simulator in SWISH_TIES:
        table = {"y": {"dtype": "int8", "scale": [scale], "zero_point": [zero]}}
        emulation = int8emu.fake_quantize(model, table).onnx_bytes
        assert "Sigmoid" not in {n.op_type for n in onnx.load_from_string(emulation).graph.node}
        session = ort.InferenceSession(emulation, session_options(ort), providers=["CPUExecutionProvider"])
        y = session.run(None, {"x": np.full((1, 64), x, np.float32)})[0]  # 64 wide: the vectorised path
        assert set((np.round(y.astype(np.float64) / scale) + zero).ravel().tolist()) == {simulator}, (x, y[0, 0])
