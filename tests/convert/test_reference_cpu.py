"""The onnx-fp32 reference on another x86-64 CPU, without a second machine: `qemu-x86_64 -cpu MODEL` (qemu-user,
installed by .ci/setup; TCG shows the guest the model's CPUID, so onnxruntime picks that model's kernels).

What docs/FORMATS.md ("CPU class") claims, asserted for the tiny model: a CPU of the host's class (Haswell:
AVX2 + FMA3; this host may have AVX-512 too) makes the very bits the host makes; a CPU without FMA (Nehalem)
is another class, whose reference differs in the last bits and is compared numerically.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_models import conv_model

from rkdet.onboard.reference import cpu_class

REPO = Path(__file__).resolve().parents[2]
CHILD = r"""
import json, sys
import numpy as np
import onnxruntime
from rkdet.convert.golden import onnxruntime_reference
from rkdet.onboard.hashing import output_hash
from rkdet.onboard.reference import cpu_class
folder = sys.argv[1]
inputs = dict(np.load(folder + "/inputs.npz"))
outs, detail = onnxruntime_reference(open(folder + "/tiny.onnx", "rb").read(), inputs, "x", (0, 0, 0), (255, 255, 255))
np.savez(sys.argv[2], **{k: v["y"] for k, v in outs.items()})
print(json.dumps({"cpu": cpu_class(), "detail": detail, "hashes": {k: output_hash(v["y"]) for k, v in outs.items()}}))
"""


def _reference(folder: Path, qemu_cpu: str | None) -> tuple[dict, dict[str, np.ndarray]]:
    """The golden onnx-fp32 reference of the tiny model, computed natively or under qemu -cpu `qemu_cpu`."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-c", CHILD, str(folder), str(folder / f"{qemu_cpu or 'native'}.npz")]
    if qemu_cpu:
        qemu = shutil.which("qemu-x86_64")
        if qemu is None:
            pytest.fail("qemu-x86_64 not found: install Debian's qemu-user (bash .ci/setup does)")
        argv = [qemu, "-cpu", qemu_cpu, *argv]
        if qemu_cpu == "Nehalem":  # a forced OPENBLAS_CORETYPE (this CI sets Haswell) is an AVX kernel: SIGILL
            env.pop("OPENBLAS_CORETYPE", None)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with np.load(folder / f"{qemu_cpu or 'native'}.npz") as arrays:
        return json.loads(done.stdout.strip().splitlines()[-1]), dict(arrays)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        pytest.fail("this test runs x86-64 CPU models under qemu-x86_64: an x86-64 Linux host")
    root = tmp_path_factory.mktemp("xcpu")
    conv_model(root / "tiny.onnx")
    rng = np.random.default_rng(29)
    np.savez(root / "inputs.npz", **{f"in{i}": rng.integers(0, 256, (1, 32, 32, 3), dtype=np.uint8) for i in range(3)})
    return root


def test_a_cpu_of_the_hosts_class_makes_the_same_bits(folder: Path) -> None:
    native, _ = _reference(folder, None)
    haswell, arrays = _reference(folder, "Haswell")
    assert haswell["cpu"]["class"] == "x86-64 FMA3 (AVX2 or AVX-512)" and "AVX512F" not in haswell["cpu"]["features"]
    assert native["cpu"] == cpu_class() and native["cpu"]["class"] in native["detail"]
    assert "graph optimization extended" in native["detail"]
    if native["cpu"]["class"] == haswell["cpu"]["class"]:  # an AVX2 or AVX-512 host: the documented claim
        assert haswell["hashes"] == native["hashes"]
    else:  # a host of another class (no FMA): only a numerical comparison holds
        _, ours = _reference(folder, None)
        assert all(np.allclose(arrays[k], ours[k], rtol=1e-5, atol=1e-6) for k in ours)


