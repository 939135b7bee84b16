"""`rkdet convert --check-against BUILD`: is a colleague's (or CI's) build the model this config makes here?

Why: the fingerprints leave the workstation out (rkdet.convert.identity), so a build made elsewhere can
be checked by making it again here. First the model identity (toolkit, target, ONNX as prepared,
calibration tensors, toolkit options) is compared without running the toolkit: a difference there is
named at once. When the identities agree, the config is rebuilt hermetically as `rkdet convert` does
(in a temporary folder, nothing installed) and the `.rknn` content, golden inputs and simulator outputs
are compared. The first difference is named by section and input; the environment (Python, torch
build, library versions) is reported but never makes two builds differ.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rkdet.config import RkdetConfig
from rkdet.convert.identity import ModelIdentity, environment, model_identity
from rkdet.convert.images import list_images
from rkdet.convert.manifest import SCHEMA
from rkdet.records.manifest import InputRecord, Manifest, read_manifest
from rkdet.convert.onnx_graph import prepare_model, require_onnx_file
from rkdet.convert.rknn_file import PROVENANCE_SECTIONS, RknnFileInfo, compare_rknn, read_rknn
from rkdet.convert.toolkits import find_toolkit
from rkdet.errors import FidelityGateError, InputError
from rkdet.log import Log
from rkdet.textsafe import plain_value

REPORT_SCHEMA = "rkdet.check/1"
_BUILD_ONLY = ("golden", "simulator", "reference", "build")  # sections outside the model and its .rknn content


@dataclass(frozen=True)
class Difference:
    """One thing that differs: the section it is in and a line naming the input (BUILD's value first)."""

    section: str  # toolkit | target | onnx | calibration | toolkit option | .rknn | golden | simulator | reference | build
    detail: str


@dataclass(frozen=True)
class CheckReport:
    """The answer: same model, or the differences in the fixed order the sections are compared."""

    build: Path
    platform: str
    differences: tuple[Difference, ...]
    model_fingerprint: tuple[str, str]  # (BUILD's, here)
    build_fingerprint: tuple[str, str | None]  # here: None when the identities differ (nothing rebuilt)
    environment: tuple[str, ...] = field(default=())  # what differs in the environment (recorded, not compared)
    references: tuple[str, ...] = field(default=())  # the onnx-fp32 references: which differ and why

    @property
    def same(self) -> bool:
        return not self.differences

    @property
    def same_model(self) -> bool:
        """The model and its .rknn content agree; only the golden data (or nothing) differs."""
        return all(d.section in _BUILD_ONLY for d in self.differences) and self.build_fingerprint[1] is not None

    def to_json(self) -> dict[str, Any]:
        return {"schema": REPORT_SCHEMA, "build": str(self.build), "platform": self.platform, "same": self.same,
                "same_model": self.same_model,
                "differences": [{"section": d.section, "detail": d.detail} for d in self.differences],
                "model_fingerprint": {"build": self.model_fingerprint[0], "here": self.model_fingerprint[1]},
                "build_fingerprint": {"build": self.build_fingerprint[0], "here": self.build_fingerprint[1]},
                "environment_differences": list(self.environment), "references": list(self.references),
                "rebuilt": self.build_fingerprint[1] is not None}


@dataclass(frozen=True)
class _Build:
    folder: Path
    manifest: Manifest
    identity: ModelIdentity
    rknn: RknnFileInfo


def read_build(folder: Path) -> _Build:
    """BUILD's manifest and model identity; anything missing or malformed is one line naming it (exit 2)."""
    hint = "pass a build folder written by rkdet convert"
    if not folder.is_dir():
        raise InputError(f"{folder}: not a build folder (no such directory); {hint}")
    path = folder / "manifest.json"
    try:
        doc = read_manifest(path)  # the one manifest reader (bounded, strict)
    except FileNotFoundError:
        raise InputError(f"{path}: missing; {hint}") from None
    except OSError as exc:
        raise InputError(f"{path}: unreadable ({exc.__class__.__name__}); {hint}") from None
    if doc.schema != SCHEMA:
        raise InputError(f"{path}: schema {str(doc.schema)[:40]!r}, not {SCHEMA!r} (only {SCHEMA} records the "
                         "model identity to check against); rebuild it with this rkdet")
    identity = ModelIdentity.from_dict(doc.model_identity, str(path))
    if doc.model_fingerprint != identity.fingerprint:
        raise InputError(f"{path}: model_fingerprint is not the hash of its model_identity (the manifest was "
                         "edited or damaged); rebuild it with rkdet convert")
    if not (folder / "model.rknn").is_file():
        raise InputError(f"{folder / 'model.rknn'}: missing; {hint}")
    rknn = read_rknn(folder / "model.rknn")  # unreadable: one line, exit 2
    if doc.rknn.content_fingerprint != rknn.content_fingerprint:
        raise InputError(f"{folder / 'model.rknn'}: not the model its manifest.json records (content fingerprint "
                         f"{rknn.content_fingerprint[:16]}, manifest says "
                         f"{str(doc.rknn.content_fingerprint)[:16]}): replaced, damaged, or "
                         "fingerprinted by another rkdet; rebuild it with rkdet convert")
    return _Build(folder, doc, identity, rknn)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _names(records: tuple[InputRecord, ...] | None) -> list[str]:
    return [str(r.file or "?") for r in records or ()]


def _at(names: list[str], i: int) -> str:
    return names[i] if i < len(names) else "?"


def _options(a: dict[str, Any], b: dict[str, Any]) -> list[Difference]:
    out = []
    for group, label in (("config", "toolkit option"), ("build", "toolkit build option")):
        ga, gb = a.get(group) or {}, b.get(group) or {}
        for key in sorted(set(ga) | set(gb)):
            if ga.get(key) != gb.get(key):
                out.append(Difference("toolkit option", f"{label} {key}: {plain_value(ga.get(key))} vs "
                                                        f"{plain_value(gb.get(key))}"))
    for key in ("do_quantization", "float_layers"):
        if a.get(key) != b.get(key):
            out.append(Difference("toolkit option", f"{key}: {plain_value(a.get(key))} vs {plain_value(b.get(key))}"))
    return out


def onnx_difference(theirs: bytes, ours: bytes) -> str | None:
    """The first graph element in which two prepared ONNX models differ (initializer, node, input or
    output, in BUILD's order), or None when it cannot be said (unparseable, or only metadata differs)."""
    import hashlib

    import onnx

    try:
        a, b = onnx.load_from_string(theirs).graph, onnx.load_from_string(ours).graph
    except Exception:  # BUILD's bytes are untrusted: any parse failure means "cannot say"
        return None
    digest = lambda proto: hashlib.sha256(proto.SerializeToString(deterministic=True)).hexdigest()  # noqa: E731
    for kind, xs, ys in (("input", a.input, b.input), ("output", a.output, b.output),
                         ("initializer", a.initializer, b.initializer)):
        theirs_by, ours_by = {x.name: digest(x) for x in xs}, {y.name: digest(y) for y in ys}
        for name in [*theirs_by, *(n for n in ours_by if n not in theirs_by)]:
            if theirs_by.get(name) != ours_by.get(name):
                where = "" if name in theirs_by and name in ours_by else (" (only in BUILD)" if name in theirs_by
                                                                          else " (only here)")
                return f"{kind} {name!r} differs{where}"
    for i, (x, y) in enumerate(zip(a.node, b.node)):
        if digest(x) != digest(y):
            return f"node {i + 1} ({x.op_type} {x.name!r}) differs"
    if len(a.node) != len(b.node):
        return f"{len(a.node)} nodes vs {len(b.node)}"
    return None


def identity_differences(build: ModelIdentity, here: ModelIdentity, build_names: list[str],
                         here_names: list[str], onnx_detail: Callable[[], str | None] = lambda: None
                         ) -> list[Difference]:
    """What differs between two model identities, in the order: toolkit, target, ONNX, calibration, options."""
    out = []
    if (build.toolkit, build.toolkit_version) != (here.toolkit, here.toolkit_version):
        out.append(Difference("toolkit", f"toolkit: {build.toolkit} {build.toolkit_version} vs "
                                         f"{here.toolkit} {here.toolkit_version}"))
    if build.platform != here.platform:
        out.append(Difference("target", f"target platform: {build.platform} vs {here.platform}"))
    if build.onnx_prepared != here.onnx_prepared:
        detail = onnx_detail()
        out.append(Difference("onnx", f"ONNX model as prepared: {detail + ', ' if detail else ''}sha256 "
                                      f"{build.onnx_prepared[:16]} vs {here.onnx_prepared[:16]}"))
    if len(build.calibration) != len(here.calibration):
        out.append(Difference("calibration", f"calibration: {len(build.calibration)} images vs {len(here.calibration)}"))
    for i, (a, b) in enumerate(zip(build.calibration, here.calibration)):
        if a != b:
            out.append(Difference("calibration", f"calibration image {i + 1} differs: {_at(build_names, i)} vs "
                                                 f"{_at(here_names, i)} (fed tensor {a[:16]} vs {b[:16]})"))
    out += _options(build.options, here.options)
    return out


def _environment_differences(build_env: Any, here: dict[str, Any]) -> tuple[str, ...]:
    """`<name> <BUILD's> vs <here>` for each recorded version that differs (the toolkit worker's own
    interpreter too, when both sides recorded it: here only after a rebuild)."""
    def flat(env: dict[str, Any]) -> dict[str, Any]:
        out = {k: env.get(k) for k in ("python", "implementation", "rkdet", "host")}
        out["CPU class"] = _obj(env.get("cpu")).get("class")
        out.update(_obj(env.get("libraries")))
        worker = _obj(_obj(env.get("hermetic")).get("interpreter"))
        out.update({f"toolkit worker {k}": v for k, v in {"python": worker.get("python"),
                                                          **_obj(worker.get("libraries"))}.items() if worker})
        return out

    a, b = flat(_obj(build_env)), flat(here)
    keys = [k for k in sorted(set(a) | set(b)) if not k.startswith("toolkit worker ") or (k in a and k in b)]
    return tuple(f"{k} {a.get(k)} vs {b.get(k)}" for k in keys if a.get(k) != b.get(k))


def _outputs_differences(build_doc: Manifest, here_doc: Manifest) -> list[Difference]:
    """Golden inputs (as fed) and simulator outputs, input by input."""
    out = []
    ga, gb = build_doc.inputs.golden, here_doc.inputs.golden
    if len(ga) != len(gb):
        out.append(Difference("golden", f"golden inputs: {len(ga)} vs {len(gb)}"))
    for i, (a, b) in enumerate(zip(ga, gb)):
        if a.tensor != b.tensor:
            out.append(Difference("golden", f"golden input {i + 1} differs: {a.file} vs {b.file}"))
    sa = _obj(_obj(build_doc.golden_outputs).get("simulator"))
    sb = _obj(_obj(here_doc.golden_outputs).get("simulator"))
    for name in sorted(set(sa) | set(sb)):
        if sa.get(name) != sb.get(name):
            a, b = _obj(sa.get(name)), _obj(sb.get(name))
            which = next((o for o in sorted(set(a) | set(b)) if a.get(o) != b.get(o)), "?")
            out.append(Difference("simulator", f"simulator output {which} of golden input {name} differs"))
    return out


def cpu_class_of(doc: Manifest) -> str | None:
    """The CPU class a build's manifest records (rkdet.onboard.reference.cpu_class), None before rkdet recorded it."""
    found = _obj(_obj(doc.environment).get("cpu")).get("class")
    return found if isinstance(found, str) else None


_MAX_REFERENCE_BYTES = 1 << 30  # one reference output read to compare numerically (BUILD is untrusted)


def _reference_array(folder: Path, digest: str) -> Any:
    """golden/onnx-fp32/outputs/<digest>.npy of a build when it is a plain file holding that very array, else None."""
    import re

    import numpy as np

    from rkdet.onboard.hashing import output_hash
    path = folder / "golden" / "onnx-fp32" / "outputs" / f"{digest}.npy"
    if not re.fullmatch(r"[0-9a-f]{64}", digest) or path.is_symlink() or not path.is_file() \
            or path.stat().st_size > _MAX_REFERENCE_BYTES:
        return None
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    return array if output_hash(np.ascontiguousarray(array)) == digest else None


def reference_differences(build: _Build, here_doc: Manifest, here_folder: Path) -> tuple[list[Difference], list[str]]:
    """The two builds' onnx-fp32 references, input by input: (differences, notes). Made on one CPU class they
    must be bit-identical (a difference is a Difference, with its likely cause); made on two classes the last
    bits of FP32 kernels differ by design (docs/FORMATS.md "CPU class"), so they are compared numerically and
    said in a note, never counted as a difference."""
    import numpy as np

    ra = _obj(_obj(build.manifest.golden_outputs).get("onnx-fp32"))
    rb = _obj(_obj(here_doc.golden_outputs).get("onnx-fp32"))
    differing = [(i, o) for i in sorted(set(ra) | set(rb)) for o in sorted(set(_obj(ra.get(i))) | set(_obj(rb.get(i))))
                 if _obj(ra.get(i)).get(o) != _obj(rb.get(i)).get(o)]
    total = sum(len(_obj(v)) for v in rb.values())
    if not differing:
        return [], [f"onnx-fp32 reference: bit-identical ({total} outputs)"] if total else []
    theirs, ours = cpu_class_of(build.manifest), cpu_class_of(here_doc)
    worst, unread = 0.0, 0
    for name, out in differing:
        a = _reference_array(build.folder, str(_obj(ra.get(name)).get(out)))
        b = _reference_array(here_folder, str(_obj(rb.get(name)).get(out)))
        if a is None or b is None or a.shape != b.shape:
            unread += 1
            continue
        worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0)))
    numeric = f"max abs difference {worst:.3g}" + (f" ({unread} not comparable: missing, altered or reshaped)"
                                                    if unread else "")
    first = f"output {differing[0][1]} of golden input {differing[0][0]}"
    if theirs and ours and theirs != ours:
        return [], [f"onnx-fp32 reference: {len(differing)} of {total} outputs differ, first {first}, as expected: "
                    f"made on CPU class {theirs!r} (BUILD) vs {ours!r} (here), whose FP32 kernels round differently "
                    f"(docs/FORMATS.md \"CPU class\"); compared numerically: {numeric}"]
    versions = [_obj(_obj(d.environment).get("libraries")).get("onnxruntime") for d in (build.manifest, here_doc)]
    why = (f"onnxruntime {versions[0]} (BUILD) vs {versions[1]} (here)" if versions[0] != versions[1] else
           "BUILD recorded no CPU class (made by an older rkdet, with other reference settings or on another CPU)"
           if theirs is None else f"same CPU class {ours!r} and onnxruntime {versions[1]}: not expected")
    return [Difference("reference", f"onnx-fp32 reference {first} differs ({len(differing)} of {total}; {why}; "
                                    f"{numeric})")], []


