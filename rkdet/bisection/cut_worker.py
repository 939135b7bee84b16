"""Build one cut model with the FULL build's quantization parameters, in a hermetic subprocess.

A standalone script (numpy, yaml and rknn only), run like convert's toolkit2_worker.py: it imports the
toolkit, waits for `go` on stdin, reads job.json in its folder, writes result.json.

How the parameters stay those of the full build (rknn-toolkit2 2.5.0, measured; docs/LAYERS.md):
1. the full prepared ONNX with the build's config() options and calibration set goes through
   `hybrid_quantization_step1` (the quantizer `build()` runs), whose `<stem>.quantization.cfg` lists every
   tensor's parameters (dtype, min/max, scale, zero point); done once per build, kept beside the cuts;
2. the cut model (`load_onnx(model, outputs=[cut tensors])`) goes through step 1 too; every tensor it
   shares with the full model (same name and dtype) gets the full model's entry, and result.json lists the
   entries that differed ("changed") and the cut's own ones ("own": the int8 copy behind a cut output);
3. `hybrid_quantization_step2` builds the cut model from the patched file; it is exported and the
   simulator runs the golden inputs on it (the reference for a board that runs INT8 as the NPU does).
"""

from __future__ import annotations

import json
import shutil
import sys
import traceback
from pathlib import Path

def _fail(stage: str, message: str, code: int = 4) -> int:
    Path("result.json").write_text(json.dumps({"ok": False, "stage": stage, "error": message}))
    return code


def _step1(job: dict, outputs, workdir: Path) -> Path:
    """hybrid_quantization_step1 of the (cut) model in `workdir`; returns its quantization.cfg."""
    import os

    from rknn.api import RKNN

    workdir.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    onnx = str(Path(here) / job["onnx"])
    dataset = str(Path(here) / job["dataset"])
    rknn = RKNN(verbose=False)
    os.chdir(workdir)
    try:
        if rknn.config(**job["config"]) not in (0, None):
            raise RuntimeError("rknn.config failed")
        if rknn.load_onnx(model=onnx, outputs=outputs) != 0:
            raise RuntimeError(f"rknn.load_onnx(outputs={outputs}) failed (see the log)")
        if rknn.hybrid_quantization_step1(dataset=dataset, rknn_batch_size=job["build"].get("rknn_batch_size")) != 0:
            raise RuntimeError("rknn.hybrid_quantization_step1 failed (see the log)")
    finally:
        rknn.release()
        os.chdir(here)
    stem = Path(job["onnx"]).stem
    return workdir / f"{stem}.quantization.cfg"


def patch_params(cut: dict, full: dict) -> dict:
    """Give every tensor of the cut model that the full model also has (same name, same dtype) the full
    model's parameters; return what was compared. The int8 copy `<t>_int8` the toolkit adds behind a cut
    output keeps its own parameters (step 2 refuses to change them): where the full model fuses the cut
    tensor away (a Conv output before its Relu), that tensor never exists in INT8 in the full build."""
    changed, own, own_params = [], [], {}
    for name, entry in cut.items():
        source = full.get(name)
        if source is None or source.get("dtype") != entry.get("dtype"):
            if entry.get("dtype") not in ("float32", "float16"):
                own.append(name)
                own_params[name] = {k: entry[k] for k in ("dtype", "qmethod", "qtype", "scale", "zero_point")
                                    if k in entry}  # the INT8 emulation of the cut rounds its outputs so
            continue
        if source != entry:
            changed.append(name)
            cut[name] = dict(source)
    return {"tensors": len(cut), "changed": changed, "own": own, "own_params": own_params}


def run_job(job: dict) -> int:
    import numpy as np
    import yaml
    from rknn.api import RKNN

    stage = "full model parameters (hybrid_quantization_step1)"
    try:
        full_cfg = Path(job["full_cfg"])
        if not full_cfg.is_file():
            made = _step1(job, None, Path("full"))
            shutil.copyfile(made, full_cfg)
        full = yaml.safe_load(full_cfg.read_text())["quantize_parameters"]
        stage = "cut model parameters (hybrid_quantization_step1)"
        cut_cfg = _step1(job, list(job["outputs"]), Path("cut"))
        doc = yaml.safe_load(cut_cfg.read_text())
        quant = patch_params(doc["quantize_parameters"], full)
        cut_cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
        stage = "hybrid_quantization_step2"
        rknn = RKNN(verbose=False)
        try:
            if rknn.config(**job["config"]) not in (0, None):
                return _fail(stage, "rknn.config failed")
            stem = cut_cfg.name[: -len(".quantization.cfg")]
            if rknn.hybrid_quantization_step2(str(cut_cfg.parent / f"{stem}.model"), str(cut_cfg.parent / f"{stem}.data"),
                                              str(cut_cfg)) != 0:
                return _fail(stage, "rknn.hybrid_quantization_step2 failed (see the log)")
            stage = "export_rknn"
            if rknn.export_rknn(job["export"]) != 0:
                return _fail(stage, "rknn.export_rknn failed")
            stage = "init_runtime (simulator)"
            if rknn.init_runtime() != 0:
                return _fail(stage, "rknn.init_runtime failed")
            stage = "inference (simulator)"
            out_dir = Path(job["golden_out"])
            out_dir.mkdir(parents=True, exist_ok=True)
            outputs = {}
            for name, rel in job["golden"]:
                result = rknn.inference(inputs=[np.load(rel, allow_pickle=False)], data_format=["nhwc"])
                if result is None:
                    return _fail(stage, f"simulator returned no outputs for golden input {name}")
                files = []
                for index, array in enumerate(result):
                    target = out_dir / f"{name}.{index}.npy"
                    np.save(target, np.ascontiguousarray(array), allow_pickle=False)
                    files.append(str(target))
                outputs[name] = files
        finally:
            rknn.release()
        Path("result.json").write_text(json.dumps({"ok": True, "quant": quant, "simulator_outputs": outputs}))
        return 0
    except Exception as exc:  # the toolkit raises bare exceptions with its own traceback text
        traceback.print_exc()
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [exc.__class__.__name__]
        return _fail(stage, f"{exc.__class__.__name__}: {lines[-1][:400]}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: cut_worker.py job.json  (then 'go' on stdin once job.json is complete)", file=sys.stderr)
        return 2
    import numpy  # noqa: F401  the heavy imports happen while the host still prepares the job
    from rknn.api import RKNN  # noqa: F401

    if sys.stdin.readline().strip() != "go":
        print("the host did not start the job (stdin closed)", file=sys.stderr)
        return 2
    try:
        job = json.loads(Path(argv[1]).read_text())
    except (OSError, ValueError) as exc:
        print(f"bad job file {argv[1]}: {exc}", file=sys.stderr)
        return 2
    return run_job(job)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