def test_a_cpu_without_fma_is_another_class_compared_numerically(folder: Path) -> None:
    native, ours = _reference(folder, None)
    nehalem, theirs = _reference(folder, "Nehalem")
    assert nehalem["cpu"]["class"] == "x86-64 SSE" and "FMA3" not in nehalem["cpu"]["features"]
    assert nehalem["cpu"]["class"] in nehalem["detail"] and nehalem["detail"] != native["detail"]
    assert all(nehalem["hashes"][k] != native["hashes"][k] for k in native["hashes"])  # the last bits differ
    for k in ours:  # ... and only those: the same reference, numerically
        assert theirs[k].shape == ours[k].shape and np.allclose(theirs[k], ours[k], rtol=1e-5, atol=1e-6)
        assert 0 < float(np.max(np.abs(theirs[k] - ours[k]))) < 1e-5


NEHALEM_GOLDEN = r"""
import hashlib, json, shutil, sys
from pathlib import Path
import numpy as np
from rkdet.convert.golden import onnxruntime_reference, write_result_set
from rkdet.onboard.reference import cpu_class
build, mean, std = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
doc = json.loads((build / "manifest.json").read_text())
prepared = doc["inputs"]["onnx_prepared"]
onnx = (build / "model.onnx").read_bytes()
files = sorted((build / "golden" / "inputs").glob("*.npy"))
inputs = {p.name[:-4]: (p.name, hashlib.sha256(p.read_bytes()).hexdigest(), np.load(p)) for p in files}
outs, detail = onnxruntime_reference(onnx, {k: v[2] for k, v in inputs.items()}, prepared["input"], mean, std)
shutil.rmtree(build / "golden" / "onnx-fp32")
hashes = write_result_set(build / "golden" / "onnx-fp32", backend="onnxruntime", backend_detail=detail,
                          model_path="model.onnx", model_sha256=hashlib.sha256(onnx).hexdigest(), inputs=inputs,
                          outputs=outs, output_names=tuple(o["name"] for o in prepared["outputs"]))
print(json.dumps({"hashes": hashes, "cpu": cpu_class()}))
"""


@pytest.mark.slow
def test_check_against_compares_a_reference_made_on_another_cpu_class_numerically(tiny_build, tmp_path: Path) -> None:
    """A colleague's build whose onnx-fp32 reference was made on a CPU without FMA (its golden set computed
    under qemu -cpu Nehalem, its manifest saying so, as rkdet convert on that CPU writes them): the same
    model, and one line saying the references differ in the last bits because of the CPU class."""
    from convert_helpers import run_rkdet

    from rkdet.config import load_config
    cfg_path, summary = tiny_build
    build = shutil.copytree(summary["folder"], tmp_path / "theirs")
    cfg = load_config(cfg_path)
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.fail("qemu-x86_64 not found: install Debian's qemu-user (bash .ci/setup does)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("OPENBLAS_CORETYPE", None)
    done = subprocess.run([qemu, "-cpu", "Nehalem", sys.executable, "-c", NEHALEM_GOLDEN, str(build),
                           json.dumps(list(cfg.preprocess.mean)), json.dumps(list(cfg.preprocess.std))],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    made = json.loads(done.stdout.strip().splitlines()[-1])
    doc = json.loads((build / "manifest.json").read_text())
    assert made["hashes"] != doc["golden_outputs"]["onnx-fp32"]  # another class: other bits
    doc["golden_outputs"]["onnx-fp32"], doc["environment"]["cpu"] = made["hashes"], made["cpu"]
    (build / "manifest.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    proc = run_rkdet("convert", "--config", str(cfg_path), "--check-against", str(build))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.startswith(f"same model: {build} (rk3588)")
    total = sum(len(v) for v in made["hashes"].values())
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("onnx-fp32 reference:"))
    assert f"{total} of {total} outputs differ" in line and "as expected" in line
    assert f"CPU class 'x86-64 SSE' (BUILD) vs '{cpu_class()['class']}' (here)" in line
    worst = float(line.rsplit("max abs difference ", 1)[1])
    assert 0 < worst < 1e-5  # the same reference, numerically
    assert f"CPU class x86-64 SSE vs {cpu_class()['class']}" in proc.stdout  # the environment line names it too
