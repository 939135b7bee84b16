"""Build result sets in the runner's on-disk format (docs/FORMATS.md) quickly for the diff tests.

Hashes, .npy files and run.json come from the on-board program itself (rkdet.onboard: output_hash, save_array_atomic,
write_json_atomic); index lines are serialised as the runner's JsonlAppender does
(json.dumps(sort_keys=True) + newline) but written in one go, so a 1000-run set takes milliseconds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from rkdet.onboard.atomic import save_array_atomic, write_json_atomic
from rkdet.onboard.hashing import output_hash


class ResultSetBuilder:
    """Accumulate inferences, then `close()` writes run.json, index.jsonl, snapshots.jsonl, outputs/."""

    def __init__(self, path: Path, inputs: list[str], outputs: list[str], backend: str = "onnxruntime",
                 core_mask: str = "auto", affinity: list[int] | None = None) -> None:
        self.path = Path(path)
        (self.path / "outputs").mkdir(parents=True)
        self.inputs, self.outputs = inputs, outputs
        self.run = {"schema": "rkdet.run/1", "backend": backend, "backend_detail": f"{backend} (test builder)",
                    "emulated": False, "model": {"path": "model", "sha256": "0" * 64},
                    "inputs": [{"name": n, "file": f"{n}.npy"} for n in inputs], "outputs": outputs,
                    "repeats": 0, "warmup": 0, "core_mask": core_mask, "affinity": affinity,
                    "python": "3.11", "platform": "test", "started_unix": time.time(), "finished_unix": None,
                    "status": "running", "error": None}
        self.lines: list[str] = []
        self.snaps: list[str] = []
        self._hashes: dict[int, tuple[np.ndarray, str]] = {}
        self._saved: set[str] = set()

    def _hash(self, arr: np.ndarray) -> str:
        known = self._hashes.get(id(arr))
        if known is not None and known[0] is arr:
            return known[1]
        digest = output_hash(arr)
        self._hashes[id(arr)] = (arr, digest)
        if digest not in self._saved:
            save_array_atomic(str(self.path / "outputs" / f"{digest}.npy"), arr)
            self._saved.add(digest)
        return digest

    def add(self, run: int, input_name: str, arrays: list[np.ndarray], latency_ms: float = 10.0) -> None:
        outs = [{"name": n, "hash": self._hash(a), "shape": [int(d) for d in a.shape], "dtype": a.dtype.name}
                for n, a in zip(self.outputs, arrays)]
        rec = {"run": run, "input": input_name, "latency_ms": latency_ms, "t_unix": 1.7e9 + run,
               "backend": self.run["backend"], "outputs": outs}
        self.lines.append(json.dumps(rec, sort_keys=True) + "\n")
        self.run["repeats"] = max(self.run["repeats"], run + 1)

    def snapshot(self, at: str, run: int | None, npu_hz: int, temp_mc: int, cpu_khz: int = 1800000) -> None:
        snap = {"at": at, "run": run, "t_unix": 1.7e9, "cpu": {"policy4": {"governor": "performance", "cur_khz": cpu_khz}},
                "devfreq": {"fdab0000.npu": {"governor": "userspace", "cur_hz": npu_hz}},
                "thermal": {"npu-thermal": temp_mc, "soc-thermal": temp_mc - 500}, "npu_load": None}
        self.snaps.append(json.dumps(snap, sort_keys=True) + "\n")

    def close(self, torn_tail: str | None = None) -> Path:
        (self.path / "index.jsonl").write_text("".join(self.lines) + (torn_tail or ""))
        (self.path / "snapshots.jsonl").write_text("".join(self.snaps))
        self.run.update(status="complete", finished_unix=time.time())
        write_json_atomic(str(self.path / "run.json"), self.run)
        return self.path


def repeated_set(path: Path, arrays_per_input: dict[str, list[np.ndarray]], runs: int,
                 outputs: list[str], overrides: dict[tuple[int, str], list[np.ndarray]] | None = None,
                 **kwargs) -> ResultSetBuilder:
    """`runs` runs of every input producing the same arrays, except (run, input) -> arrays in overrides."""
    builder = ResultSetBuilder(path, list(arrays_per_input), outputs, **kwargs)
    overrides = overrides or {}
    for run in range(runs):
        for name, arrays in arrays_per_input.items():
            builder.add(run, name, overrides.get((run, name), arrays), latency_ms=10.0 + (run % 7) * 0.1)
    return builder


def default_outputs(seed: int = 0, size: int = 640, nc: int = 11) -> list[np.ndarray]:
    """Arrays shaped like the default build's 6 outputs (box0, cls0, box1, cls1, box2, cls2)."""
    rng = np.random.default_rng(seed)
    out = []
    for stride in (8, 16, 32):
        n = size // stride
        out.append(rng.standard_normal((1, 64, n, n)).astype(np.float32))
        out.append(rng.random((1, nc, n, n), dtype=np.float32) * 0.2)
    return out


DEFAULT_NAMES = ["box0", "cls0", "box1", "cls1", "box2", "cls2"]


def one_ulp_up(arr: np.ndarray, flat_index: int) -> np.ndarray:
    """A copy with one element moved to the next representable float (one ULP)."""
    out = arr.copy()
    flat = out.reshape(-1)
    flat[flat_index] = np.nextafter(flat[flat_index], np.float32(np.inf))
    return out


def build_manifest(build: Path, platform: str = "rk3588") -> Path:
    """A minimal valid manifest.json in a hand-made build folder: `rkdet diff X BUILD` refuses a build
    folder without a readable manifest (it could hide a failed gate), so a fabricated one needs it."""
    from rkdet.records.manifest import Manifest, write_manifest

    build.mkdir(parents=True, exist_ok=True)
    write_manifest(build / "manifest.json", Manifest(fingerprint="ab" * 32, platform=platform))
    return build
