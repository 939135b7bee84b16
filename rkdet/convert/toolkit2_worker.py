"""The rknn-toolkit2 build, run alone in a hermetic subprocess (see hermetic.py).

Why a separate process: the toolkit leaks heap pointers and uninitialised buffer tails into the `.rknn`
(docs/RKNN_FORMAT.md), so byte identity needs a fixed environment, cwd and no ASLR; and its simulator
can only run a model built in the same process, so the golden simulator outputs are made here too.

Protocol: `python toolkit2_worker.py job.json` in the job's folder (a standalone script: imports only
numpy and rknn); it imports the toolkit at once, then waits for `go` on stdin, sent when job.json is
complete (so the slow import overlaps the host's preparation). All paths in the job are relative to
the folder. Writes `result.json` ({"ok": true, ...} or {"ok": false, "stage": ..., "error": ...}).
Exit 0 on success, 4 on a toolkit failure, 2 on a bad job or no "go".
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


def run_job(job: dict) -> int:
    import numpy as np
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    try:
        stage = "config"
        ret = rknn.config(**job["config"])
        if ret not in (0, None):
            return _fail(stage, f"rknn.config returned {ret}")
        stage = "load_onnx"
        ret = rknn.load_onnx(model=job["onnx"])
        if ret != 0:
            return _fail(stage, f"rknn.load_onnx returned {ret} (see toolkit.log)")
        stage = "build"
        ret = rknn.build(do_quantization=job["do_quantization"], dataset=job.get("dataset"), **job["build"])
        if ret != 0:
            return _fail(stage, f"rknn.build returned {ret} (see toolkit.log)")
        stage = "export_rknn"
        ret = rknn.export_rknn(job["export"])
        if ret != 0:
            return _fail(stage, f"rknn.export_rknn returned {ret}")
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
        Path("result.json").write_text(json.dumps({"ok": True, "rknn": job["export"], "simulator_outputs": outputs}))
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
