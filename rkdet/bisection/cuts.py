"""Cut models of a build, made in the hermetic toolkit worker and cached by (build fingerprint, cut).

A cut folder holds what a board and the comparison need: `model.rknn` (the toolkit's cut, built with
the full build's quantization parameters: cut_worker.py), `model.onnx` (the same cut of the prepared
ONNX, made with onnx.utils.Extractor: what the emulated runtime computes, and the FP32 reference),
`model.io.json` (the runner names the outputs from it), `reference/simulator/<input>.npz` and
`reference/onnx-fp32/<input>.npz` (the cut tensors for each golden input, keyed by tensor name) and
`cut.json` (outputs, quantization-parameter check, toolkit, build time). Folders are assembled under a
temporary name and renamed into place, so a cache entry is complete or absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np

from rkdet.bisection.plan import CutPoint
from rkdet.convert import golden, int8emu, manifest
from rkdet.convert.hermetic import ToolkitSession
from rkdet.convert.images import list_images
from rkdet.convert.toolkits import find_toolkit
from rkdet.errors import ConversionError, InputError
from rkdet.layers.rebuild import BuildSource, prepared_as_built, toolkit_job
from rkdet.records.io import read_json_object, swap_folder, write_atomic
from rkdet.records.model_io import FILE as MODEL_IO
from rkdet.records.model_io import ModelIo, write_model_io

WORKER = Path(__file__).resolve().parent / "cut_worker.py"
FULL_CFG = "full.quantization.cfg"


def default_cache() -> Path:
    """`$XDG_CACHE_HOME/rkdet/cuts` (default `~/.cache/rkdet/cuts`)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rkdet" / "cuts"


@dataclass(frozen=True)
class CutModel:
    """One cut model ready for a board: its folder, outputs and how it was obtained."""

    folder: Path
    outputs: tuple[str, ...]
    cached: bool  # True: taken from the cache, no build
    build_s: float
    quant_changed: int  # tensors whose parameters step 1 of the cut computed differently (then replaced)

    def reference(self, kind: str, input_name: str) -> dict[str, np.ndarray]:
        """The cut tensors of one golden input (`kind`: simulator or onnx-fp32), by tensor name."""
        return load_reference(self.folder / "reference" / kind / f"{input_name}.npz", self.outputs)


def cut_key(point: CutPoint) -> str:
    return hashlib.sha256("\n".join(point.frontier).encode()).hexdigest()[:16]


