"""The `.rknn` reader and content fingerprint, against files built by the real rknn-toolkit2.

Each model is built once per session. The two builds of each identical pair are each the first build of
a fresh process (as `rkdet convert` does), so they show the toolkit's real byte-level nondeterminism;
variants compared only by fingerprint share a process with one of them (one toolkit import per group).
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rkdet.convert.rknn_file import (
    RknnFormatError,
    compare_rknn,
    content_fingerprint,
    read_rknn,
)
from rkdet.errors import EXIT_BAD_INPUT, InputError

_BUILD = textwrap.dedent(
    """
    import json, sys, numpy as np, onnx
    from onnx import TensorProto, helper, numpy_helper
    def build(out, arch, seed, target, quant, method, algo):
        rng = np.random.default_rng(int(seed))
        def w(name, shape):
            return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
        node = helper.make_node
        dims, side, extra = [1, 3, 32, 32], 32, {}
        if arch in ("tiny", "dyn"):  # Conv 3->8 3x3, Relu, Conv 8->4 1x1, Sigmoid
            inits = [w("w1", (8, 3, 3, 3)), w("b1", (8,)), w("w2", (4, 8, 1, 1)), w("b2", (4,))]
            nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), node("Relu", ["c1"], ["r1"]),
                     node("Conv", ["r1", "w2", "b2"], ["c2"]), node("Sigmoid", ["c2"], ["y"])]
            outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 32, 32])]
            if arch == "dyn":  # two input shapes -> two graphs; calibration at the largest shape
                dims, side, outs = [1, 3, "h", "w"], 64, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
                extra = {"dynamic_input": [[[1, 3, 64, 64]], [[1, 3, 32, 32]]]}
        else:  # "mix": strided conv, maxpool, concat, reshape+softmax head, sigmoid+transpose head
            inits = [w("w1", (16, 3, 3, 3)), w("b1", (16,)), w("w2", (8, 32, 1, 1)), w("b2", (8,)),
                     w("w3", (8, 16, 1, 1)), w("b3", (8,)), numpy_helper.from_array(np.array([1, 2, 4, -1]), "shape")]
            nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
                     node("Relu", ["c1"], ["r1"]), node("MaxPool", ["r1"], ["p1"], kernel_shape=[5, 5], pads=[2] * 4),
                     node("Concat", ["r1", "p1"], ["cat"], axis=1), node("Conv", ["cat", "w2", "b2"], ["c2"]),
                     node("Reshape", ["c2", "shape"], ["rs"]), node("Softmax", ["rs"], ["y1"], axis=2),
                     node("Conv", ["r1", "w3", "b3"], ["c3"]), node("Sigmoid", ["c3"], ["s3"]),
                     node("Transpose", ["s3"], ["y2"], perm=[0, 2, 3, 1])]
            outs = [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 2, 4, 256]),
                    helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 16, 16, 8])]
        graph = helper.make_graph(nodes, arch, [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                                  outs, inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
        model.ir_version = 7
        onnx.save(model, out + ".onnx")
        cal = np.random.default_rng(1234)
        with open(out + ".ds.txt", "w") as f:
            for i in range(4):
                np.save(f"{out}.cal{i}.npy", cal.integers(0, 256, (1, 3, side, side)).astype(np.float32))
                f.write(f"{out}.cal{i}.npy\\n")
        from rknn.api import RKNN  # where a fresh process imports it; a group's later builds reuse it
        r = RKNN(verbose=False)
        r.config(mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]], target_platform=target,
                 quantized_dtype="w8a8", quantized_algorithm=algo, quantized_method=method, optimization_level=0, **extra)
        assert r.load_onnx(out + ".onnx") == 0
        assert r.build(do_quantization=quant == "1", dataset=out + ".ds.txt") == 0
        assert r.export_rknn(out) == 0
        r.release()
    for job in json.loads(sys.argv[1]):
        build(*job)
    """
)

# name -> (model, seed, target, quantize, quantized_method, quantized_algorithm)
_VARIANTS = {
    "base_a": ("tiny", 0, "rk3588", "1", "channel", "normal"),
    "base_b": ("tiny", 0, "rk3588", "1", "channel", "normal"),
    "seed1": ("tiny", 1, "rk3588", "1", "channel", "normal"),
    "rk3568": ("tiny", 0, "rk3568", "1", "channel", "normal"),
    "layer": ("tiny", 0, "rk3588", "1", "layer", "normal"),
    "mmse": ("tiny", 0, "rk3588", "1", "channel", "mmse"),
    "fp16": ("tiny", 0, "rk3588", "0", "channel", "normal"),
    # rk3576 adds many config buffers with uninitialised tails, and weights with data past their shape
    "mix_a": ("mix", 0, "rk3576", "1", "channel", "normal"),
    "mix_b": ("mix", 0, "rk3576", "1", "channel", "normal"),
    "dyn_a": ("dyn", 0, "rk3588", "1", "channel", "normal"),
    "dyn_b": ("dyn", 0, "rk3588", "1", "channel", "normal"),
}


# Builds that share one toolkit process (one `import rknn.api`, ~1.4-2.3 s of CPU, for the group). The first
# build of every group is a fresh process's first build, as `rkdet convert`'s; so are both builds of every
# identical pair (base, mix, dyn), which the volatile-section tests compare byte by byte. The later builds of
# a group (seed1, rk3568, layer, mmse, fp16) are only compared by content fingerprint with base_a.
_GROUPS = (("base_a", "seed1", "rk3568"), ("base_b", "layer"), ("mix_a", "mmse"), ("mix_b", "fp16"), ("dyn_a",),
           ("dyn_b",))
assert sorted(n for g in _GROUPS for n in g) == sorted(_VARIANTS)


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build every variant once, each group in a fresh process (`_GROUPS`), two processes at a time."""
    root = tmp_path_factory.mktemp("rknn_models")
    script = root / "build.py"
    script.write_text(_BUILD)

    def build(group: tuple[str, ...]) -> dict[str, Path]:
        outs = {name: root / f"{name}.rknn" for name in group}
        jobs = [[str(outs[name]), *map(str, _VARIANTS[name])] for name in group]
        proc = subprocess.run([sys.executable, str(script), json.dumps(jobs)], cwd=root, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0 and all(p.is_file() for p in outs.values()), \
            f"toolkit builds {group} failed:\n{proc.stderr[-2000:]}"
        return outs

    with ThreadPoolExecutor(max_workers=2) as pool:
        built = {name: path for outs in pool.map(build, _GROUPS) for name, path in outs.items()}
    return {name: built[name] for name in _VARIANTS}


# --- reading a real file ---------------------------------------------------------------------------


@pytest.mark.slow
def test_reads_header_and_metadata(models: dict[str, Path]) -> None:
    info = read_rknn(models["base_a"])
    assert info.format_version == 6
    assert info.model_format == "RKNPU v2"
    assert info.target_platform == "rk3588"
    assert info.toolkit_version == version("rknn-toolkit2")
    assert info.compiler_version.startswith(version("rknn-toolkit2"))
    assert info.source_framework == "ONNX"
    assert info.file_size == models["base_a"].stat().st_size
    assert info.metadata["target_platform"] == ["rk3588"]
    assert set(info.build_info["quant_tab"]) == {"x", "y"}


@pytest.mark.slow
def test_input_output_attrs_carry_quant_params(models: dict[str, Path]) -> None:
    info = read_rknn(models["base_a"])
    (x,), (y,) = info.inputs, info.outputs
    assert (x.name, x.shape, x.dtype, x.layout) == ("x", (1, 3, 32, 32), "int8", "NHWC")
    assert (y.name, y.shape, y.dtype) == ("y", (1, 4, 32, 32), "int8")
    # mean 0 / std 255 maps uint8 pixels to [0, 1]: asymmetric int8 has scale 1/255, zero point -128
    assert x.scale == pytest.approx((1 / 255,), rel=1e-6) and x.zero_point == (-128,)
    qy = info.build_info["quant_tab"]["y"]
    # the toolkit widens the calibrated range to include 0 before quantizing
    lo, hi = min(qy["min"][0], 0.0), max(qy["max"][0], 0.0)
    assert y.scale == pytest.approx(((hi - lo) / 255,), rel=1e-5) and y.zero_point == (-128,)
    dyn = read_rknn(models["dyn_a"])
    assert dyn.graph_count == 2 and info.graph_count == 1
    assert dyn.build_info["dynamic_shapes"]["x"] == [[1, 3, 64, 64], [1, 3, 32, 32]]
    assert dyn.inputs[0].shape == (1, 3, 64, 64)  # attributes of graph 0
    fp16 = read_rknn(models["fp16"])
    assert fp16.inputs[0].scale == () and fp16.inputs[0].zero_point == ()


@pytest.mark.slow
def test_sections_tile_the_file_and_hash_their_bytes(models: dict[str, Path]) -> None:
    import hashlib

    info = read_rknn(models["base_a"])
    data = models["base_a"].read_bytes()
    for s in info.sections:
        assert hashlib.sha256(data[s.offset : s.offset + s.size]).hexdigest() == s.sha256, s.name
    names = {s.name.split(":")[-1] for s in info.sections}
    assert {"header", "model", "metadata_json", "regcmd", "task", "w1", "b1", "w2", "b2"} <= names
    # leaf sections (all but the "model" aggregate) tile the file: no gap, no overlap
    leaves = sorted((s.offset, s.offset + s.size) for s in info.sections if s.name != "model" and s.size)
    assert leaves[0][0] == 0 and leaves[-1][1] == len(data)
    assert all(end == nxt for (_, end), (nxt, _) in zip(leaves, leaves[1:]))


@pytest.mark.slow
def test_reading_does_not_need_the_toolkit(models: dict[str, Path]) -> None:
    code = (
        "import sys; sys.modules['rknn'] = None; sys.modules['rknn.api'] = None\n"
        "from rkdet.convert.rknn_file import read_rknn, content_fingerprint\n"
        f"i = read_rknn({str(models['base_a'])!r}); print(content_fingerprint({str(models['base_a'])!r}))\n"
        "assert not any(m == 'rknn' or m.startswith('rknn.') for m, v in sys.modules.items() if v is not None)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == content_fingerprint(models["base_a"])


# --- fingerprint: stable across identical builds, sensitive to what matters -------------------------


@pytest.mark.slow
@pytest.mark.parametrize("pair", [("base_a", "base_b"), ("mix_a", "mix_b"), ("dyn_a", "dyn_b")])
def test_identical_builds_same_fingerprint_and_differences_only_in_volatile_sections(
    models: dict[str, Path], pair: tuple[str, str],
) -> None:
    a, b = models[pair[0]], models[pair[1]]
    assert content_fingerprint(a) == content_fingerprint(b) == read_rknn(a).content_fingerprint
    da, db = a.read_bytes(), b.read_bytes()
    assert len(da) == len(db)
    volatile = [(s.offset, s.offset + s.size) for s in read_rknn(a).sections if s.volatile]
    assert volatile, "toolkit2 files carry pointer tables and uninitialised buffer tails"
    stray = [i for i, (x, y) in enumerate(zip(da, db)) if x != y and not any(lo <= i < hi for lo, hi in volatile)]
    assert stray == [], f"bytes differ outside the volatile sections at {stray[:10]}"


@pytest.mark.slow
def test_compare_explains_a_rebuild_and_a_real_change(models: dict[str, Path]) -> None:
    same = compare_rknn(read_rknn(models["base_a"]), read_rknn(models["base_b"]))
    assert same.fingerprint_identical and same.differing_stable_sections == ()
    assert same.bytes_identical == (same.differing_sections == ())
    other = compare_rknn(read_rknn(models["base_a"]), read_rknn(models["seed1"]))
    assert not other.bytes_identical and not other.fingerprint_identical
    assert {"model.buffer[2]:w1", "model.buffer[8]:regcmd"} <= set(other.differing_stable_sections)


@pytest.mark.slow
def test_scrambling_volatile_bytes_keeps_fingerprint(models: dict[str, Path], tmp_path: Path) -> None:
    src = models["base_a"]
    data = bytearray(src.read_bytes())
    tails = [s for s in read_rknn(src).sections if s.name.endswith(":uninitialised_tail")]
    assert tails
    rng = random.Random(7)
    for s in tails:
        data[s.offset : s.offset + s.size] = bytes(rng.randrange(256) for _ in range(s.size))
    out = tmp_path / "scrambled.rknn"
    out.write_bytes(bytes(data))
    assert read_rknn(out).file_sha256 != read_rknn(src).file_sha256
    assert content_fingerprint(out) == content_fingerprint(src)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["seed1", "rk3568", "layer", "mmse", "fp16"])
def test_fingerprint_changes_with_weights_target_and_quant_config(models: dict[str, Path], variant: str) -> None:
    assert content_fingerprint(models[variant]) != content_fingerprint(models["base_a"])


@pytest.mark.slow
def test_flipping_a_weight_byte_changes_fingerprint(models: dict[str, Path], tmp_path: Path) -> None:
    src = models["base_a"]
    w1 = next(s for s in read_rknn(src).sections if s.name.endswith(":w1"))
    data = bytearray(src.read_bytes())
    data[w1.offset] ^= 0x01
    out = tmp_path / "flipped.rknn"
    out.write_bytes(bytes(data))
    assert content_fingerprint(out) != content_fingerprint(src)


@pytest.mark.slow
def test_undecoded_graph_slots_count_but_pointer_tables_do_not(models: dict[str, Path], tmp_path: Path) -> None:
    src = models["base_a"]
    slots = {s.name: s for s in read_rknn(src).sections if s.name.startswith("model.graph.slot")}
    assert slots["model.graph.slot9"].volatile and not slots["model.graph.slot7"].volatile
    for name, expect_same in (("model.graph.slot7", False), ("model.graph.slot9", True)):
        data = bytearray(src.read_bytes())
        s = slots[name]
        data[s.offset + s.size // 2] ^= 0xFF
        out = tmp_path / f"{name}.rknn"
        out.write_bytes(bytes(data))
        assert (content_fingerprint(out) == content_fingerprint(src)) is expect_same, name


@pytest.mark.slow
def test_weight_bytes_past_the_tensor_shape_still_count(models: dict[str, Path], tmp_path: Path) -> None:
    """On rk3576 a model weight's buffer holds data beyond native_shape x itemsize: it must count."""
    src = models["mix_a"]
    info = read_rknn(src)
    w1 = next(s for s in info.sections if s.name.endswith(":w1"))
    assert not any(s.name.startswith(w1.name + ":") for s in info.sections)  # no tail carved out
    data = bytearray(src.read_bytes())
    beyond = w1.offset + 3 * 3 * 16 * 4 + 4  # native shape [1,1,3,3,16,4] int8 = 576 bytes, then more data
    assert data[beyond - 4 : beyond + 12] != bytes(16)
    data[beyond] ^= 0x01
    out = tmp_path / "w1-tail.rknn"
    out.write_bytes(bytes(data))
    assert content_fingerprint(out) != info.content_fingerprint


# --- bad input: one line naming the file, exit 2, never a traceback ----------------------------------


def _assert_format_error(path: Path) -> RknnFormatError:
    with pytest.raises(RknnFormatError) as info:
        read_rknn(path)
    err = info.value
    assert isinstance(err, InputError) and err.exit_code == EXIT_BAD_INPUT
    assert str(path) in str(err) and "\n" not in str(err)
    with pytest.raises(RknnFormatError):
        content_fingerprint(path)
    return err


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.rknn"
    p.write_bytes(b"")
    assert "not an .rknn file" in str(_assert_format_error(p))


def test_random_bytes(tmp_path: Path) -> None:
    p = tmp_path / "random.rknn"
    p.write_bytes(random.Random(1).randbytes(4096))
    _assert_format_error(p)


def test_missing_file(tmp_path: Path) -> None:
    assert "cannot read" in str(_assert_format_error(tmp_path / "nope.rknn"))


def test_onnx_file_is_rejected(tmp_path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.zeros(2, np.float32), "unused")],
    )
    p = tmp_path / "model.onnx"
    onnx.save(helper.make_model(g), str(p))
    assert "not an .rknn file" in str(_assert_format_error(p))


