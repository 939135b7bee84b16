"""rkdet-run-c for real: cross-compiled for aarch64 against rkdet's test ABI header, run under qemu-user
against the test double of librknnrt (numbers from the emulator's computation), its result set read by
`rkdet diff` unchanged and compared with rkdet-run's on the same inputs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from rkdet.backends.capi_build import build_key, build_runner
from rkdet.emulator.capi_runtime import DOUBLE_ENV, Tensor, build_double, fnv1a64, qemu_command, serve
from rkdet.onboard.hashing import output_hash
from rkdet.onboard.resultset import INDEX_FSYNC_S, read_index

ROOT = Path(__file__).resolve().parents[2]
ARCH = "aarch64"
FP = "ab" * 32


def _model(path: Path) -> Path:
    """A tiny two-output ONNX model: a 1x1 conv (3 -> 2 channels) and its ReLU."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 3, 1, 1], [0.5, -1.0, 0.25, 1.5, 0.75, -0.5])
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["conv"]), helper.make_node("Relu", ["conv"], ["relu"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("conv", TensorProto.FLOAT, [1, 2, 4, 4]),
         helper.make_tensor_value_info("relu", TensorProto.FLOAT, [1, 2, 4, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("capi")
    sdk = build_double(ARCH, tmp / "sdk")
    runner = build_runner(sdk, ARCH, tmp / "cache")
    model = _model(tmp / "model.onnx")
    inputs = tmp / "inputs"
    inputs.mkdir()
    rng = np.random.default_rng(7)
    samples = {f"s{i}": rng.standard_normal((1, 3, 4, 4)).astype(np.float32) for i in range(2)}
    for name, arr in samples.items():
        np.save(inputs / f"{name}.npy", arr)
    from rkdet.onboard.reference import session_options  # the reference's session, as rkdet-run computes

    session = ort.InferenceSession(str(model), session_options(ort), providers=["CPUExecutionProvider"])
    computed = {a.tobytes(): session.run(None, {"x": a}) for a in samples.values()}
    return {"tmp": tmp, "sdk": sdk, "runner": runner, "model": model, "inputs": inputs, "samples": samples,
            "computed": computed}


def _run_c(world, out: Path, serve_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {DOUBLE_ENV: str(serve_dir), "LD_LIBRARY_PATH": str(world["sdk"] / "lib")}
    args = ["--model", str(world["model"]), "--inputs", str(world["inputs"]), "--repeats", "3", "--warmup", "1",
            "--out", str(out), *extra]
    return subprocess.run(qemu_command(ARCH, world["runner"].path, args, env), capture_output=True, text=True,
                          timeout=300, check=False)


FLOAT_OUTS = (Tensor("conv", "float32", (1, 2, 4, 4)), Tensor("relu", "float32", (1, 2, 4, 4)))
X = Tensor("x", "float32", (1, 3, 4, 4))


def test_result_set_matches_rkdet_run_and_diff_reads_it(world):
    served = serve(world["tmp"] / "serve-float", X, FLOAT_OUTS, world["computed"], custom=f"build rkdet-fp={FP}")
    c_out = world["tmp"] / "c-run"
    done = _run_c(world, c_out, served, "--expect-fingerprint", FP)
    assert done.returncode == 0, done.stderr
    py_out = world["tmp"] / "py-run"
    py = subprocess.run([sys.executable, "-m", "rkdet.onboard", "run", "--model", str(world["model"]), "--inputs",
                         str(world["inputs"]), "--repeats", "3", "--backend", "onnxruntime", "--out", str(py_out)],
                        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert py.returncode == 0, py.stderr
    c_index, py_index = read_index(str(c_out)), read_index(str(py_out))
    assert len(c_index) == 6 and [r["run"] for r in c_index] == [0, 0, 1, 1, 2, 2]
    assert [(r["input"], [(o["name"], o["hash"], o["shape"], o["dtype"]) for o in r["outputs"]]) for r in c_index] == \
           [(r["input"], [(o["name"], o["hash"], o["shape"], o["dtype"]) for o in r["outputs"]]) for r in py_index]
    for digest in {o["hash"] for r in c_index for o in r["outputs"]}:  # content-addressed, numpy-readable
        assert output_hash(np.load(c_out / "outputs" / f"{digest}.npy")) == digest
    run = json.loads((c_out / "run.json").read_text())
    assert run["status"] == "complete" and run["backend"] == "rknn_c" and run["emulated"] is True
    assert run["backend_options"] == {"core_mask": "auto", "input_fmt": "nchw", "input_type": "float32",
                                      "pass_through": 0, "want_float": 1}
    assert run["stack"]["runtime_api_version"] == "2.5.0 (rkdet-test-double)"
    assert run["model_check"] == {"by": "embedded-fingerprint", "expected": FP, "found": FP}
    assert run["inputs"] == json.loads((py_out / "run.json").read_text())["inputs"]
    # one durability policy for both runners, recorded alike (docs/FORMATS.md "Durability of index.jsonl")
    assert run["index_fsync_s"] == json.loads((py_out / "run.json").read_text())["index_fsync_s"] == INDEX_FSYNC_S
    summary = json.loads((c_out / "summary.json").read_text())
    assert summary["deterministic"] is True and summary["runs"] == 3
    diff = subprocess.run([str(Path(sys.executable).parent / "rkdet"), "diff", str(c_out), str(py_out)],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert diff.returncode == 0, diff.stdout + diff.stderr


def test_want_float_dequantises_with_scale_and_zero_point(world):
    outs = (Tensor("q", "int8", (1, 8), zero_point=5, scale=0.25),)
    q = np.arange(-4, 4, dtype=np.int8).reshape(1, 8)
    served = serve(world["tmp"] / "serve-int8", X, outs, {a.tobytes(): [q] for a in world["samples"].values()})
    for want_float, expected in (("0", q), ("1", ((q.astype(np.float32) - 5) * np.float32(0.25)).astype(np.float32))):
        out = world["tmp"] / f"c-int8-{want_float}"
        done = _run_c(world, out, served, "--want-float", want_float)
        assert done.returncode == 0, done.stderr
        record = read_index(str(out))[0]["outputs"][0]
        assert record["hash"] == output_hash(expected) and record["dtype"] == expected.dtype.name
        assert json.loads((out / "run.json").read_text())["backend_options"]["want_float"] == int(want_float)
    # airockchip/rknn-toolkit2#445: lite2 dequantises by itself, a C app that keeps want_float=0 does not;
    # rkdet diff reads both C result sets and names the output where they part
    diff = subprocess.run([str(Path(sys.executable).parent / "rkdet"), "diff", str(world["tmp"] / "c-int8-0"),
                           str(world["tmp"] / "c-int8-1")], capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert diff.returncode == 1 and "output q" in diff.stdout, diff.stdout + diff.stderr


def test_nchw_input_is_transposed_to_an_nhwc_model(world):
    nhwc = Tensor("x", "float32", (1, 4, 4, 3), fmt="nhwc")
    computed = {np.ascontiguousarray(a.transpose(0, 2, 3, 1)).tobytes(): world["computed"][a.tobytes()]
                for a in world["samples"].values()}
    served = serve(world["tmp"] / "serve-nhwc", nhwc, FLOAT_OUTS, computed)
    out = world["tmp"] / "c-nhwc"
    done = _run_c(world, out, served, "--input-fmt", "nchw")
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "run.json").read_text())["backend_options"]["input_fmt"] == "nchw"
    # fed as the model's layout without saying so, the runtime reads the bytes as NHWC: no such input computed
    refused = _run_c(world, world["tmp"] / "c-nhwc-wrong", served)
    assert refused.returncode == 3 and "rknn_run failed" in refused.stderr


def test_core_mask_refused_on_a_single_core_soc(world):
    served = serve(world["tmp"] / "serve-1core", X, FLOAT_OUTS, world["computed"], cores=1)
    out = world["tmp"] / "c-mask"
    done = _run_c(world, out, served, "--core-mask", "1")
    assert done.returncode == 3 and "rknn_set_core_mask failed" in done.stderr
    assert _run_c(world, world["tmp"] / "c-mask0", served, "--core-mask", "0", "--cpu-affinity", "0").returncode == 0
    run = json.loads((world["tmp"] / "c-mask0" / "run.json").read_text())
    assert run["core_mask"] == "0" and run["affinity"] == [0]
    told = _run_c(world, world["tmp"] / "c-mask-told", served, "--core-mask", "0_1", "--npu-cores", "1")
    assert told.returncode == 2 and "1 NPU core" in told.stderr


def test_fingerprint_mismatch_is_refused_with_exit_5(world):
    served = serve(world["tmp"] / "serve-fp", X, FLOAT_OUTS, world["computed"], custom=f"rkdet-fp={FP}")
    done = _run_c(world, world["tmp"] / "c-fp", served, "--expect-fingerprint", "cd" * 32)
    assert done.returncode == 5 and "refused" in done.stderr
    assert not (world["tmp"] / "c-fp" / "index.jsonl").exists()


def test_a_runtime_of_another_header_refuses_the_structs(world, tmp_path):
    grown = build_double(ARCH, tmp_path / "grown-sdk", grown_abi=True)
    served = serve(tmp_path / "serve", X, FLOAT_OUTS, world["computed"])
    env = {DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(grown / "lib")}
    args = ["--model", str(world["model"]), "--inputs", str(world["inputs"]), "--repeats", "1", "--out", str(tmp_path / "o")]
    done = subprocess.run(qemu_command(ARCH, world["runner"].path, args, env), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 3 and "ret=-5" in done.stderr and "rknn_api.h" in done.stderr


def test_built_runner_is_cached_by_header_and_rebuilt_on_change(world, tmp_path):
    again = build_runner(world["sdk"], ARCH, world["tmp"] / "cache")
    assert again.path == world["runner"].path
    other = build_double(ARCH, tmp_path / "sdk2")
    header = other / "include" / "rknn_api.h"
    header.write_text(header.read_text() + "\n/* another SDK release */\n")
    assert build_key(header, ARCH)[0] != world["runner"].key
    rebuilt = build_runner(other, ARCH, world["tmp"] / "cache")
    assert rebuilt.key != world["runner"].key and rebuilt.path.is_file()


def test_no_sdk_is_one_line_saying_what_to_pass(tmp_path):
    from rkdet.errors import InputError
    with pytest.raises(InputError, match="pass --sdk DIR"):
        build_runner(tmp_path / "missing", ARCH, tmp_path / "cache")


def test_armhf_runner_writes_the_same_result_set(world, tmp_path):
    """RV1126-class boards are armhf: the same source, cross-compiled for them, records the same hashes
    (32-bit rknn_context, 32-bit pointers in rknn_input/rknn_output)."""
    sdk = build_double("armhf", tmp_path / "sdk-armhf")
    runner = build_runner(sdk, "armhf", tmp_path / "cache")
    assert runner.arch == "armhf" and runner.key != world["runner"].key  # keyed by the target too
    served = serve(tmp_path / "serve", X, FLOAT_OUTS, world["computed"])
    args = ["--model", str(world["model"]), "--inputs", str(world["inputs"]), "--repeats", "2", "--out", str(tmp_path / "o")]
    done = subprocess.run(qemu_command("armhf", runner.path, args, {DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(sdk / "lib")}),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    arm = read_index(str(tmp_path / "o"))
    direct = world["computed"][world["samples"]["s0"].tobytes()]
    assert [o["hash"] for o in arm[0]["outputs"]] == [output_hash(a) for a in direct]


def test_deploy_without_a_built_runner_is_one_line(tmp_path):
    from rkdet.backends.capi_build import built_runner
    from rkdet.errors import InputError
    with pytest.raises(InputError, match=r"rkdet runner build --sdk DIR --arch aarch64"):
        built_runner("aarch64", tmp_path / "empty-cache")


def test_cli_runner_build_reports_what_it_built(world, tmp_path):
    cli = Path(sys.executable).parent / "rkdet"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RKDET_RUNNER_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([str(cli), "runner", "build", "--sdk", str(world["sdk"])], capture_output=True, text=True,
                          timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert world["runner"].header_sha256[:16] in done.stdout
    from rkdet.backends.capi_build import built_runner
    assert built_runner("aarch64", tmp_path / "cache").header_sha256 == world["runner"].header_sha256
    missing = subprocess.run([str(cli), "runner", "build", "--sdk", str(tmp_path / "none")], capture_output=True,
                             text=True, timeout=300, check=False, env=env)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "pass --sdk DIR" in missing.stderr


def test_sigkill_leaves_every_completed_inference_readable(world, tmp_path):
    import signal
    import time

    served = serve(tmp_path / "serve", X, FLOAT_OUTS, world["computed"])
    out = tmp_path / "killed"
    env = {DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(world["sdk"] / "lib")}
    args = ["--model", str(world["model"]), "--inputs", str(world["inputs"]), "--repeats", "1000000", "--out", str(out)]
    proc = subprocess.Popen(qemu_command(ARCH, world["runner"].path, args, env), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(3000):  # until a few inferences are indexed (bounded: 3000 polls)
            if (out / "index.jsonl").is_file() and (out / "index.jsonl").read_bytes().count(b"\n") >= 5:
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    records = read_index(str(out))
    assert len(records) >= 5
    for record in records:
        for o in record["outputs"]:
            assert output_hash(np.load(out / "outputs" / f"{o['hash']}.npy")) == o["hash"]
    assert json.loads((out / "run.json").read_text())["status"] == "running"


def test_rknpu1_runner_for_rv1126(world, tmp_path):
    """RKNPU1 (RV1126/RV1109): an SDK with librknn_api.so gets the RKNPU1 build (4-argument rknn_init, no
    custom string: the identity check rests on the model's sha256; no core mask), armhf."""
    sdk = build_double("armhf", tmp_path / "sdk1", rknpu1=True)
    runner = build_runner(sdk, "armhf", tmp_path / "cache")
    assert runner.api == "rknpu1"
    served = serve(tmp_path / "serve", X, FLOAT_OUTS, world["computed"], cores=1, custom=f"rkdet-fp={FP}")
    env = {DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(sdk / "lib")}
    sha = hashlib.sha256(world["model"].read_bytes()).hexdigest()

    def run(out: str, *extra: str) -> subprocess.CompletedProcess:
        args = ["--model", str(world["model"]), "--inputs", str(world["inputs"]), "--repeats", "2",
                "--out", str(tmp_path / out), *extra]
        return subprocess.run(qemu_command("armhf", runner.path, args, env), capture_output=True, text=True,
                              timeout=300, check=False)

    done = run("o", "--expect-fingerprint", FP, "--expect-sha256", sha)
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "o" / "run.json").read_text())
    assert record["stack"]["custom_string"] is None and record["embedded_fingerprint"] is None
    assert record["model_check"]["by"] == "sha256" and record["model_check"]["found"] == sha
    assert [o["hash"] for o in read_index(str(tmp_path / "o"))[0]["outputs"]] == \
           [output_hash(a) for a in world["computed"][world["samples"]["s0"].tobytes()]]
    masked = run("m", "--core-mask", "0")
    assert masked.returncode == 2 and "no core mask" in masked.stderr
    assert run("x", "--expect-sha256", "0" * 64).returncode == 5


def test_a_crafted_npy_is_one_line_and_nothing_written(world, tmp_path):
    bad = tmp_path / "bad-inputs"
    bad.mkdir()
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 1, 48), }"
    header += b" " * (64 - (10 + len(header) + 1) % 64) + b"\n"
    (bad / "a.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 192)
    served = serve(tmp_path / "serve", X, FLOAT_OUTS, world["computed"])
    args = ["--model", str(world["model"]), "--inputs", str(bad), "--repeats", "1", "--out", str(tmp_path / "o")]
    done = subprocess.run(qemu_command(ARCH, world["runner"].path, args,
                                       {DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(world["sdk"] / "lib")}),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "a.npy" in done.stderr
    assert not (tmp_path / "o").exists()


def test_a_repeat_that_differs_is_hashed_again_not_reused(world, tmp_path):
    """rkdet-run-c reuses an output's hash only when a repeat equals the input's previous outputs byte for
    byte: a runtime that flips one bit on one call (the double's TEST CONTROL `flip K`) gives that run its own
    hash (its file holds the flipped array), the next run the first hash again, and exit 1 (diverged)."""
    served = serve(tmp_path / "serve", X, FLOAT_OUTS, world["computed"])
    (served / "model.txt").write_text((served / "model.txt").read_text() + "flip 3\n")  # s1's second run
    args = ["--model", str(world["model"]), "--inputs", str(world["inputs"]), "--repeats", "3", "--warmup", "0",
            "--out", str(tmp_path / "o")]
    done = subprocess.run(qemu_command(ARCH, world["runner"].path, args,
                                       {DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(world["sdk"] / "lib")}),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    s1 = [r["outputs"][0]["hash"] for r in read_index(str(tmp_path / "o")) if r["input"] == "s1"]
    s0 = {r["outputs"][0]["hash"] for r in read_index(str(tmp_path / "o")) if r["input"] == "s0"}
    assert len(s0) == 1 and s1[0] == s1[2] != s1[1]
    flipped = np.load(tmp_path / "o" / "outputs" / f"{s1[1]}.npy")
    assert output_hash(flipped) == s1[1]
    clean = world["computed"][world["samples"]["s1"].tobytes()][0]
    assert np.count_nonzero(flipped.view(np.uint8) != np.ascontiguousarray(clean).view(np.uint8)) == 1


def test_index_fsync_policy_is_rkdet_runs_and_a_recorded_setting(world, tmp_path):
    """The C runner's default durability policy is THE one (rkdet.onboard.resultset.INDEX_FSYNC_S), a
    chosen one is recorded in run.json, and a bad value is one line, exit 2, nothing written."""
    import re

    define = re.search(r"^#define INDEX_FSYNC_S ([0-9.]+)$", (ROOT / "rkdet/onboard/c/rkdet_run_c.c").read_text(), re.M)
    assert define and float(define.group(1)) == INDEX_FSYNC_S
    served = serve(tmp_path / "serve", X, FLOAT_OUTS, world["computed"])
    done = _run_c(world, tmp_path / "every", served, "--index-fsync-s", "0")
    assert done.returncode == 0, done.stderr
    run = json.loads((tmp_path / "every" / "run.json").read_text())
    assert run["index_fsync_s"] == 0.0 and isinstance(run["index_fsync_s"], float)
    assert len(read_index(str(tmp_path / "every"))) == 6
    done = _run_c(world, tmp_path / "half", served, "--index-fsync-s", "0.25")
    assert done.returncode == 0 and json.loads((tmp_path / "half" / "run.json").read_text())["index_fsync_s"] == 0.25
    bad = _run_c(world, tmp_path / "bad", served, "--index-fsync-s", "-1")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--index-fsync-s -1" in bad.stderr
    assert not (tmp_path / "bad").exists()


def test_sigterm_stops_as_rkdet_run_does_with_grouped_fsync(world, tmp_path):
    """SIGTERM mid-run with the index's fsync grouped far apart (--index-fsync-s 3600): exit 130, run.json
    "failed" with the reason, every line written so far readable (each was written as its inference
    completed; the stop path fsyncs them, as rkdet-run's close does)."""
    import signal
    import time

    served = serve(tmp_path / "serve", X, FLOAT_OUTS, world["computed"])
    out = tmp_path / "stopped"
    env = {DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(world["sdk"] / "lib")}
    args = ["--model", str(world["model"]), "--inputs", str(world["inputs"]), "--repeats", "1000000", "--out", str(out),
            "--index-fsync-s", "3600"]
    proc = subprocess.Popen(qemu_command(ARCH, world["runner"].path, args, env), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(3000):  # bounded: 3000 polls
            if (out / "index.jsonl").is_file() and (out / "index.jsonl").read_bytes().count(b"\n") >= 5:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    assert proc.returncode == 130 and "interrupted" in stderr, stderr
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["error"].startswith("interrupted") and run["index_fsync_s"] == 3600.0
    records = read_index(str(out))
    assert len(records) >= 5 and (out / "index.jsonl").read_bytes().endswith(b"\n")
    for record in records:
        for o in record["outputs"]:
            assert output_hash(np.load(out / "outputs" / f"{o['hash']}.npy")) == o["hash"]


def test_recorder_thread_records_every_repeat_as_the_runtime_served_it(world, tmp_path):
    """The recorder thread (compare/hash/write/index off the inference path, a ring of runner-owned output
    buffers): a runtime that serves different outputs on many calls (`flip K` on 9 of 26 calls, neighbours
    included, so consecutive ring slots hold different bytes) gives, line by line and in inference order,
    exactly the hashes, files and summary a single-threaded recorder gives: each line's first output is the
    flipped array exactly on its flipped calls, never a neighbouring slot's bytes."""
    flips = {3, 4, 7, 10, 11, 12, 17, 22, 23}  # calls 0-1 are the warmup; call = 2 + 2 * run + input
    served = serve(tmp_path / "serve", X, FLOAT_OUTS, world["computed"])
    (served / "model.txt").write_text((served / "model.txt").read_text() + "".join(f"flip {k}\n" for k in sorted(flips)))
    args = ["--model", str(world["model"]), "--inputs", str(world["inputs"]), "--repeats", "12", "--warmup", "1",
            "--out", str(tmp_path / "o")]
    done = subprocess.run(qemu_command(ARCH, world["runner"].path, args,
                                       {DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(world["sdk"] / "lib")}),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    index = read_index(str(tmp_path / "o"))
    assert [(r["run"], r["input"]) for r in index] == [(run, s) for run in range(12) for s in ("s0", "s1")]
    sets: dict[str, list[tuple[str, ...]]] = {"s0": [], "s1": []}
    for record in index:
        call = 2 + 2 * record["run"] + int(record["input"][1])
        clean = world["computed"][world["samples"][record["input"]].tobytes()]
        first = np.ascontiguousarray(clean[0]).copy()
        if call in flips:
            first.view(np.uint8).reshape(-1)[0] ^= 1
        expected = (output_hash(first), output_hash(clean[1]))
        assert tuple(o["hash"] for o in record["outputs"]) == expected, (record["run"], record["input"])
        for digest in expected:
            assert output_hash(np.load(tmp_path / "o" / "outputs" / f"{digest}.npy")) == digest
        sets[record["input"]].append(expected)
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    for name, seq in sets.items():
        first_div = next(run for run, got in enumerate(seq) if got != seq[0])
        assert summary["inputs"][name] == {"distinct": len(set(seq)), "runs": 12,
                                           "first_divergence": {"output": "conv", "run": first_div}}
    assert json.loads((tmp_path / "o" / "run.json").read_text())["status"] == "complete"


def test_a_runtime_that_ignores_is_prealloc_is_refused(world, tmp_path):
    """rkdet-run-c has the runtime write into its own ring buffers (rknn_output.is_prealloc); a runtime that
    hands back a buffer of its own instead (the double's TEST CONTROL `ignore_prealloc`) is one line naming
    is_prealloc, exit 3, run.json failed, no index line."""
    served = serve(tmp_path / "serve", X, FLOAT_OUTS, world["computed"])
    (served / "model.txt").write_text((served / "model.txt").read_text() + "ignore_prealloc\n")
    done = _run_c(world, tmp_path / "o", served)
    assert done.returncode == 3 and done.stderr.count("\n") == 1 and "is_prealloc" in done.stderr, done.stderr
    assert json.loads((tmp_path / "o" / "run.json").read_text())["status"] == "failed"
    assert read_index(str(tmp_path / "o")) == []


@pytest.mark.parametrize("arch,rknpu1", [("aarch64", False), ("armhf", True)], ids=["rknpu2", "rknpu1"])
def test_double_honours_is_prealloc_and_refuses_a_short_buffer(world, tmp_path, arch, rknpu1):
    """The double's rknn_outputs_get with is_prealloc (both APIs' rknn_output has it): the caller's buffer is
    the one written, with the bytes the library's own buffer gets; one byte too small is refused
    (RKNN_ERR_PARAM_INVALID, -5) with the buffer untouched. A small C caller, cross-compiled, under qemu-user."""
    from rkdet.emulator.capi_double.board_exec import TARGETS

    sdk = world["sdk"] if not rknpu1 else build_double(arch, tmp_path / "sdk1", rknpu1=True)
    probe = tmp_path / "probe"
    subprocess.run([TARGETS[arch][0], "-std=c99", "-O2", "-I", str(sdk / "include"), *(["-DRKDET_RKNPU1"] if rknpu1 else []),
                    "-o", str(probe), str(Path(__file__).parent / "c" / "prealloc_probe.c"), "-L", str(sdk / "lib"),
                    "-lrknn_api" if rknpu1 else "-lrknnrt"], check=True, timeout=300, capture_output=True)
    served = serve(tmp_path / "serve", X, FLOAT_OUTS[:1], world["computed"])
    x = tmp_path / "x.bin"
    x.write_bytes(world["samples"]["s0"].tobytes())
    done = subprocess.run(qemu_command(arch, probe, ["model", str(x)],
                                       {DOUBLE_ENV: str(served), "LD_LIBRARY_PATH": str(sdk / "lib")}),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["small=-5", "untouched=1", "exact=0", "same_buf=1", "same_bytes=1"]
