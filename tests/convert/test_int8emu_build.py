"""A real build carries its INT8 emulation: convert asks rknn-toolkit2 for the quantization it chose
(quantization.json) and writes model.int8emu.onnx, recorded in the manifest; on the golden inputs it
equals the toolkit's simulator bit for bit, every output, where the FP32 model does not (docs/EMULATOR.md
has the table)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from rkdet.convert import int8emu
from rkdet.onboard.reference import fp32_input, session_options


def _run(model: Path, inputs: dict[str, np.ndarray], mean, std) -> dict[str, dict[str, np.ndarray]]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), session_options(ort), providers=["CPUExecutionProvider"])  # the board's
    names = [o.name for o in session.get_outputs()]
    feed = session.get_inputs()[0].name
    return {k: dict(zip(names, session.run(None, {feed: fp32_input(x, mean, std)}))) for k, x in inputs.items()}


def test_the_default_build_has_an_int8_emulation_equal_to_the_simulator(default_build: Path) -> None:
    manifest = json.loads((default_build / "manifest.json").read_text())
    record = manifest["int8_emulation"]
    emulation = default_build / int8emu.FILE
    assert record["file"] == int8emu.FILE and record["exact"] is False
    assert hashlib.sha256(emulation.read_bytes()).hexdigest() == record["sha256"]
    assert record["int8_tensors"] > 50 and record["int8_weights"] > 50  # the toolkit's table, applied
    table = json.loads((default_build / int8emu.TABLE).read_text())
    assert any(v.get("qmethod") == "channel" and len(v.get("zero_point", [])) > 1 for v in table.values())
    fed = manifest["fed_input"]
    sim_hashes = manifest["golden_outputs"]["simulator"]
    names = sorted(sim_hashes)[:3]
    inputs = {n: np.load(default_build / "golden" / "inputs" / f"{n}.npy") for n in names}
    sim = {n: {o: np.load(default_build / "golden" / "simulator" / "outputs" / f"{h}.npy") for o, h in sim_hashes[n].items()}
           for n in names}
    int8 = _run(emulation, inputs, fed["mean"], fed["std"])
    fp32 = _run(default_build / "model.onnx", inputs, fed["mean"], fed["std"])
    for name in names:
        for out, expected in sim[name].items():
            same_fp32 = np.mean(fp32[name][out] == expected)
            assert same_fp32 < 1.0, (name, out)  # the control: FP32 is not the simulator
            # the toolkit's rules the emulation follows make it the simulator, bit for bit, on these pages
            assert np.array_equal(int8[name][out], expected), (name, out, np.mean(int8[name][out] == expected))