def test_encrypted_and_toolkit1_containers_are_named(tmp_path: Path) -> None:
    enc = tmp_path / "enc.rknn"
    enc.write_bytes(b"CYPTRKNN" + bytes(64))
    assert "encrypted" in str(_assert_format_error(enc))
    old = tmp_path / "v1.rknn"
    old.write_bytes(b"RKNN\0\0\0\0" + struct.pack("<QQ", 1, 0) + bytes(16))
    assert "toolkit" in str(_assert_format_error(old))


@pytest.mark.slow
@pytest.mark.parametrize("keep", [8, 24, 63, 64, 1000, -9, -1])
def test_truncated_real_file(models: dict[str, Path], tmp_path: Path, keep: int) -> None:
    data = models["base_a"].read_bytes()
    p = tmp_path / "cut.rknn"
    p.write_bytes(data[:keep])
    _assert_format_error(p)


@pytest.mark.slow
def test_trailing_bytes_are_rejected(models: dict[str, Path], tmp_path: Path) -> None:
    p = tmp_path / "tail.rknn"
    p.write_bytes(models["base_a"].read_bytes() + b"\0junk")
    assert "after the metadata JSON" in str(_assert_format_error(p))


@pytest.fixture(scope="session")
def real_bytes(models: dict[str, Path]) -> bytes:
    return models["base_a"].read_bytes()


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_files_parse_or_fail_cleanly(real_bytes: bytes, tmp_path_factory: pytest.TempPathFactory,
                                               data: st.DataObject) -> None:
    """Any byte flips in header or model payload give a result or RknnFormatError, nothing else."""
    buf = bytearray(real_bytes)
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(buf) - 1), st.integers(1, 255)), min_size=1, max_size=8))
    hot = data.draw(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 255)), max_size=4))  # header + root
    # tables, vtables and offsets sit in the first ~8 KB of the payload; weights and commands after
    struct_ = data.draw(st.lists(st.tuples(st.integers(64, 64 + 8192), st.integers(1, 255)), max_size=6))
    for pos, x in flips + [(64 + p, x) for p, x in hot] + struct_:
        buf[pos] ^= x
    p = tmp_path_factory.mktemp("fuzz") / "f.rknn"
    p.write_bytes(bytes(buf))
    try:
        read_rknn(p)
        content_fingerprint(p)
    except RknnFormatError as err:
        assert str(p) in str(err) and "\n" not in str(err)


def test_module_imports_only_stdlib_numpy_and_rkdet() -> None:
    import ast

    src = Path(__file__).resolve().parents[2] / "rkdet" / "convert" / "rknn_file.py"
    tops = set()
    for node in ast.walk(ast.parse(src.read_text())):
        if isinstance(node, ast.Import):
            tops.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            tops.add(node.module.split(".")[0])
    assert tops - set(sys.stdlib_module_names) <= {"numpy", "rkdet"}, tops
