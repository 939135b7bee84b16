"""The rknn-toolkit2 build, run alone in a hermetic subprocess (see hermetic.py).

Why a separate process: the toolkit leaks heap pointers and uninitialised buffer tails into the `.rknn`
(docs/RKNN_FORMAT.md), so byte identity needs a fixed environment, cwd and no ASLR; and its simulator
can only run a model built in the same process, so the golden simulator outputs are made here too.

Protocol: `python toolkit2_worker.py job.json` in the job's folder (a standalone script: imports only
numpy and rknn); it imports the toolkit at once, then waits for `go` on stdin, sent when job.json is
complete (so the slow import overlaps the host's preparation). All paths in the job are relative to
the folder. Writes `result.json` ({"ok": true, ...} or {"ok": false, "stage": ..., "error": ...}).
Exit 0 on success, 4 on a toolkit failure, 2 on a bad job or no "go".

A job with `float_layers` builds by hybrid quantization instead of `build()` (see `_hybrid_build`).

`rkdet layers` runs the same worker (the same build, so the same fingerprint) with an "analyse" list
in the job: after the golden simulator outputs, the toolkit's `accuracy_analysis` runs once per
analysed input into `analysis/<name>/` (the `max_inputs` whose simulator outputs stray furthest from
the FP32 "reference" first), and result.json adds "analysis", "ranking" and "timings".
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path


def _fail(stage: str, message: str, code: int = 4) -> int:
    Path("result.json").write_text(json.dumps({"ok": False, "stage": stage, "error": message}))
    return code


def _last_error_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    informative = [ln for ln in lines if not ln.startswith(("Traceback", "File "))]
    return (informative or lines or [exc.__class__.__name__])[-1][:400]


def _environment() -> dict:
    """This interpreter's Python and library versions (the manifest records them; never fingerprinted)."""
    import importlib.metadata as metadata
    import platform

    versions = {}
    for dist in ("rknn-toolkit2", "torch", "numpy", "onnx", "onnxruntime", "protobuf"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {"python": platform.python_version(), "libraries": versions}


def _cosine(a, b) -> float:
    import numpy as np

    a64, b64 = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    na, nb = float(np.linalg.norm(a64)), float(np.linalg.norm(b64))
    return 1.0 if na == nb == 0 else 0.0 if na == 0 or nb == 0 else float(a64 @ b64 / (na * nb))


def _pick(job: dict, outputs: dict) -> tuple:
    """The inputs to analyse: with FP32 references ("reference": {name: [files]}), the `max_inputs`
    whose simulator outputs stray furthest (lowest cosine over the outputs) first; else in job order."""
    import numpy as np

    analyse = [list(x) for x in job["analyse"]]
    refs = job.get("reference") or {}
    ranking = []
    if refs:
        for name, _ in analyse:
            sims = outputs.get(name, [])
            cos = [_cosine(np.load(r, allow_pickle=False), np.load(s, allow_pickle=False))
                   for r, s in zip(refs.get(name, []), sims)]
            ranking.append([name, min(cos) if cos else 1.0])
        order = {name: i for i, (name, _) in enumerate(sorted(ranking, key=lambda x: (x[1], x[0])))}
        analyse.sort(key=lambda x: order[x[0]])
    limit = job.get("max_inputs") or len(analyse)
    return analyse[:limit], ranking


def _hybrid_build(rknn, rknn_class, job: dict) -> tuple:
    """rknn-toolkit2's hybrid quantization: step1 quantizes as build() would and writes
    `<model>.model`, `<model>.data` and `<model>.quantization.cfg` (every layer's quantization, keyed by
    the tensor it outputs: the names `rkdet layers` prints); the named layers go into its
    `custom_quantize_layers` as float16; step2 (a fresh RKNN object, as the toolkit's example does) builds
    from the three files. Returns (the RKNN object to go on with, None) or (None, exit code)."""
    import yaml  # the toolkit's own dependency

    stage = "hybrid_quantization_step1"
    ret = rknn.hybrid_quantization_step1(dataset=job["dataset"], rknn_batch_size=job["build"].get("rknn_batch_size"),
                                         proposal=False)
    if ret != 0:
        return rknn, _fail(stage, f"rknn.hybrid_quantization_step1 returned {ret} (see toolkit.log)")
    stem = Path(job["onnx"]).stem
    cfg_path = Path(f"{stem}.quantization.cfg")
    text = cfg_path.read_text()
    known = list((yaml.safe_load(text) or {}).get("quantize_parameters") or {})
    unknown = [name for name in job["float_layers"] if name not in known]
    if unknown:
        return rknn, _fail(stage, f"quantize.float_layers names no layer of this build: {', '.join(map(repr, unknown))} "
                                  f"(layers: {', '.join(known[:40])}{' ...' if len(known) > 40 else ''})", 2)
    if set(known) <= set(job["float_layers"]):
        return rknn, _fail(stage, "quantize.float_layers names every layer: that is a whole-float build, which "
                                  "quantize.force_fp16: false forbids (set force_fp16: true to build float16)", 2)
    head = "custom_quantize_layers: {}\n"
    if not text.startswith(head):
        return rknn, _fail(stage, f"{cfg_path}: unexpected format (rknn-toolkit2 2.5.0 starts it with {head.strip()!r})")
    layers = "".join(f"    {json.dumps(name)}: float16\n" for name in job["float_layers"])
    cfg_path.write_text("custom_quantize_layers:\n" + layers + text[len(head):])
    rknn.release()
    rknn = rknn_class(verbose=False)
    stage = "hybrid_quantization_step2"
    ret = rknn.hybrid_quantization_step2(model_input=f"{stem}.model", data_input=f"{stem}.data",
                                         model_quantization_cfg=str(cfg_path))
    if ret != 0:
        return rknn, _fail(stage, f"rknn.hybrid_quantization_step2 returned {ret} (see toolkit.log)")
    return rknn, None


QUANTIZATION_FILE = "quantization.json"


def _write_quantization(rknn, job: dict) -> str | None:
    """The quantization the toolkit chose, as JSON: {tensor: {dtype, qmethod, qtype, scale, zero_point, min,
    max, ...}}, per tensor the ONNX names (activations, `<input>_int8`, `<output>_int8`, biases per channel).
    rknn-toolkit2 2.5.0 keeps it in the quantizer's table after build() (the table hybrid step 1 saves as
    `.quantization.cfg`); a hybrid build's float16 layers come from its cfg. None when neither exists
    (a float build, another toolkit version): the build then has no INT8 emulation."""
    if not job.get("do_quantization"):
        return None
    table = {}
    try:
        table = dict(rknn.rknn_base.quantizer.quant_tab or {})
    except AttributeError:
        table = {}
    stem = Path(job["onnx"]).stem
    cfg = Path(f"{stem}.quantization.cfg")
    if cfg.is_file():  # hybrid quantization: step 1's table, the layers made float16 marked so
        import yaml

        doc = yaml.safe_load(cfg.read_text()) or {}
        for name, entry in (doc.get("quantize_parameters") or {}).items():
            table.setdefault(name, entry)
        for name in (doc.get("custom_quantize_layers") or {}):
            if name in table:
                table[name] = {**table[name], "dtype": "float16"}
    if not table:
        return None
    keys = ("dtype", "qmethod", "qtype", "scale", "zero_point", "min", "max", "shape", "qmode", "qmode_dtype")
    clean = {str(name): {k: entry[k] for k in keys if k in entry} for name, entry in table.items() if isinstance(entry, dict)}
    Path(QUANTIZATION_FILE).write_text(json.dumps(clean, sort_keys=True, default=float))
    return QUANTIZATION_FILE


# config() options newer than some toolkits (2.3.2 lacks them), with rknn-toolkit2 2.5.0's defaults
# (inspect.signature(RKNN.config) of 2.5.0). A toolkit without the option is given the job without it
# only when the job asks for exactly that default (recorded in result.json "options_absent").
NEWER_CONFIG_DEFAULTS = {"mini_rknn": False, "memory_plan_strategy": "BestFit", "compute_order": "WidthFirst",
                         "compiler_control_file": None}


def _version() -> str:
    from importlib import metadata

    return metadata.version("rknn-toolkit2")


def _config_for(config_fn, options: dict) -> tuple:
    """(kwargs this toolkit's config() takes, the options left out, the first one that cannot be left out)."""
    import inspect

    known = set(inspect.signature(config_fn).parameters)
    kept = {k: v for k, v in options.items() if k in known}
    dropped = sorted(k for k in options if k not in known)
    refused = next((k for k in dropped if k not in NEWER_CONFIG_DEFAULTS or options[k] != NEWER_CONFIG_DEFAULTS[k]), None)
    return kept, dropped, refused


def run_job(job: dict) -> int:
    import time

    import numpy as np
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    timings: dict = {}
    started = time.monotonic()
    try:
        stage = "config"
        config, dropped, refused = _config_for(RKNN.config, job["config"])
        if refused:
            return _fail(stage, f"rknn-toolkit2 {_version()} has no config option {refused}, and the job sets it to a "
                                "value other than 2.5.0's default: remove it from the config, or build with toolkit 2.5.0",
                         code=2)
        ret = rknn.config(**config)
        if ret not in (0, None):
            return _fail(stage, f"rknn.config returned {ret}")
        stage = "load_onnx"
        ret = rknn.load_onnx(model=job["onnx"])
        if ret != 0:
            return _fail(stage, f"rknn.load_onnx returned {ret} (see toolkit.log)")
        if job.get("float_layers"):  # hybrid quantization: these layers float16, every other one quantized
            stage = "hybrid quantization"
            rknn, failed = _hybrid_build(rknn, RKNN, job)
            if failed is not None:
                return failed
        else:
            stage = "build"
            ret = rknn.build(do_quantization=job["do_quantization"], dataset=job.get("dataset"), **job["build"])
            if ret != 0:
                return _fail(stage, f"rknn.build returned {ret} (see toolkit.log)")
        try:  # what the INT8 emulation (convert/int8emu.py) follows; never a reason to fail the build
            quantization = _write_quantization(rknn, job)
        except Exception as exc:  # the toolkit's internals: a version without this table builds on without one
            print(f"rkdet: no quantization table for the INT8 emulation ({exc.__class__.__name__}: {exc})", file=sys.stderr)
            quantization = None
        stage = "export_rknn"
        ret = rknn.export_rknn(job["export"])
        if ret != 0:
            return _fail(stage, f"rknn.export_rknn returned {ret}")
        timings["build_s"] = time.monotonic() - started
        started = time.monotonic()
        outputs: dict[str, list[str]] = {}
        if job.get("golden"):
            stage = "init_runtime (simulator)"
            ret = rknn.init_runtime()
            if ret != 0:
                return _fail(stage, f"rknn.init_runtime returned {ret}")
            stage = "inference (simulator)"
            out_dir = Path(job["golden_out"])
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, rel in job["golden"]:
                tensor = np.load(rel, allow_pickle=False)
                result = rknn.inference(inputs=[tensor], data_format=["nhwc"])
                if result is None:
                    return _fail(stage, f"simulator returned no outputs for golden input {name}")
                files = []
                for index, array in enumerate(result):
                    target = out_dir / f"{name}.{index}.npy"
                    np.save(target, np.ascontiguousarray(array), allow_pickle=False)
                    files.append(str(target))
                outputs[name] = files
        result = {"ok": True, "rknn": job["export"], "simulator_outputs": outputs, "options_absent": dropped,
                  "quantization": quantization}
        if job.get("analyse"):  # rkdet layers: per-layer accuracy of this very build
            timings["golden_s"] = time.monotonic() - started
            started = time.monotonic()
            analyse, ranking = _pick(job, outputs)
            analysed = {}
            for name, rel in analyse:  # NCHW uint8: accuracy_analysis reads .npy files as nchw
                stage = f"accuracy_analysis ({name})"
                target = Path("analysis") / name
                if rknn.accuracy_analysis(inputs=[rel], output_dir=str(target)) != 0:
                    return _fail(stage, "rknn.accuracy_analysis returned an error (see toolkit.log)")
                analysed[name] = str(target)
            timings["analysis_s"] = time.monotonic() - started
            result.update(analysis=analysed, ranking=ranking, timings=timings)
        result["environment"] = _environment()  # after the build: it cannot change what was built
        Path("result.json").write_text(json.dumps(result))
        return 0
    except Exception as exc:  # the toolkit raises bare ValueError/IndexError with its own traceback text
        traceback.print_exc()
        return _fail(stage, f"{exc.__class__.__name__}: {_last_error_line(exc)}")
    finally:
        rknn.release()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: toolkit2_worker.py job.json  (then 'go' on stdin once job.json is complete)", file=sys.stderr)
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
