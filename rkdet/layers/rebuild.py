"""Rebuild a build in the hermetic toolkit worker and run the toolkit's per-layer accuracy analysis.

The toolkit's simulator only runs a model built in the same process, so `rkdet layers` repeats the
build with exactly the options the build recorded (its `config.resolved.json`, checked against the
manifest's model fingerprint) in the same hermetic folder and environment as `rkdet convert`, and
checks that the rebuilt build fingerprint (model + `.rknn` content + golden inputs and simulator outputs) equals
the build's before trusting the per-layer dumps.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from rkdet.config import PATH_KEYS, RkdetConfig, load_config
from rkdet.convert import golden, manifest
from rkdet.convert.hermetic import ToolkitSession
from rkdet.convert.identity import build_fingerprint, golden_records, model_identity
from rkdet.convert.images import ImageFile, Materialized, list_images
from rkdet.convert.onnx_graph import PreparedModel, prepare_model
from rkdet.convert.pipeline import materialize
from rkdet.convert.toolkits import Toolkit, find_toolkit, float_layers_job, toolkit2_options
from rkdet.errors import ConversionError, InputError
from rkdet.layers.analysis import InputAnalysis, read_analysis
from rkdet.records.io import write_atomic
from rkdet.records.build import BuildRecord, load_build
from rkdet.records.manifest import Manifest
from rkdet.onboard.hashing import output_hash
from rkdet.log import Log

# What `rkdet layers BUILD` reads from a build folder (a failed build kept with --keep-failed has them too).
NEEDED = ("manifest.json", "config.resolved.json", "model.onnx")



@dataclass(frozen=True)
class BuildSource:
    """What is analysed: the config, the platform, and the build it came from (None: from a config)."""

    cfg: RkdetConfig
    platform: str
    build: Path | None
    manifest: Manifest | None  # the build folder's (rkdet.records.manifest); None: from a config
    record: BuildRecord | None = None  # the build folder loaded once (rkdet.records.build); None: from a config


@dataclass(frozen=True)
class Rebuild:
    """The rebuild's identity and the per-layer analysis of each analysed input."""

    fingerprint: str
    build_fingerprint: str | None  # the build folder's, None when analysing straight from a config
    toolkit: str
    model: PreparedModel
    analyses: list[InputAnalysis]
    timings: dict[str, float]
    output_cosine: dict[str, float]  # golden input -> its lowest output cosine (simulator vs FP32): the ranking

    @property
    def fingerprint_match(self) -> bool | None:
        return None if self.build_fingerprint is None else self.fingerprint == self.build_fingerprint


def from_build(folder: Path, paths_from: Path | None = None, command: str = "rkdet layers {build}") -> BuildSource:
    """Read a build folder; a missing or unreadable piece is one line naming it (exit 2).

    A published build records its model and image folders by name only (no machine paths), so where
    they are comes from `paths_from`, the config that built it (the rebuilt fingerprint then shows
    whether they are the same files)."""
    if not folder.is_dir():
        raise InputError(f"{folder}: not a build folder (it does not exist); pass a folder written by rkdet convert")
    missing = [n for n in NEEDED if not (folder / n).is_file()]
    if missing:
        raise InputError(f"{folder}: not a complete build folder: missing {', '.join(missing)} "
                         "(rkdet layers needs what rkdet convert writes; rebuild it, or use --config)")
    try:  # the one load of a build folder (bounded, strict: the fingerprint names the cut cache folder)
        record = load_build(folder, complete=False)
        resolved = record.resolved_config()  # the one config.resolved.json reader, kept in the record
    except FileNotFoundError as exc:
        raise InputError(f"{exc.filename}: missing; rebuild with rkdet convert") from None
    doc = record.manifest
    try:
        cfg = RkdetConfig.model_validate(dict(resolved.doc))
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first.get("loc", ()))
        raise InputError(f"{folder / 'config.resolved.json'}: key {key!r}: {first.get('msg')}; rebuild with rkdet convert") from None
    # A program to run is never taken from a build folder (it may be someone else's): the toolkit-1 Python
    # comes from the user's own --config only; without one, rv1126 is refused before anything runs.
    own_python = None
    if paths_from is not None:
        located = load_config(paths_from)
        updates = {section: getattr(cfg, section).model_copy(update={key: getattr(getattr(located, section), key)})
                   for section, key in PATH_KEYS if section in ("model", "quantize", "golden")}
        cfg = cfg.model_copy(update=updates)
        own_python = located.target.toolkit1_python
    else:
        for section, key in (("model", "onnx"), ("quantize", "dataset"), ("golden", "inputs")):
            value = getattr(getattr(cfg, section), key)
            if value is not None and not Path(value).is_absolute():
                raise InputError(f"{folder / 'config.resolved.json'}: {section}.{key} is {str(value)!r} without its "
                                 f"location (a published build records no machine paths); pass the config that "
                                 f"built it: {command.format(build=folder)} --config FILE")
    cfg = cfg.model_copy(update={"target": cfg.target.model_copy(update={"toolkit1_python": own_python})})
    return BuildSource(cfg, doc.platform, folder, doc, record)