def _their_onnx(build: _Build, compare: Callable[[bytes], str | None]) -> str | None:
    """BUILD's prepared model.onnx, compared when it is the one its identity records (else: cannot say)."""
    import hashlib

    try:
        data = (build.folder / "model.onnx").read_bytes()
    except OSError:
        return None
    return compare(data) if hashlib.sha256(data).hexdigest() == build.identity.onnx_prepared else None


def _rebuild(cfg: RkdetConfig, platform: str, out: Path, progress: Log) -> Path:
    """Build here as `rkdet convert` does, into `out`; a build that fails a fidelity gate is still compared."""
    from rkdet.convert.pipeline import convert

    try:
        return convert(cfg, out, [platform], progress=progress, keep_failed=True)[0].folder
    except FidelityGateError:
        failed = out / f"{cfg.name}-{platform}.failed"
        if (failed / "manifest.json").is_file() and (failed / "model.rknn").is_file():
            progress(f"{platform}: the rebuild here fails a fidelity gate; comparing it anyway")
            return failed
        raise


def check_against(cfg: RkdetConfig, folder: Path, progress: Log = lambda msg: None) -> CheckReport:
    """Compare BUILD with what `cfg` builds here (for BUILD's platform)."""
    build = read_build(folder)
    platform = build.identity.platform
    tk = find_toolkit(platform, cfg)
    require_onnx_file(Path(cfg.model.onnx))
    progress("preparing the model and the calibration images as rkdet convert does")
    model = prepare_model(cfg.model)
    cal_files = list_images(cfg.quantize.dataset, "quantize.dataset", cfg.quantize.max_images)
    from rkdet.convert.pipeline import materialize

    here = model_identity(cfg, platform, model, materialize(cal_files, model, cfg), tk)
    env_diff = _environment_differences(build.manifest.environment, environment({}))
    differences = identity_differences(build.identity, here, _names(build.manifest.inputs.calibration),
                                       [f.path.name for f in cal_files],
                                       lambda: _their_onnx(build, lambda theirs: onnx_difference(theirs, model.onnx_bytes)))
    fps = (build.identity.fingerprint, here.fingerprint)
    if differences:
        return CheckReport(folder, platform, tuple(differences), fps, (build.manifest.fingerprint, None), env_diff)
    progress(f"{platform}: same model identity; rebuilding to compare the .rknn")
    tmp = Path(tempfile.mkdtemp(prefix="rkdet-check-"))
    try:
        rebuilt = _rebuild(cfg, platform, tmp, progress)
        doc = read_manifest(rebuilt / "manifest.json")
        ours, theirs = read_rknn(rebuilt / "model.rknn"), build.rknn
        if theirs.content_fingerprint != ours.content_fingerprint:
            stable = [s for s in compare_rknn(theirs, ours).differing_stable_sections if s not in PROVENANCE_SECTIONS]
            where = f".rknn section {stable[0]} differs" if stable else ".rknn content differs"
            differences.append(Difference(".rknn", f"{where} (content fingerprint {theirs.content_fingerprint[:16]} "
                                                   f"vs {ours.content_fingerprint[:16]})"))
        differences += _outputs_differences(build.manifest, doc)
        if not differences and doc.fingerprint != build.manifest.fingerprint:
            differences.append(Difference("build", f"build fingerprint {build.manifest.fingerprint[:16]} vs "
                                                   f"{doc.fingerprint[:16]}"))
        theirs_cpu, ours_cpu = cpu_class_of(build.manifest), cpu_class_of(doc)
        if differences and theirs_cpu != ours_cpu:  # the toolkit's own float work ran on another CPU class
            differences = [Difference(d.section, f"{d.detail} (BUILD made on CPU class {theirs_cpu!r}, here "
                                                  f"{ours_cpu!r}: docs/RKNN_FORMAT.md \"Across CPUs\")")
                           if d.section in (".rknn", "simulator", "build") else d for d in differences]
        ref_differences, ref_notes = reference_differences(build, doc, rebuilt)
        differences += ref_differences
        env_diff = _environment_differences(build.manifest.environment, _obj(doc.environment))
        return CheckReport(folder, platform, tuple(differences), fps, (build.manifest.fingerprint, doc.fingerprint),
                           env_diff, tuple(ref_notes))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
