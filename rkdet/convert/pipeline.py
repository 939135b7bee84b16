"""`rkdet convert`: ONNX -> RKNN for each target platform, with golden data, fidelity gate and manifest.

Every build is assembled in a staging folder beside its destination and renamed into place only when
it is complete and has passed the fidelity gate, so an interrupted or failed convert leaves nothing
half-written (and an earlier good build of the same name stays until the new one replaces it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rkdet.records.gates import PASSED, GateRecord
from rkdet.config import RkdetConfig
from rkdet.convert import fidelity, golden, int8emu, manifest, published, toolkit_log
from rkdet.convert.hermetic import BuildWatch, ToolkitSession
from rkdet.convert.images import (IMAGE_SUFFIXES, ImageFile, Materialized, decode_rgb, list_images, min_side_for,
                                  non_images, preprocess)
from rkdet.convert.onnx_graph import PreparedModel, prepare_model, require_onnx_file
from rkdet.convert.selfcheck_bundle import write_bundle as write_selfcheck_bundle
from rkdet.convert.identity import ModelIdentity, build_fingerprint, golden_records, model_identity
from rkdet.convert.toolkits import Toolkit, find_toolkit, job_options
from rkdet.decode import detect_layout
from rkdet.errors import ConversionError, FidelityGateError, InputError, RkdetError
from rkdet.records.io import check_may_write, swap_folder, write_json_atomic
from rkdet.records.fidelity import FILE as FIDELITY
from rkdet.records.fidelity import FidelityRecord, write_fidelity
from rkdet.records.manifest import Manifest, read_manifest
from rkdet.records.model_io import FILE as MODEL_IO
from rkdet.records.model_io import ModelIo, write_model_io
from rkdet.records.resolved_config import FILE as RESOLVED_CONFIG
from rkdet.records.resolved_config import write_resolved_config
from rkdet.log import Log



@dataclass
class BuildResult:
    """What one platform's build produced (for the CLI summary and --json)."""

    platform: str
    folder: Path
    fingerprint: str
    rknn_sha256: str
    warnings: list[str] = field(default_factory=list)
    verify: dict | None = None
    fidelity_line: str | None = None  # every gate's worst result and threshold, on one line


def materialize(files: list[ImageFile], model: PreparedModel, cfg: RkdetConfig) -> Materialized:
    _, _, h, w = model.input_shape_nchw
    tensors, boxes = {}, {}
    for f in files:
        tensors[f.name], boxes[f.name] = preprocess(decode_rgb(f.path, min_side_for((h, w))), (h, w), cfg.preprocess)
    return Materialized(files, tensors, boxes)


def check_writable(out: Path) -> None:
    """Fail early (exit 2) when the output folder cannot be created or written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".rkdet-write-test-"):
            pass
    except OSError as exc:
        raise InputError(f"{out}: output folder is not writable ({exc.strerror}); choose another with --out") from None


def _save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def _toolkit_job(folder: Path, tk: Toolkit, cfg: RkdetConfig, platform: str, model: PreparedModel,
                 cal: Materialized, gold: Materialized, model_fp: str) -> dict:
    """Lay out the worker's folder (relative paths only: the folder path is part of the environment)."""
    (folder / "model.onnx").write_bytes(model.onnx_bytes)
    lines = []
    for i, f in enumerate(cal.files):
        rel = f"cal/{i:04d}.npy"
        _save(folder / rel, cal.tensors[f.name].transpose(0, 3, 1, 2))  # the toolkit wants the model's NCHW for .npy
        lines.append(rel)
    (folder / "dataset.txt").write_text("\n".join(lines) + "\n")
    golden_list = []
    if tk.has_simulator:
        for f in gold.files:
            rel = f"golden/{f.name}.npy"
            _save(folder / rel, gold.tensors[f.name])
            golden_list.append([f.name, rel])
    # toolkit2's .rknn carries the model fingerprint (manifest.embedded_custom_string)
    custom = manifest.embedded_custom_string(cfg.toolkit.custom_string, model_fp) if tk.name == "rknn-toolkit2" else None
    options = job_options(tk, cfg, platform, custom)
    return {**options, "dataset": "dataset.txt" if options["do_quantization"] else None, "onnx": "model.onnx",
            "export": "model.rknn", "golden": golden_list, "golden_out": "sim_out"}