class CutBuilder:
    """Makes (or finds) the cut models of one build; the toolkit inputs are prepared once, when first needed."""

    def __init__(self, src: BuildSource, cache: Path, progress: Callable[[str], None]) -> None:
        if src.build is None or src.manifest is None:
            raise InputError("board bisection cuts a build folder's model: pass a build folder written by rkdet convert")
        self.src = src
        self.build = src.build
        self.manifest = src.manifest
        self.fingerprint: str = src.manifest.fingerprint  # 64 hex (the manifest reader checked it): the cache folder
        self.root = cache / self.fingerprint[:32]
        self.progress = progress
        self._prepared: tuple | None = None
        self.toolkit = ""

    def _prepare(self) -> tuple:
        if self._prepared is None:
            cfg, platform = self.src.cfg, self.src.platform
            tk = find_toolkit(platform, cfg)
            if not tk.has_simulator:
                raise InputError(f"{platform}: {tk.name} cannot build cut models with a simulator reference; "
                                 "bisection needs rknn-toolkit2")
            if not cfg.quantize.enabled or cfg.quantize.force_fp16:
                raise InputError(f"{self.build}: a float build has no quantization parameters to keep; board "
                                 "bisection is for quantized builds")
            cal_files = list_images(cfg.quantize.dataset, "quantize.dataset", cfg.quantize.max_images)
            gold_files = list_images(cfg.golden.inputs, "golden.inputs", cfg.golden.max_images)
            key = manifest.folder_key(cfg, platform, cal_files, gold_files, tk)
            model, cal, gold = prepared_as_built(self.src, cal_files, gold_files)
            self.toolkit = f"{tk.name} {tk.version}"
            self._prepared = (tk, key, model, cal, gold)
        return self._prepared

    def _int8_cut(self, folder: Path, own: dict | None) -> None:
        """`folder/model.int8emu.onnx`: the cut model (folder/model.onnx) fake-quantized with the full build's
        table (rkdet.convert.int8emu) plus the cut's own int8 copies behind its outputs (cut_worker's
        `own_params`), what the emulated NPU runs for this cut. Nothing when the build has no table. Made
        again for a cached cut too (it costs no toolkit run), so a cut cached by an older rkdet is computed
        with this rkdet's emulation, as the full build's model is; written only when it changed."""
        table_path = self.build / int8emu.TABLE
        if not table_path.is_file():
            return
        table = {**read_json_object(table_path), **(own or {})}  # bounded: a build folder is input
        try:
            emulation = int8emu.fake_quantize((folder / "model.onnx").read_bytes(), table)
        except Exception as exc:  # a crafted or damaged table: one line, never a traceback
            raise InputError(f"{table_path}: not a quantization table rkdet can apply to the cut model "
                             f"({exc.__class__.__name__}: {str(exc)[:200]}); re-run rkdet convert") from None
        target = folder / int8emu.FILE
        if not target.is_file() or target.read_bytes() != emulation.onnx_bytes:
            write_atomic(str(target), emulation.onnx_bytes)

    def get(self, point: CutPoint) -> CutModel:
        folder = self.root / cut_key(point)
        if (folder / "cut.json").is_file():
            try:
                doc = read_json_object(folder / "cut.json")
            except InputError:
                doc = {}  # a damaged cache entry is made again
            if tuple(doc.get("outputs", ())) == point.frontier and doc.get("build_fingerprint") == self.fingerprint:
                self._int8_cut(folder, doc.get("quant", {}).get("own_params"))  # cached before the build had one
                return CutModel(folder, point.frontier, True, 0.0, len(doc.get("quant", {}).get("changed", [])))
        return self._make(point, folder)

    def _make(self, point: CutPoint, folder: Path) -> CutModel:
        import onnx
        from onnx.utils import Extractor

        tk, key, model, cal, gold = self._prepare()
        self.root.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self.progress(f"cut build at {point.node} ({point.op}): outputs {', '.join(point.frontier)}")
        full = onnx.load_from_string(model.onnx_bytes)
        inputs = [i.name for i in full.graph.input]
        cut_onnx = Extractor(full).extract_model(inputs, list(point.frontier)).SerializeToString()
        session = ToolkitSession(hashlib.sha256(f"{key}/cut/{cut_key(point)}".encode()).hexdigest(), tk.python, WORKER)
        try:
            with session:
                work = session.folder
                job = toolkit_job(work, self.src, model, cal, gold, {})
                job.update(outputs=list(point.frontier), full_cfg=FULL_CFG, analyse=None)
                if (self.root / FULL_CFG).is_file():
                    shutil.copyfile(self.root / FULL_CFG, work / FULL_CFG)
                write_atomic(str(work / "job.json"), json.dumps(job, sort_keys=True))  # whole or absent
                run = session.worker.go()
                result_file = work / "result.json"
                result = json.loads(result_file.read_text()) if result_file.exists() else None
                if run.returncode != 0 or not result or not result.get("ok"):
                    where = f"{result['stage']}: {result['error']}" if result else f"worker exited {run.returncode}"
                    raise ConversionError(f"cut at {point.node}: {tk.name} {tk.version} failed at {where}")
                if not (self.root / FULL_CFG).is_file():
                    _install(work / FULL_CFG, self.root / FULL_CFG)
                stage = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=self.root))
                try:
                    shutil.copyfile(work / "model.rknn", stage / "model.rknn")
                    (stage / "model.onnx").write_bytes(cut_onnx)
                    self._int8_cut(stage, result["quant"].get("own_params"))
                    _, _, h, w = model.input_shape_nchw
                    write_model_io(stage / MODEL_IO, ModelIo.image(model.input_name, h, w, point.frontier))
                    for name, files in result["simulator_outputs"].items():
                        _save_npz(stage / "reference" / "simulator" / f"{name}.npz",
                                  [np.load(work / f, allow_pickle=False) for f in files])
                    cfg = self.src.cfg
                    fp32, _ = golden.onnxruntime_reference(cut_onnx, gold.tensors, model.input_name,
                                                           cfg.preprocess.mean, cfg.preprocess.std)
                    for name, outs in fp32.items():
                        _save_npz(stage / "reference" / "onnx-fp32" / f"{name}.npz", [outs[t] for t in point.frontier])
                    build_s = time.monotonic() - started
                    doc = {"build_fingerprint": self.fingerprint, "outputs": list(point.frontier), "node": point.node,
                           "op": point.op, "quant": result["quant"], "toolkit": self.toolkit, "build_s": build_s,
                           "cut": "rknn.load_onnx(outputs=...) + hybrid_quantization_step1/2 with the full model's "
                                  "quantization parameters"}
                    (stage / "cut.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
                    swap_folder(stage, folder)  # replaces a stale or foreign entry for this key whole
                except BaseException:
                    shutil.rmtree(stage, ignore_errors=True)
                    raise
        finally:
            session.close()
        return CutModel(folder, point.frontier, False, build_s, len(result["quant"]["changed"]))


def _save_npz(path: Path, arrays: list[np.ndarray]) -> None:
    """Arrays in output order (keys t0, t1, ...: tensor names may hold characters a zip name cannot)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **{f"t{i}": np.ascontiguousarray(a) for i, a in enumerate(arrays)})


def load_reference(path: Path, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[f"t{i}"] for i, name in enumerate(outputs)}


def _install(src: Path, dest: Path) -> None:
    """Copy `src` to `dest` through the one atomic writer (a concurrent cut sees all of it or none)."""
    def copy(handle: BinaryIO) -> None:
        with open(src, "rb") as source:
            shutil.copyfileobj(source, handle)

    write_atomic(str(dest), copy)
