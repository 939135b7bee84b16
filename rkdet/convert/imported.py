"""`rkdet import-rknn`: a build folder from a `.rknn` made elsewhere (no ONNX, no calibration set).

Why: many deployed models exist only as `.rknn` (model zoos, vendor deliveries, last year's build).
Whether such a file gives the same output on every run, core, board and runtime needs no ONNX; only
the *agrees with FP32* verdict does. So the folder this writes holds what a board run needs
(`model.rknn`, `model.io.json`, `golden/inputs`, `config.resolved.json`, `manifest.json`) and says,
typed, what it lacks: `origin: imported`, no FP32 or simulator reference, hence the *agrees* verdict
is "not applicable" (rknn-toolkit2 refuses to run a `load_rknn` model on its simulator; the import
asks the installed toolkit and records its answer). Facts are read with our own reader
(`rkdet.convert.rknn_file`); preprocessing comes from the model's metadata where it has it, else from
flags, and the manifest says which for each value.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rkdet.config import TOOLKIT2_PLATFORMS, PreprocessSection, RESOLVED_CONFIG, BoardSection, RunSection
from rkdet.convert.images import IMAGE_SUFFIXES, decode_rgb, min_side_for, preprocess
from rkdet.convert.manifest import SCHEMA, EMBED_KEY, sha256_bytes, sha256_file, rknn_header
from rkdet.convert.rknn_file import RknnFileInfo, read_rknn
from rkdet.errors import InputError
from rkdet.onboard.hashing import output_hash
from rkdet.records.io import swap_folder
from rkdet.records.manifest import FedInput, FileRef, InputRecord, Inputs, Manifest, RknnRecord, write_manifest
from rkdet.records.model_io import FILE as MODEL_IO
from rkdet.records.model_io import IoInput, ModelIo, write_model_io
from rkdet.records.resolved_config import write_resolved_config
from rkdet.tolerance import Tolerance

ORIGIN = "imported"
NOT_APPLICABLE = "not applicable"
MAX_INPUTS = 64  # golden inputs an import takes (the self-check bundle's bound too)


@dataclass(frozen=True)
class Given:
    """Preprocessing flags the user gave (None: not given)."""

    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    channel_order: Literal["rgb", "bgr"] | None = None
    resize: Literal["letterbox", "pad-right-bottom", "stretch"] = "letterbox"
    pad_value: int = 114  # the padding's value (the app's own: 114 Ultralytics, 0 many model-zoo demos)
    interpolation: Literal["linear", "nearest", "area"] = "linear"  # the resize's (cv2 INTER_*)


@dataclass(frozen=True)
class FedSpec:
    """How the board is fed: uint8 NHWC of `shape`; each value's source named."""

    name: str
    shape: tuple[int, int, int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    channel_order: str | None  # None: inputs were .npy tensors, fed as given
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportResult:
    folder: Path
    fingerprint: str
    info: RknnFileInfo
    fed: FedSpec
    reference_line: str  # what deploy will print for the agrees verdict
    inputs: int


def _metadata_norm(info: RknnFileInfo, name: str) -> tuple[list[float] | None, list[float] | None]:
    """mean/std the toolkit recorded for input `name` (build_info attrs), broadcast to 3 channels."""
    attrs = (info.build_info.get("attrs") or {}).get(name) if isinstance(info.build_info, dict) else None
    if not isinstance(attrs, dict):
        return None, None

    def three(v: Any) -> list[float] | None:
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            vals = [float(x) for x in v]
            return vals * 3 if len(vals) == 1 else vals if len(vals) == 3 else None
        return None

    return three(attrs.get("mean")), three(attrs.get("std"))


def fed_spec(info: RknnFileInfo, given: Given, npy_only: bool) -> FedSpec:
    """The model's input as the board is fed, or one line saying which preprocessing is missing."""
    where = info.path
    if len(info.inputs) != 1:
        raise InputError(f"{where}: the model has {len(info.inputs)} inputs; import-rknn takes single-input models")
    attr = info.inputs[0]
    shape = tuple(int(d) for d in attr.shape)
    if len(shape) != 4 or shape[0] != 1 or 3 not in (shape[1], shape[3]):
        raise InputError(f"{where}: input {attr.name} has shape {list(shape)}; import-rknn takes one "
                         "1x3xHxW (or 1xHxWx3) image input")
    h, w = (shape[2], shape[3]) if shape[1] == 3 else (shape[1], shape[2])
    meta_mean, meta_std = _metadata_norm(info, attr.name)
    sources = {}
    mean, std = (list(given.mean) if given.mean else None), (list(given.std) if given.std else None)
    for key, flag, meta in (("mean", mean, meta_mean), ("std", std, meta_std)):
        if flag is not None and meta is not None and [float(v) for v in flag] != meta:
            raise InputError(f"{where}: --{key} {','.join(map(str, flag))} contradicts the model's metadata "
                             f"({key} {meta}, baked into the .rknn); drop --{key}")
        sources[key] = "the model's metadata (build_info attrs)" if meta is not None else f"--{key}"
    mean, std = mean or meta_mean, std or meta_std
    missing = [k for k, v in (("mean", mean), ("std", std)) if v is None]
    if missing:
        raise InputError(f"{where}: missing preprocessing: the model's metadata has no {' or '.join(missing)} for "
                         f"input {attr.name}; give " + " and ".join(f"--{k} A,B,C" for k in missing))
    if any(s == 0 for s in std):  # type: ignore[union-attr]
        raise InputError(f"{where}: std {std} has a zero; give --std with non-zero values")
    order: str | None = given.channel_order
    if npy_only:
        sources["channel_order"] = "not used: the inputs are .npy tensors, fed as given"
        order = given.channel_order
    elif order is None:
        raise InputError(f"{where}: missing preprocessing: an .rknn does not record the channel order its "
                         "inputs are fed in; give --channel-order rgb or bgr")
    else:
        sources["channel_order"] = "--channel-order"
    sources["resize"] = (f"--resize ({given.resize}, {given.interpolation} interpolation"
                         + (f", pad {given.pad_value})" if given.resize != "stretch" else ")")
                         if not npy_only else "not used: .npy tensors (the app's own preprocessed inputs)")
    return FedSpec(attr.name, (1, h, w, 3), tuple(mean), tuple(std), order, sources)  # type: ignore[arg-type]


def _inputs(folder: Path, fed: FedSpec, given: Given) -> dict[str, np.ndarray]:
    """name -> uint8 NHWC tensor, from images (resized, ordered) or .npy (checked, as given)."""
    if not folder.is_dir():
        raise InputError(f"{folder}: --inputs is not a folder; give a folder of images or .npy tensors")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    use = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES or p.suffix.lower() == ".npy"]
    if not use:
        raise InputError(f"{folder}: no images or .npy files; put the golden inputs there")
    if len(use) > MAX_INPUTS:
        raise InputError(f"{folder}: {len(use)} inputs; import-rknn takes at most {MAX_INPUTS}")
    out: dict[str, np.ndarray] = {}
    pp = PreprocessSection(channel_order=fed.channel_order or "rgb", resize=given.resize, pad_value=given.pad_value,
                           interpolation=given.interpolation)
    for p in use:
        if p.stem in out:
            raise InputError(f"{p}: another input is also named {p.stem!r}; rename one")
        if p.suffix.lower() == ".npy":
            arr = _load_npy(p, fed.shape)
            if arr.ndim == 3:
                arr = arr[None]
            if arr.dtype != np.uint8 or tuple(arr.shape) != fed.shape:
                raise InputError(f"{p}: {arr.dtype} {list(arr.shape)}; the model is fed uint8 {list(fed.shape)} (NHWC)")
            out[p.stem] = np.ascontiguousarray(arr)
        else:
            out[p.stem] = preprocess(decode_rgb(p, min_side_for(tuple(fed.shape[1:3]))), fed.shape[1:3], pp)[0]
    return out