def _run_toolkit(tk: Toolkit, cfg: RkdetConfig, platform: str, model: PreparedModel, cal: Materialized,
                 gold: Materialized, session: ToolkitSession, stage_dir: Path, model_fp: str,
                 watch: BuildWatch | None = None) -> tuple[dict, dict[str, dict[str, np.ndarray]], str]:
    """Build in the session's hermetic folder; copy model.rknn and toolkit.log into `stage_dir`; return
    the simulator outputs. The session is closed (worker reaped, folder removed) on the way out."""
    with session:
        folder = session.folder
        job = _toolkit_job(folder, tk, cfg, platform, model, cal, gold, model_fp)
        write_json_atomic(str(folder / "job.json"), job)  # the one atomic writer (rkdet.records.io)
        run = session.worker.go(watch=watch)
        (stage_dir / "toolkit.log").write_text(published.scrub(run.log, folder, tk.python))
        result_file = folder / "result.json"
        result = json.loads(result_file.read_text()) if result_file.exists() else None
        if run.returncode != 0 or not result or not result.get("ok"):
            where = f"{result['stage']}: {result['error']}" if result else f"worker exited {run.returncode}"
            hint = ("; the stock YOLOv8 head is known to crash rknn-toolkit2 2.5.0: set model.prepare: "
                    "yolov8-split-head" if model.stock_yolov8_head else "")
            if result and run.returncode == 2:  # the worker refused the job's input (e.g. quantize.float_layers)
                raise InputError(f"{platform}: {result['error']}")
            logged = toolkit_log.classify(run.log).errors
            if logged and not hint:
                hint = f"; toolkit.log: {logged[0].first_line[:160]!r} ({logged[0].meaning})"
            raise ConversionError(f"{platform}: {tk.name} {tk.version} failed at {where}{hint} "
                                  "(rerun with --keep-failed to keep the folder with toolkit.log)")
        shutil.copyfile(folder / "model.rknn", stage_dir / "model.rknn")
        if result.get("quantization"):  # the quantization the toolkit chose: the INT8 emulation follows it
            shutil.copyfile(folder / result["quantization"], stage_dir / int8emu.TABLE)
        sim: dict[str, dict[str, np.ndarray]] = {}
        for name, files in result["simulator_outputs"].items():
            sim[name] = {out: np.load(folder / f, allow_pickle=False) for out, f in zip(model.output_names, files)}
        environment = published.environment(run.env, run.argv_prefix, folder, tk.python)
        environment["interpreter"] = result.get("environment")  # the worker's own Python and library versions
        return environment, sim, run.log


class ReplaceRefused(InputError):
    """The build folder holds a build of another fingerprint and --force was not given (exit 2)."""


def _existing(final: Path) -> tuple[str | None, str | None]:
    """The (build, model) fingerprints of the build already in `final`, (None, None) when there is none
    (or its manifest is unreadable: nothing to protect that a deploy could use)."""
    try:  # the one reader: a FIFO, a huge file or a malformed manifest there is no build to protect
        doc = read_manifest(final / "manifest.json")
    except (OSError, RkdetError):
        return None, None
    return doc.fingerprint, doc.model_fingerprint


def check_replace(final: Path, fingerprint: str, force: bool, *, model: bool = False) -> None:
    """Refuse (one line naming both fingerprints, exit 2) to replace a build of another fingerprint unless
    --force; the same fingerprint is replaced silently. `model`: compare model fingerprints (known before
    the toolkit runs, so a refusal costs no build)."""
    old_fp, old_model = _existing(final)
    old = old_model if model else old_fp
    if force or old is None or old == fingerprint:
        return
    what = "model fingerprint" if model else "fingerprint"
    raise ReplaceRefused(f"{final}: holds build {(old_fp or '?')[:16]} ({what} {old[:16]}); this build's {what} is "
                         f"{fingerprint[:16]}: replacing it would lose that build; pass --force to replace it, or "
                         "--out (or a config `name`) for a folder of its own")


def install_build(stage_dir: Path, final: Path) -> None:
    """Rename the finished staging folder into place, replacing an older build whole (convert and the
    search's passing variant): the one folder swap, `rkdet.records.io.swap_folder`."""
    swap_folder(stage_dir, final)


def failed_fidelity_path(final: Path) -> Path:
    """Where a build that failed a fidelity gate keeps its fidelity.json, with or without --keep-failed:
    beside the build folder, `<out>/<name>-<platform>.failed-fidelity.json` (README "Your own model")."""
    return final.with_name(f"{final.name}.failed-fidelity.json")


def keep_failed_fidelity(path: Path, fid: FidelityRecord) -> str:
    """Write a failed build's fidelity.json beside its build folder through the one atomic writer, only
    where `check_may_write` allows (never through a symlink, never into a FIFO or device); what was done,
    for the error's details. A refused place never changes the gate's exit code."""
    try:
        check_may_write(path, "failed build's fidelity.json")
        write_fidelity(path, fid)
    except (InputError, OSError) as why:
        return f"fidelity.json not kept ({why})"
    return f"fidelity.json kept: {path}"


