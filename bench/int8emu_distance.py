"""How far the emulated board's INT8 emulation (model.int8emu.onnx) is from the toolkit's simulator.

For each build folder given: on its golden inputs, per output, the max distance in LSB (the output's int8
step from the manifest), the min cosine, and the detections that agree (rkdet's decision gate, the
simulator standing where FP32 usually stands); the same for the FP32 ONNX, the emulated board's previous
computation, as a control; and the noise floor: the INT8 emulation computed with another float32 summation
order (onnxruntime's NCHWc Conv kernels, graph optimization "all") against itself as the emulated board
computes it (the reference session's "extended"): how far two computations of one INT8 model lie apart
when only the order of their float32 sums differs. Writes a Markdown table (docs/EMULATOR.md quotes it).

    .venv/bin/python bench/int8emu_distance.py BUILD [BUILD ...] --out bench/results/int8emu.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from rkdet.config import FidelitySection
from rkdet.convert import fidelity, int8emu
from rkdet.diff.resultset import quant_steps
from rkdet.onboard.reference import REFERENCE_GRAPH_OPT, fp32_input, session_options
from rkdet.records.manifest import read_manifest


def _outputs(onnx_bytes: bytes, inputs: dict[str, np.ndarray], mean, std,
             graph_opt: str = REFERENCE_GRAPH_OPT) -> dict[str, dict[str, np.ndarray]]:
    """Each input's outputs, computed as the emulated board's runtime double computes (its session options)."""
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_bytes, session_options(ort, graph_opt=graph_opt),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return {k: dict(zip(names, session.run(None, {session.get_inputs()[0].name: fp32_input(x, mean, std)})))
            for k, x in inputs.items()}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 1.0 if na == nb == 0 else float(a @ b / (na * nb)) if na and nb else 0.0


def measure(build: Path) -> list[str]:
    doc = read_manifest(build / "manifest.json")
    fed = doc.need_fed_input(build / "manifest.json")
    hashes = (doc.golden_outputs or {}).get("simulator") or {}
    sim = {name: {out: np.load(build / "golden" / "simulator" / "outputs" / f"{h}.npy", allow_pickle=False)
                  for out, h in outs.items()} for name, outs in hashes.items()}
    inputs = {name: np.load(build / "golden" / "inputs" / f"{name}.npy") for name in sim}
    steps = quant_steps(build)
    names = tuple(o.name for o in doc.inputs.onnx_prepared.outputs)
    shapes = doc.output_shapes
    rows = []
    emulation = (build / int8emu.FILE).read_bytes()
    int8 = _outputs(emulation, inputs, fed.mean, fed.std)
    runs = (("INT8 emulation", int8, sim),
            ("FP32 ONNX (control)", _outputs((build / "model.onnx").read_bytes(), inputs, fed.mean, fed.std), sim),
            ("noise floor: INT8 emulation, NCHWc sums, vs itself",
             _outputs(emulation, inputs, fed.mean, fed.std, "all"), int8))
    for label, got, ref in runs:
        report = fidelity.measure(got, ref, names, shapes, doc.inputs.onnx_prepared.prepare, FidelitySection(),
                                  input_hw=tuple(doc.inputs.onnx_prepared.input_shape_nchw[2:]))
        per_input = (report.decision or {}).get("inputs") or {}
        agreed = (f"{sum(v['agree'] for v in per_input.values())}/{sum(v['detections'] for v in per_input.values())}"
                  if per_input else "n/a (no decoder for these outputs)")
        for out in names:
            step = steps.get(out)
            lsb = max(float(np.abs(got[k][out].astype(np.float64) - ref[k][out].astype(np.float64)).max()) for k in sim)
            cos = min(_cos(got[k][out], ref[k][out]) for k in sim)
            exact = np.mean([np.mean(got[k][out] == ref[k][out]) for k in sim])
            rows.append(f"| {build.name} | {label} | {out} | {lsb / step:.1f} | {cos:.5f} | {exact:.3f} | {agreed} |"
                        if step else f"| {build.name} | {label} | {out} | (float, max abs {lsb:.4g}) | {cos:.5f} | "
                                     f"{exact:.3f} | {agreed} |")
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    lines = ["| build | computed by | output | max LSB | min cosine | equal elements | decisions agree |",
             "|---|---|---|---|---|---|---|"]
    for build in args.builds:
        lines += measure(build)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
