"""The legacy RKNN-Toolkit 1.7.x build (RV1126/RV1109), run hermetically in that toolkit's own Python.

Standalone script, Python 3.6 syntax (the toolkit's interpreter), imports only the toolkit. Same job
protocol as toolkit2_worker.py; no golden simulator outputs (the 1.x simulator does not model RV1126).
Exit 0 on success, 4 on a toolkit failure, 2 on a bad job.
"""

import json
import sys
import traceback


def _write_result(payload):
    with open("result.json", "w") as fh:
        json.dump(payload, fh)


def run_job(job):
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    stage = "config"
    try:
        ret = rknn.config(**job["config"])
        if ret not in (0, None):
            _write_result({"ok": False, "stage": stage, "error": "rknn.config returned %r" % (ret,)})
            return 4
        stage = "load_onnx"
        ret = rknn.load_onnx(model=job["onnx"])
        if ret != 0:
            _write_result({"ok": False, "stage": stage, "error": "rknn.load_onnx returned %r" % (ret,)})
            return 4
        stage = "build"
        ret = rknn.build(do_quantization=job["do_quantization"], dataset=job.get("dataset"), **job["build"])
        if ret != 0:
            _write_result({"ok": False, "stage": stage, "error": "rknn.build returned %r" % (ret,)})
            return 4
        stage = "export_rknn"
        ret = rknn.export_rknn(job["export"])
        if ret != 0:
            _write_result({"ok": False, "stage": stage, "error": "rknn.export_rknn returned %r" % (ret,)})
            return 4
        _write_result({"ok": True, "rknn": job["export"], "simulator_outputs": {}})
        return 0
    except Exception as exc:
        traceback.print_exc()
        _write_result({"ok": False, "stage": stage, "error": "%s: %s" % (exc.__class__.__name__, str(exc)[-400:])})
        return 4
    finally:
        rknn.release()


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: toolkit1_worker.py job.json  (then 'go' on stdin once job.json is complete)\n")
        return 2
    from rknn.api import RKNN  # noqa: F401  imported while the host still prepares the job
    if sys.stdin.readline().strip() != "go":
        sys.stderr.write("the host did not start the job (stdin closed)\n")
        return 2
    try:
        with open(argv[1]) as fh:
            job = json.load(fh)
    except (OSError, ValueError) as exc:
        sys.stderr.write("bad job file %s: %s\n" % (argv[1], exc))
        return 2
    return run_job(job)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