def _write_failed(stage_dir: Path, doc: Manifest, record: GateRecord) -> None:
    """A failed build's manifest says so (`gates`, rkdet.records.gates): deploy refuses it unless allowed."""
    doc = doc.replace(gates=record)
    manifest.write_manifest(stage_dir / "manifest.json", doc)
    if not (stage_dir / "selfcheck.json").exists():  # so --allow-failed-build --install-selfcheck can run it
        write_selfcheck_bundle(stage_dir, doc)


def build_platform(cfg: RkdetConfig, platform: str, model: PreparedModel, cal: Materialized, gold: Materialized,
                   out: Path, verify: bool, progress: Log, keep_failed: bool = False,
                   tk: Toolkit | None = None, session: ToolkitSession | None = None, force: bool = True,
                   watch: BuildWatch | None = None) -> BuildResult:
    tk = tk or find_toolkit(platform, cfg)
    key = manifest.folder_key(cfg, platform, cal.files, gold.files, tk)
    identity = model_identity(cfg, platform, model, cal, tk)  # the model fingerprint (rkdet.convert.identity)
    session = session or ToolkitSession(key, tk.python, tk.worker)
    final = out / f"{cfg.name}-{platform}"
    try:
        check_replace(final, identity.fingerprint, force, model=True)  # before minutes of toolkit work
        stage_dir = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=out))
    except BaseException:
        session.close()
        raise
    umask = os.umask(0)
    os.umask(umask)
    stage_dir.chmod(0o777 & ~umask)  # mkdtemp makes it 0700; the build folder is for everyone the umask allows
    warnings: list[str] = list(model.warnings)  # a failed build carries them too (ConversionError.warnings)
    try:
        progress(f"{platform}: building with {tk.name} {tk.version} (hermetic subprocess)")
        # The build is pinned to one CPU; the FP32 reference needs none of it, so it runs meanwhile.
        with ThreadPoolExecutor(max_workers=1) as pool:
            reference = pool.submit(golden.onnxruntime_reference, model.onnx_bytes, gold.tensors, model.input_name,
                                    cfg.preprocess.mean, cfg.preprocess.std)
            environment, sim, log = _run_toolkit(tk, cfg, platform, model, cal, gold, session, stage_dir,
                                                 identity.fingerprint, watch)
            ref, ref_detail = reference.result()
        declared = cfg.decision.outputs if cfg.decision else None
        decided = detect_layout(list(zip(model.output_names, model.output_shapes)), declared=declared).kind != "none"
        log_report = toolkit_log.classify(log, cfg.toolkit.accept_errors, decisions=decided)
        warnings += [line] if (line := log_report.summary()) else []
        toolkit_log.gate(log_report, platform)
        (stage_dir / "model.onnx").write_bytes(model.onnx_bytes)
        _, _, h, w = model.input_shape_nchw
        # rkdet-run names outputs from it (RKNNLite cannot)
        write_model_io(stage_dir / MODEL_IO, ModelIo.image(model.input_name, h, w, model.output_names))
        progress(f"{platform}: golden references (onnxruntime FP32{', RKNN simulator' if sim else ''})")
        gold_inputs = {}
        for f in gold.files:
            _save(stage_dir / "golden" / "inputs" / f"{f.name}.npy", gold.tensors[f.name])
            gold_inputs[f.name] = (f"{f.name}.npy", manifest.sha256_file(stage_dir / "golden" / "inputs" / f"{f.name}.npy"),
                                   gold.tensors[f.name])
        onnx_sha = manifest.sha256_bytes(model.onnx_bytes)
        rknn_sha = manifest.sha256_file(stage_dir / "model.rknn")
        golden_hashes = {"onnx-fp32": golden.write_result_set(
            stage_dir / "golden" / "onnx-fp32", backend="onnxruntime", backend_detail=ref_detail,
            model_path="model.onnx", model_sha256=onnx_sha, inputs=gold_inputs, outputs=ref,
            output_names=model.output_names)}
        fid, fidelity_line = None, None
        if sim:
            golden_hashes["simulator"] = golden.write_result_set(
                stage_dir / "golden" / "simulator", backend="rknn-simulator",
                backend_detail=f"{tk.name} {tk.version} simulator (x86_64, not an NPU)", model_path="model.rknn",
                model_sha256=rknn_sha, inputs=gold_inputs, outputs=sim, output_names=model.output_names)
            from rkdet.convert.rknn_file import read_rknn

            header = manifest.rknn_header(read_rknn(stage_dir / "model.rknn"))
            report = fidelity.measure(sim, ref, model.output_names, model.output_shapes, model.prepare, cfg.fidelity,
                                      header.to_json()["outputs"], input_hw=tuple(model.input_shape_nchw[2:]),
                                      declared=declared)
            fid = report.to_json()
            write_fidelity(stage_dir / FIDELITY, report.record())
            fidelity_line = fidelity.summary_line(report, platform)
            try:
                warnings += fidelity.gate(report, platform, fidelity.settings_used(cfg))
            except FidelityGateError as err:  # a failed build kept (--keep-failed, --search) says what it was
                kept = keep_failed_fidelity(failed_fidelity_path(final), report.record())  # kept even without --keep-failed
                doc = manifest.build_manifest(cfg, platform, model, cal, gold, identity, stage_dir, golden_hashes,
                                              fid, environment, log_report.to_json())
                _write_failed(stage_dir, doc, GateRecord(False, err.gate or "fidelity", err.subject, str(err)))
                write_resolved_config(stage_dir / RESOLVED_CONFIG, published.config_dict(cfg))
                err.details = (*err.details, f"{platform}: {kept}")
                raise
        else:
            warnings.append(f"{platform}: {tk.name} has no simulator for this platform; golden holds FP32 references only")
        doc = manifest.build_manifest(cfg, platform, model, cal, gold, identity, stage_dir, golden_hashes,
                                      fid, environment, log_report.to_json())
        doc = doc.replace(gates=PASSED, int8_emulation=int8emu.write(stage_dir, model.onnx_bytes, f"{tk.name} {tk.version}"))
        try:  # a layer named in quantize.float_layers that produces an output leaves that output float16, on purpose
            fidelity.quantization_gate(doc.rknn.header.to_json(), cfg.quantize.dtype,
                                       cfg.quantize.enabled and not cfg.quantize.force_fp16, platform,
                                       [*cfg.quantize.float_outputs, *cfg.quantize.float_layers])
        except ConversionError as err:
            _write_failed(stage_dir, doc, GateRecord(False, "quantization", None, str(err)))
            raise
        verify_report = None
        if verify:
            progress(f"{platform}: --verify: rebuilding to check reproducibility")
            verify_report = _verify(cfg, platform, model, cal, gold, tk, identity, key, stage_dir, doc,
                                    golden_hashes)
            (stage_dir / "verify.json").write_text(json.dumps(verify_report, indent=2, sort_keys=True) + "\n")
        manifest.write_manifest(stage_dir / "manifest.json", doc)
        write_selfcheck_bundle(stage_dir, doc)  # selfcheck.json: check before you serve (docs/SELFCHECK.md)
        write_resolved_config(stage_dir / RESOLVED_CONFIG, published.config_dict(cfg))
        if verify_report and not verify_report["fingerprint_identical"]:
            message = (f"{platform}: --verify: a second identical build has fingerprint "
                       f"{verify_report['second_fingerprint'][:16]} != {doc.fingerprint[:16]}: "
                       "the build is not reproducible (see verify.json)")
            _write_failed(stage_dir, doc, GateRecord(False, "verify", None, message))
            raise ConversionError(message)
        check_replace(final, doc.fingerprint, force)
        install_build(stage_dir, final)
        return BuildResult(platform, final, doc.fingerprint, rknn_sha, warnings, verify_report, fidelity_line)
    except BaseException as exc:
        session.close()
        if isinstance(exc, ConversionError) and not exc.warnings:
            exc.warnings = tuple(warnings)
        if keep_failed and stage_dir.exists() and not isinstance(exc, ReplaceRefused):
            failed = out / f"{final.name}.failed"
            try:
                install_build(stage_dir, failed)  # an older .failed folder is replaced whole
            except (InputError, OSError) as why:  # e.g. a symlink there: the build's own error stays the answer
                shutil.rmtree(stage_dir, ignore_errors=True)
                progress(f"{platform}: --keep-failed: the failed build was not kept ({why})")
        else:
            shutil.rmtree(stage_dir, ignore_errors=True)
        raise