def from_config(path: Path, platform: str | None) -> BuildSource:
    cfg = load_config(path)
    return BuildSource(cfg, (platform or cfg.target.platforms[0]).lower(), None, None)


def _save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def toolkit_job(folder: Path, src: BuildSource, model: PreparedModel, cal: Materialized, gold: Materialized,
                analyse: dict[str, np.ndarray], model_fp: str | None = None) -> dict:
    """The build part is laid out as rkdet convert lays it out (relative paths, same file names)."""
    (folder / "model.onnx").write_bytes(model.onnx_bytes)
    lines = []
    for i, f in enumerate(cal.files):
        rel = f"cal/{i:04d}.npy"
        _save(folder / rel, cal.tensors[f.name].transpose(0, 3, 1, 2))
        lines.append(rel)
    (folder / "dataset.txt").write_text("\n".join(lines) + "\n")
    golden_list = []
    for f in gold.files:
        rel = f"golden/{f.name}.npy"
        _save(folder / rel, gold.tensors[f.name])
        golden_list.append([f.name, rel])
    analyse_list = []
    for name, tensor in analyse.items():
        rel = f"analyse/{name}.npy"
        _save(folder / rel, tensor.transpose(0, 3, 1, 2))
        analyse_list.append([name, rel])
    # the same custom string as convert (same fingerprint); model_fp None (bisection's cut models, which no
    # board checks by fingerprint): the user's custom string alone
    config, build, do_quantization = toolkit2_options(
        src.cfg, src.platform,
        None if model_fp is None else manifest.embedded_custom_string(src.cfg.toolkit.custom_string, model_fp))
    return {"config": config, "build": build, "do_quantization": do_quantization,
            "dataset": "dataset.txt" if do_quantization else None, "onnx": "model.onnx",
            "export": "model.rknn", "golden": golden_list, "golden_out": "sim_out", "analyse": analyse_list,
            "float_layers": float_layers_job(src.cfg)}


def prepared_as_built(src: BuildSource, cal_files: list[ImageFile], gold_files: list[ImageFile]
                      ) -> tuple[PreparedModel, Materialized, Materialized]:
    """The prepared model and the calibration and golden images exactly as rkdet convert made them for
    `src` (refused when the ONNX changed since the build: its prepared graph hashes differently). Used by
    the host analysis and the board bisection's cut models, so both rebuild from the same inputs."""
    cfg = src.cfg
    model = prepare_model(cfg.model)
    if src.manifest is not None and src.manifest.onnx_sha256 != manifest.sha256_bytes(model.onnx_bytes):
        raise InputError(f"{cfg.model.onnx}: the ONNX model changed since the build {src.build} was made "
                         "(its prepared graph hashes differently); rebuild with rkdet convert")
    return model, materialize(cal_files, model, cfg), materialize(gold_files, model, cfg)


def _rebuild_session(src: BuildSource, needs: str) -> tuple[Toolkit, list[ImageFile], list[ImageFile], ToolkitSession]:
    """The toolkit, the build's image lists and a worker session for rebuilding `src`: the convert's own
    worker (same build steps, so the same fingerprint), importing the toolkit while the host prepares.
    `needs` says what wants the simulator when the toolkit has none."""
    cfg, platform = src.cfg, src.platform
    tk = find_toolkit(platform, cfg)
    if not tk.has_simulator:
        raise InputError(f"{platform}: {tk.name} has no simulator; {needs}")
    cal_files = list_images(cfg.quantize.dataset, "quantize.dataset", cfg.quantize.max_images)
    gold_files = list_images(cfg.golden.inputs, "golden.inputs", cfg.golden.max_images)
    key = manifest.folder_key(cfg, platform, cal_files, gold_files, tk)
    return tk, cal_files, gold_files, ToolkitSession(key, tk.python, tk.worker)