def _load_npy(p: Path, shape: tuple[int, ...]) -> np.ndarray:
    """A golden .npy, its header checked first: a regular file (a FIFO is refused, not waited on) that
    declares uint8 of the fed shape (or without its batch axis) and holds exactly those bytes, so a header
    claiming terabytes is one line naming the file, never an allocation."""
    from rkdet.records.io import open_regular

    want = f"the model is fed uint8 {list(shape)} (NHWC)"
    try:
        with open_regular(p) as f:
            version = np.lib.format.read_magic(f)
            declared, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                        else np.lib.format.read_array_header_2_0(f))
            if dtype != np.uint8 or tuple(declared) not in (tuple(shape), tuple(shape[1:])):
                raise InputError(f"{p}: {dtype} {list(declared)}; {want}")
            if fortran:
                raise InputError(f"{p}: a Fortran-order array; save it C-ordered with numpy.save")
            count = int(np.prod(shape))
            data = f.read(count + 1)
    except FileNotFoundError:
        raise InputError(f"{p}: vanished while it was read") from None
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{p}: not a readable .npy ({exc.__class__.__name__}); save it with numpy.save") from None
    if len(data) != count:
        raise InputError(f"{p}: holds {len(data)} data bytes, its header declares {count}; save it again with numpy.save")
    return np.frombuffer(data, dtype=np.uint8).reshape(declared).copy()