def _verify(cfg: RkdetConfig, platform: str, model: PreparedModel, cal: Materialized, gold: Materialized,
            tk: Toolkit, identity: ModelIdentity, key: str, stage_dir: Path, doc: Manifest, golden_hashes: dict) -> dict:
    """Rebuild in a fresh hermetic folder; report byte identity and fingerprint identity separately."""
    second = Path(tempfile.mkdtemp(prefix=".verify-", dir=stage_dir.parent))
    try:
        _, sim2, _ = _run_toolkit(tk, cfg, platform, model, cal, gold, ToolkitSession(key, tk.python, tk.worker),
                                  second, identity.fingerprint)
        rknn2 = second / "model.rknn"
        from rkdet.convert.rknn_file import compare_rknn, read_rknn

        diff = compare_rknn(read_rknn(stage_dir / "model.rknn"), read_rknn(rknn2))
        content2 = manifest.rknn_content_fingerprint(rknn2)
        sim_hashes2 = {n: {o: golden.output_hash(a) for o, a in outs.items()} for n, outs in sim2.items()}
        fp2 = build_fingerprint(identity.fingerprint, golden_records(gold), content2, sim_hashes2 or None)
        bytes_same = (stage_dir / "model.rknn").read_bytes() == rknn2.read_bytes()
        return {
            "rknn_bytes_identical": bytes_same,
            "rknn_sha256": [doc.rknn.sha256, manifest.sha256_file(rknn2)],
            "content_fingerprint_identical": content2 == doc.rknn.content_fingerprint,
            "simulator_outputs_identical": sim_hashes2 == golden_hashes.get("simulator", {}),
            "fingerprint_identical": fp2 == doc.fingerprint,
            "differing_sections": [str(x) for x in diff.differing_sections],
            "differing_stable_sections": [str(x) for x in diff.differing_stable_sections],
            "second_fingerprint": fp2,
        }
    finally:
        shutil.rmtree(second, ignore_errors=True)