def rebuild_and_analyse(src: BuildSource, inputs: Path | None, progress: Log, log_to: Path | None = None,
                        max_inputs: int | None = None) -> Rebuild:
    """Rebuild `src` in the hermetic worker, check its fingerprint, and analyse every input per layer."""
    cfg, platform = src.cfg, src.platform
    tk, cal_files, gold_files, session = _rebuild_session(src, "rkdet layers needs rknn-toolkit2 (rk3562/66/68/76/88, rv1126b)")
    try:
        progress("preparing the model and the images as rkdet convert does")
        model, cal, gold = prepared_as_built(src, cal_files, gold_files)
        analyse = gold.tensors
        if inputs is not None:
            analyse = materialize(list_images(inputs, "--inputs"), model, cfg).tensors
        reference = None
        if inputs is None:  # FP32 references, so the worker analyses the golden inputs that stray furthest first
            reference, _ = golden.onnxruntime_reference(model.onnx_bytes, gold.tensors, model.input_name,
                                                        cfg.preprocess.mean, cfg.preprocess.std)
        model_fp = model_identity(cfg, platform, model, cal, tk).fingerprint
        with session:
            folder = session.folder
            job = toolkit_job(folder, src, model, cal, gold, analyse, model_fp)
            job["max_inputs"] = max_inputs or None
            if reference is not None:
                job["reference"] = {}
                for name, outs in reference.items():
                    files = []
                    for i, out in enumerate(model.output_names):
                        _save(folder / "reference" / f"{name}.{i}.npy", outs[out])
                        files.append(f"reference/{name}.{i}.npy")
                    job["reference"][name] = files
            progress(f"{platform}: rebuilding with {tk.name} {tk.version} and analysing "
                     f"{min(max_inputs or len(analyse), len(analyse))} of {len(analyse)} input(s) per layer "
                     "(hermetic subprocess)")
            started = time.monotonic()
            result = _run_worker(session, job, f"{platform}: {tk.name} {tk.version}", log_to)
            wall = time.monotonic() - started
            fingerprint, _ = _rebuilt_fingerprint(folder, model, model_fp, gold, result)
            analyses = [read_analysis(name, folder / rel) for name, rel in result["analysis"].items()]
            timings = dict(result.get("timings", {}), worker_s=wall)
            ranking = {name: cos for name, cos in result.get("ranking", [])}
        build_fp = src.manifest.fingerprint if src.manifest is not None else None
        return Rebuild(fingerprint, build_fp, f"{tk.name} {tk.version}", model, analyses, timings, ranking)
    finally:
        session.close()




def _run_worker(session: ToolkitSession, job: dict, what: str, log_to: Path | None) -> dict:
    """Write the job (all or none), run the hermetic worker, and read its result.json; a failure is one line."""
    folder = session.folder
    write_atomic(str(folder / "job.json"), json.dumps(job, sort_keys=True))  # the worker sees all or none
    run = session.worker.go()
    if log_to is not None:
        log_to.write_text(run.log)
    result_file = folder / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else None
    if run.returncode != 0 or not result or not result.get("ok"):
        where = f"{result['stage']}: {result['error']}" if result else f"worker exited {run.returncode}"
        raise ConversionError(f"{what} failed at {where}")
    return result


def _rebuilt_fingerprint(folder: Path, model: PreparedModel, model_fp: str, gold: Materialized, result: dict
                         ) -> tuple[str, dict[str, dict[str, np.ndarray]]]:
    """The rebuild's build fingerprint (from the golden inputs' simulator outputs only, as convert computes
    it) and every simulator output the worker wrote, loaded."""
    content = manifest.rknn_content_fingerprint(folder / "model.rknn")
    outputs = {name: {out: np.load(folder / f, allow_pickle=False) for out, f in zip(model.output_names, files)}
               for name, files in result["simulator_outputs"].items()}
    golden_names = {f.name for f in gold.files}
    sim_hashes = {name: {out: output_hash(a) for out, a in arrays.items()}
                  for name, arrays in outputs.items() if name in golden_names}
    return build_fingerprint(model_fp, golden_records(gold), content, sim_hashes), outputs


EXTRA_PREFIX = "extra-"  # the worker's names for inputs simulated beside the golden ones


def rebuild_and_simulate(src: BuildSource, inputs: dict[str, np.ndarray], progress: Log,
                         log_to: Path | None = None) -> tuple[bool | None, dict[str, dict[str, np.ndarray]]]:
    """Rebuild `src` exactly as `rkdet layers` does and run the toolkit's simulator on `inputs` (uint8 NHWC,
    as fed) beside the golden inputs: (whether the rebuilt fingerprint equals the build's, None without a
    build; the simulator's outputs per input name). The simulator runs only a model built in the same
    process, so this is the one way to simulate inputs other than the golden ones."""
    cfg, platform = src.cfg, src.platform
    tk, cal_files, gold_files, session = _rebuild_session(src, "simulating needs rknn-toolkit2")
    try:
        progress("preparing the model and the images as rkdet convert does")
        model, cal, gold = prepared_as_built(src, cal_files, gold_files)
        model_fp = model_identity(cfg, platform, model, cal, tk).fingerprint
        with session:
            folder = session.folder
            job = toolkit_job(folder, src, model, cal, gold, {}, model_fp)
            names = {}
            for i, (name, tensor) in enumerate(sorted(inputs.items())):
                rel = f"extra/{i:05d}.npy"
                _save(folder / rel, tensor)
                names[f"{EXTRA_PREFIX}{i:05d}"] = name
                job["golden"].append([f"{EXTRA_PREFIX}{i:05d}", rel])
            progress(f"{platform}: rebuilding with {tk.name} {tk.version} and simulating {len(inputs)} input(s) "
                     "(hermetic subprocess)")
            result = _run_worker(session, job, f"{platform}: {tk.name} {tk.version}", log_to)
            fingerprint, outputs = _rebuilt_fingerprint(folder, model, model_fp, gold, result)
        match = None if src.manifest is None else fingerprint == src.manifest.fingerprint
        return match, {names[k]: v for k, v in outputs.items() if k in names}
    finally:
        session.close()