def simulator_probe(model: Path, info: RknnFileInfo) -> str:
    """Can the installed toolkit run this file on its simulator? The toolkit's own answer, one line."""
    from rkdet.convert.toolkits import installed_toolkit2

    tk = installed_toolkit2()
    if tk is None:
        return "no rknn-toolkit2 on this host to try its simulator"
    code = ("import sys\nfrom rknn.api import RKNN\nr = RKNN(verbose=False)\n"
            "if r.load_rknn(sys.argv[1]) != 0: print('RKDET load_rknn failed'); sys.exit(0)\n"
            "print('RKDET init_runtime', r.init_runtime())\n")
    with tempfile.TemporaryDirectory(prefix="rkdet-import-") as home:
        env = {"HOME": home, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONNOUSERSITE": "1"}
        try:
            proc = subprocess.run([os.path.abspath(tk.python), "-c", code, str(model.resolve())], capture_output=True, text=True, env=env,
                                  cwd=home, timeout=300, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"rknn-toolkit2 {tk.version} could not be asked ({exc.__class__.__name__})"
    said = proc.stdout + proc.stderr
    if "RKDET init_runtime 0" in said:
        return f"rknn-toolkit2 {tk.version} loads it on its simulator, but rkdet does not take a loaded model's simulator outputs as a reference"
    if "not support inference on the simulator" in said:
        return (f"rknn-toolkit2 {tk.version} loads it (load_rknn) but refuses to run a load_rknn model on its "
                "simulator (init_runtime)")
    if "RKDET load_rknn failed" in said:
        return f"rknn-toolkit2 {tk.version} cannot load it (load_rknn failed)"
    return f"rknn-toolkit2 {tk.version} could not be asked about it (exit {proc.returncode})"


def _fingerprint(info: RknnFileInfo, fed: FedSpec, tensors: dict[str, np.ndarray]) -> str:
    doc = {"origin": ORIGIN, "rknn_content": info.content_fingerprint,
           "fed_input": {"shape": list(fed.shape), "mean": list(fed.mean), "std": list(fed.std)},
           "golden": {n: output_hash(t) for n, t in sorted(tensors.items())}}
    return sha256_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


def _embedded(info: RknnFileInfo) -> str | None:
    """The rkdet-fp=… a file built by rkdet carries (the runner checks it), else None."""
    at = info.custom_string.rfind(EMBED_KEY)
    value = info.custom_string[at + len(EMBED_KEY):at + len(EMBED_KEY) + 64] if at >= 0 else ""
    return value if len(value) == 64 and all(c in "0123456789abcdef" for c in value) else None


def import_rknn(model: Path, inputs: Path, out: Path | None, given: Given, name: str | None = None,
                emulator_onnx: Path | None = None, progress: Any = None) -> ImportResult:
    """Read, check and lay out the build folder (staged beside `out`, renamed into place)."""
    say = progress or (lambda _m: None)
    info = read_rknn(model)  # encrypted / unreadable: RknnFormatError, one line, exit 2
    platform = info.target_platform
    if platform not in TOOLKIT2_PLATFORMS:
        raise InputError(f"{model}: target platform {platform!r} is unknown to rkdet (knows "
                         f"{', '.join(TOOLKIT2_PLATFORMS)}); it cannot be matched to a board")
    npy_only = inputs.is_dir() and all(p.suffix.lower() == ".npy" for p in inputs.iterdir()
                                       if p.is_file() and not p.name.startswith("."))
    fed = fed_spec(info, given, npy_only)
    tensors = _inputs(inputs, fed, given)
    name = name or model.stem
    out = out or Path("build") / f"{name}-{platform}"
    say(f"{model.name}: {platform}, rknn-toolkit2 {info.toolkit_version or '?'}, input {fed.name} "
        f"{list(info.inputs[0].shape)} {info.inputs[0].dtype}, {len(info.outputs)} output(s); {len(tensors)} golden input(s)")
    probe = simulator_probe(model, info)
    reason = f"imported .rknn: no ONNX, so no FP32 reference; simulator: {probe}"
    fingerprint = _fingerprint(info, fed, tensors)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.import-", dir=out.parent))
    try:
        shutil.copyfile(model, stage / "model.rknn")
        if read_rknn(stage / "model.rknn").file_sha256 != info.file_sha256:
            raise InputError(f"{model}: changed while it was copied; import again")
        (stage / "golden" / "inputs").mkdir(parents=True)
        records = []
        for n, t in sorted(tensors.items()):
            np.save(stage / "golden" / "inputs" / f"{n}.npy", t, allow_pickle=False)
            records.append(InputRecord(output_hash(t), name=n))
        write_model_io(stage / MODEL_IO, ModelIo((IoInput(fed.name, tuple(fed.shape)),),
                                                 tuple(o.name for o in info.outputs)))
        write_resolved_config(stage / RESOLVED_CONFIG, {
            "origin": ORIGIN, "name": name,
            "run": RunSection().model_dump(mode="json"), "board": BoardSection().model_dump(mode="json"),
            "tolerances": Tolerance().model_dump(mode="json")})
        stand_in = None
        if emulator_onnx is not None:  # TEST CONTROL: what the emulated runtime double computes, never a reference
            shutil.copyfile(emulator_onnx, stage / "emulator-stand-in.onnx")
            stand_in = {"file": "emulator-stand-in.onnx", "sha256": sha256_file(stage / "emulator-stand-in.onnx"),
                        "note": "TEST CONTROL: computed by the emulated runtime double only; not a reference"}
        doc = Manifest(
            schema=SCHEMA, origin=ORIGIN, name=name, platform=platform, fingerprint=fingerprint,
            input_fingerprint=None, embedded_fingerprint=_embedded(info),
            inputs=Inputs(rknn=FileRef(model.name, info.file_sha256), golden=tuple(records)),
            fed_input=FedInput("NHWC", tuple(fed.mean), tuple(fed.std), "uint8", tuple(fed.shape), fed.channel_order,
                               fed.sources),
            toolchain={"toolkit": {"name": "rknn-toolkit2", "version": info.toolkit_version or None,
                                   "source": "the .rknn's metadata (it was built elsewhere)"}},
            rknn=RknnRecord("model.rknn", info.file_sha256, info.file_size, info.content_fingerprint, rknn_header(info),
                            info.custom_string),
            golden_outputs={}, fidelity=None,
            reference={"agrees": NOT_APPLICABLE, "reason": reason, "simulator": probe},
            emulator_stand_in=stand_in,
            created_unix=int(os.environ["SOURCE_DATE_EPOCH"]) if "SOURCE_DATE_EPOCH" in os.environ else None)
        write_manifest(stage / "manifest.json", doc)  # the one manifest writer (rkdet.records.manifest)
        if out.exists() and (not (out / "manifest.json").is_file() or out.is_symlink()):
            raise InputError(f"{out}: exists and is not a build folder; choose another --out")
        swap_folder(stage, out)  # the one folder swap (rkdet.records.io)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return ImportResult(out, fingerprint, info, fed, f"agrees with the reference: {NOT_APPLICABLE} ({reason})",
                        len(tensors))
