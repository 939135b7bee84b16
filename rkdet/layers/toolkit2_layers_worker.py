"""Rebuild a model with rknn-toolkit2 and run its per-layer accuracy analysis, in one hermetic process.

Why a rebuild: the toolkit's simulator (and so `accuracy_analysis`) only runs a model built in the same
process; a `.rknn` cannot be loaded back into it. So this worker repeats the build with the build's
recorded options (same job format as rkdet/convert/toolkit2_worker.py), exports it and runs the golden
inputs through the simulator, so the host can check that the rebuilt fingerprint equals the build's,
then runs `accuracy_analysis` once per analysed input into `analysis/<name>/`.

Protocol as toolkit2_worker.py: `python toolkit2_layers_worker.py job.json` in the job's folder (a
standalone script: numpy and rknn only); imports the toolkit, waits for `go` on stdin, writes
`result.json` ({"ok": true, ...} or {"ok": false, "stage": ..., "error": ...}). Exit 0 ok, 4 toolkit
failure, 2 bad job or no "go".
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


def _cosine(a, b) -> float:
    import numpy as np

    a64, b64 = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    na, nb = float(np.linalg.norm(a64)), float(np.linalg.norm(b64))
    return 1.0 if na == nb == 0 else 0.0 if na == 0 or nb == 0 else float(a64 @ b64 / (na * nb))


def _pick(job: dict, outputs: dict[str, list[str]]) -> tuple[list[list[str]], list[list]]:
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


def run_job(job: dict) -> int:
    import time

    import numpy as np
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    timings: dict[str, float] = {}
    try:
        started = time.monotonic()
        stage = "config"
        ret = rknn.config(**job["config"])
        if ret not in (0, None):
            return _fail(stage, f"rknn.config returned {ret}")
        stage = "load_onnx"
        if rknn.load_onnx(model=job["onnx"]) != 0:
            return _fail(stage, "rknn.load_onnx returned an error (see toolkit.log)")
        stage = "build"
        if rknn.build(do_quantization=job["do_quantization"], dataset=job.get("dataset"), **job["build"]) != 0:
            return _fail(stage, "rknn.build returned an error (see toolkit.log)")
        stage = "export_rknn"
        if rknn.export_rknn(job["export"]) != 0:
            return _fail(stage, "rknn.export_rknn returned an error")
        timings["build_s"] = time.monotonic() - started
        started = time.monotonic()
        stage = "init_runtime (simulator)"
        if rknn.init_runtime() != 0:
            return _fail(stage, "rknn.init_runtime returned an error")
        stage = "inference (simulator)"
        outputs: dict[str, list[str]] = {}
        out_dir = Path(job["golden_out"])
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, rel in job["golden"]:  # NHWC uint8, exactly as the build fed them
            result = rknn.inference(inputs=[np.load(rel, allow_pickle=False)], data_format=["nhwc"])
            if result is None:
                return _fail(stage, f"simulator returned no outputs for golden input {name}")
            files = []
            for index, array in enumerate(result):
                target = out_dir / f"{name}.{index}.npy"
                np.save(target, np.ascontiguousarray(array), allow_pickle=False)
                files.append(str(target))
            outputs[name] = files
        timings["golden_s"] = time.monotonic() - started
        started = time.monotonic()
        analyse, ranking = _pick(job, outputs)
        analysed: dict[str, str] = {}
        for name, rel in analyse:  # NCHW uint8: accuracy_analysis reads .npy files as nchw
            stage = f"accuracy_analysis ({name})"
            target = Path("analysis") / name
            if rknn.accuracy_analysis(inputs=[rel], output_dir=str(target)) != 0:
                return _fail(stage, "rknn.accuracy_analysis returned an error (see toolkit.log)")
            analysed[name] = str(target)
        timings["analysis_s"] = time.monotonic() - started
        Path("result.json").write_text(json.dumps({"ok": True, "rknn": job["export"], "simulator_outputs": outputs,
                                                   "analysis": analysed, "ranking": ranking,
                                                   "timings": timings}))
        return 0
    except Exception as exc:  # the toolkit raises bare ValueError/IndexError with its own traceback text
        traceback.print_exc()
        return _fail(stage, f"{exc.__class__.__name__}: {_last_error_line(exc)}")
    finally:
        rknn.release()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: toolkit2_layers_worker.py job.json  (then 'go' on stdin)", file=sys.stderr)
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