def convert(cfg: RkdetConfig, out: Path, platforms: list[str] | None = None, verify: bool = False,
            progress: Log = lambda msg: None, keep_failed: bool = False, force: bool = True,
            watch: BuildWatch | None = None) -> list[BuildResult]:
    """Convert for every configured (or given) platform; returns one result per platform. `force=False`
    (the CLI without --force) refuses to replace a build folder holding another fingerprint. `watch` reports
    the toolkit's own progress while it builds and stops a build at its deadline (the search's budget)."""
    targets = platforms or cfg.target.platforms
    check_writable(out)
    toolkits = {p: find_toolkit(p, cfg) for p in targets}  # a missing toolkit fails before any heavy work
    require_onnx_file(Path(cfg.model.onnx))  # hashed below, before the graph is prepared
    cal_files = list_images(cfg.quantize.dataset, "quantize.dataset", cfg.quantize.max_images)
    gold_files = list_images(cfg.golden.inputs, "golden.inputs", cfg.golden.max_images)
    skipped = [f"{key} {folder}: {', '.join(names)}" for key, folder in
               (("quantize.dataset", cfg.quantize.dataset), ("golden.inputs", cfg.golden.inputs))
               if (names := non_images(folder))]
    notes = ([f"not images, not read ({', '.join(IMAGE_SUFFIXES)} only): " + "; ".join(skipped)] if skipped else [])
    overlap = {f.sha256 for f in cal_files} & {f.sha256 for f in gold_files}
    if overlap:
        names = sorted(f.path.name for f in gold_files if f.sha256 in overlap)
        raise InputError(f"{cfg.golden.inputs}: golden inputs must be held out of calibration; also in "
                         f"quantize.dataset: {', '.join(names)}")
    first, tk = targets[0], toolkits[targets[0]]
    # The first build's worker starts now and imports the toolkit while the model and images are prepared.
    early = ToolkitSession(manifest.folder_key(cfg, first, cal_files, gold_files, tk), tk.python, tk.worker)
    try:
        progress("checking the ONNX model and preparing its graph")
        model = prepare_model(cfg.model)
        unknown = [o for o in cfg.quantize.float_outputs if o not in model.output_names]
        if unknown:
            raise InputError(f"quantize.float_outputs names {', '.join(map(repr, unknown))}, not an output of the "
                             f"prepared model (outputs: {', '.join(model.output_names)})")
        if cfg.decision:  # a rule naming no output, or an axis/channel it lacks: one line before the toolkit runs
            detect_layout(list(zip(model.output_names, model.output_shapes)), declared=cfg.decision.outputs)
        progress(f"preprocessing {len(cal_files)} calibration and {len(gold_files)} golden images")
        cal = materialize(cal_files, model, cfg)
        gold = materialize(gold_files, model, cfg)
        results = [build_platform(cfg, p, model, cal, gold, out, verify, progress, keep_failed, toolkits[p],
                                  early if p == first else None, force, watch) for p in targets]
        results[0].warnings[:0] = notes  # about the inputs, not a platform: said once
        return results
    finally:
        early.close()
