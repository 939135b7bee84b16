"""Staging a board for a run: the board scripts, the on-board program, the model and its inputs, pushed verified.

Why its own module: deploy, `rkdet board ...`, the demo and a fleet scheduler stage boards the same
way; unchanged files are skipped (transfer.push), and the remote inputs folder is pruned to exactly
the build's inputs, since the runner runs every file there.
"""

from __future__ import annotations

import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

from rkdet.backends.emulator_stage import push_int8_emulation, push_sidecar
from rkdet.backends.registry import backend as descriptor
from rkdet.boardinfo import scripts as board_scripts
from rkdet.records import build_files
from rkdet.records.build import BuildInfo
from rkdet.deploy.layout import RemoteLayout
from rkdet.link.shell import FILES_S
from rkdet.link.ssh import BoardConnection
from rkdet.link.transfer import TransferStats, push, push_files
from rkdet.errors import InputError
from rkdet.onboard import program



def push_scripts(conn: BoardConnection, scripts_dir: str) -> TransferStats:
    """The board scripts (probe, pin, restore, run-pinned) into `scripts_dir`."""
    return push_files(conn, [(path, f"{scripts_dir}/{path.name}") for path in board_scripts.deploy_files()])


def check_model(build: BuildInfo) -> None:
    """The build's model.rknn is the one its manifest hashed (`rknn.sha256`, streamed in 1 MiB chunks):
    a build folder is input, and a board should not be sent 2 GiB only to refuse them. A regular file
    inside the folder (a symlink or FIFO there is refused, never followed)."""
    build_files.regular_file(build.folder, "model.rknn", build.rknn_sha256, "rknn.sha256")


def build_file_set(build: BuildInfo, emulated: bool, emulate_npu: int | None = None) -> list[str]:
    """Check, before anything is sent, every file of the build folder that `push_build` sends (relative
    paths): regular files inside the folder, named by the manifest, hashed as it says where it says;
    one line naming the file, exit 2 (`rkdet.records.build_files`). Golden inputs are checked again
    by the copy `push_build` sends (`stage_golden_inputs`)."""
    folder = build.folder
    check_model(build)
    files = ["model.rknn", build_files.regular_file(folder, "model.io.json").name]
    if emulated:
        model = emulated_model(build)
        imported = build.origin == "imported"
        sha = _stand_in_sha(build) if imported else build.onnx_sha256
        files.append(build_files.regular_file(folder, model.name, sha, "emulator_stand_in.sha256" if imported
                                              else "inputs.onnx_prepared.sha256").name)
        if emulate_npu is not None and build.origin != "imported":
            files += [f"golden/simulator/{rel}" for rel in build_files.regular_tree(folder, "golden/simulator")]
    manifest = build.manifest if build.manifest is not None else BuildInfo.check(folder)
    golden = build_files.golden_inputs(folder, manifest)
    for gold in golden:
        build_files.regular_file(folder, f"golden/inputs/{gold.file}")
    return files + [f"golden/inputs/{gold.file}" for gold in golden]


def _stand_in_sha(build: BuildInfo) -> str | None:
    stand_in = (build.manifest.emulator_stand_in or {}) if build.manifest is not None else {}
    sha = stand_in.get("sha256")
    return sha if isinstance(sha, str) else None


def stage_inputs(build: BuildInfo, inputs: Path | None, dest: Path) -> Path:
    """The inputs the board runs, as a checked private copy in `dest`: the golden inputs the manifest names,
    or (`inputs`: `deploy --inputs FOLDER`) that folder's `<name>.npy` tensors, each the build's fed input
    (dtype and shape from the manifest's `fed_input`); one line, exit 2, before anything is sent."""
    if inputs is None:
        manifest = build.manifest if build.manifest is not None else BuildInfo.check(build.folder)
        return build_files.stage_golden_inputs(build.folder, manifest, dest)
    import numpy as np

    fed = build.need_fed_input()
    if fed.shape is None or fed.dtype is None:
        raise InputError(f"{build.folder}: manifest.json fed_input names no dtype and shape to check --inputs "
                         "against; re-run rkdet convert")
    folder, _ = build_files.stage_input_folder(inputs, dest, np.dtype(fed.dtype).str, tuple(fed.shape))
    return folder


def refuse_replay_with_inputs(emulate_npu: int | None, inputs: Path | None) -> None:
    """--emulator-npu replays the simulator's outputs of the GOLDEN inputs: it cannot run `--inputs`."""
    if emulate_npu is not None and inputs is not None:
        raise InputError("--emulator-npu replays the build's simulator outputs of its golden inputs; "
                         "drop it or --inputs")


def check_inputs(build: BuildInfo, inputs: Path, emulate_npu: int | None = None) -> int:
    """`deploy --inputs FOLDER` checked before any connection (staged into a private temp folder and
    dropped; push_build stages them again, from the bytes it checks then): how many inputs it holds."""
    refuse_replay_with_inputs(emulate_npu, inputs)
    with tempfile.TemporaryDirectory(prefix="rkdet-inputs-") as tmp:
        staged = stage_inputs(build, inputs, Path(tmp) / "inputs")
        return sum(1 for _ in staged.iterdir())


def push_build(conn: BoardConnection, build: BuildInfo, layout: RemoteLayout, emulated: bool, progress: bool,
               emulate_npu: int | None = None, native_runner: Path | None = None,
               inputs: Path | None = None, pushed: set[str] | None = None) -> TransferStats:
    """The on-board program (rkdet-onboard.pyz), model and inputs to the board (unchanged files skipped). The remote inputs folder ends
    up holding exactly the build's inputs: the runner runs every file there, so a stale one would be
    run and judged too. Every file is checked first (`build_file_set`), and the golden inputs the board
    gets are a checked copy of the ones the manifest names: nothing is pushed by walking the folder.
    `inputs` (`deploy --inputs`): that folder's checked tensors instead of the golden inputs.
    `pushed`: the board paths this session already sent (another backend's run of the same build): each is
    sent once, and every path sent here is added (the union of both runs' files goes once)."""
    folder = build.folder
    sent = set() if pushed is None else pushed

    def once(remote: str, send: Callable[[], TransferStats]) -> TransferStats:
        if remote in sent:
            return TransferStats()
        sent.add(remote)
        return send()

    if emulate_npu is not None and build.origin == "imported":
        raise InputError(f"{folder}: --emulator-npu replays the build's simulator outputs; an imported "
                         ".rknn has none")
    refuse_replay_with_inputs(emulate_npu, inputs)
    build_file_set(build, emulated, emulate_npu)  # before anything goes to the board: one line, exit 2
    stats = TransferStats()
    with tempfile.TemporaryDirectory(prefix="rkdet-deploy-") as tmp:  # the build folder stays read-only
        staged = stage_inputs(build, inputs, Path(tmp) / "inputs")
        if layout.fp32_inputs:
            fp32 = Path(tmp) / "fp32"
            fp32.mkdir()
            staged = model_inputs(staged, build, fp32)
        if native_runner is not None:  # a backend's own runner (rkdet-run-c, built by `rkdet runner build`)
            runner = native_runner
            stats.add(once(layout.runner, lambda: push(conn, runner, layout.runner)))
        else:  # the on-board program: one zipapp
            stats.add(once(layout.runner, lambda: push(conn, Path(program.build(tmp)), layout.runner)))
        model_dir = layout.model_dir
        stats.add(once(f"{model_dir}/model.rknn",
                       lambda: push(conn, folder / "model.rknn", f"{model_dir}/model.rknn", progress=progress)))
        stats.add(once(f"{model_dir}/model.io.json",
                       lambda: push(conn, folder / "model.io.json", f"{model_dir}/model.io.json")))
        if emulated and f"{model_dir}/model.onnx" not in sent:  # the emulated runtime computes the prepared ONNX;
            sent.add(f"{model_dir}/model.onnx")  # a real board never gets it (its emulator files go with it, once)
            stats.add(push(conn, emulated_model(build), f"{layout.model_dir}/model.onnx", progress=progress))
            fed = build.need_fed_input()
            npu: dict[str, Any] | None = None
            if emulate_npu is not None:  # test control: the double answers with the simulator's outputs
                golden = f"{layout.model_dir}/npu-golden"
                stats.add(push(conn, folder / "golden" / "simulator", golden, progress=progress))
                npu = {"golden": golden, "inputs": layout.inputs, "lsb_k": emulate_npu,
                       "steps": build.manifest.quant_steps if build.manifest else {}, "output": None}
            int8emu = None
            if build.origin != "imported":  # what the emulated NPU computes by default
                sha = build.manifest.int8_emulation_sha256 if build.manifest is not None else None
                emu_sent, int8emu = push_int8_emulation(conn, folder, layout.model_dir, progress, sha)
                stats.add(emu_sent)
            stats.add(push_sidecar(conn, fed, layout.model_dir, npu, int8emu=int8emu))
        if layout.inputs in sent:
            return stats
        sent.add(layout.inputs)
        stats.add(push(conn, staged, layout.inputs, progress=progress))
        keep = {p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()}
    prune_remote(conn, layout.inputs, keep)
    return stats


def emulated_model(build: BuildInfo) -> Path:
    """What the emulated runtime double computes: the prepared ONNX, or an imported build's TEST CONTROL
    stand-in (`import-rknn --emulator-onnx`); an imported build without one cannot run on the double."""
    if build.origin != "imported":
        return build.folder / "model.onnx"
    if build.emulator_onnx is None or not build.emulator_onnx.is_file():
        raise InputError(f"{build.folder}: an imported .rknn has no ONNX for the emulated runtime double to compute; "
                         "deploy it to a real board, or import it with --emulator-onnx FILE (test control)")
    return build.emulator_onnx


def model_inputs(fed_dir: Path, build: BuildInfo, dest: Path) -> Path:
    """The golden inputs as the prepared ONNX takes them (float32 NCHW, mean/std applied), for the
    onnxruntime backend: the very transform the build's FP32 golden reference was computed with,
    so a board's onnxruntime can be compared with it bit for bit. `fed_dir` is the checked copy
    (`stage_golden_inputs`), never the build folder itself."""
    import numpy as np

    from rkdet.onboard.reference import fp32_input

    fed = build.need_fed_input()
    if build.origin == "imported":
        raise InputError(f"{build.folder}: an imported .rknn has no ONNX: --backend onnxruntime needs one; use rknnlite")
    if fed.layout != "NHWC":
        raise InputError(f"{build.folder}: --backend onnxruntime needs NHWC golden inputs, "
                         f"the build has {fed.layout}")
    for src in sorted(fed_dir.glob("*.npy")):
        np.save(dest / src.name, fp32_input(np.load(src, allow_pickle=False), fed.mean, fed.std))
    return dest


def prune_remote(conn: BoardConnection, remote_dir: str, keep: set[str]) -> None:
    """Delete files under `remote_dir` whose relative path is not in `keep`."""
    listing = conn.run(["find", remote_dir, "-type", "f"], timeout=FILES_S).out.splitlines()
    prefix = remote_dir.rstrip("/") + "/"
    extra = [line for line in listing if line.startswith(prefix) and line[len(prefix):] not in keep]
    if extra:
        conn.run(["rm", "-f", "--", *extra], timeout=FILES_S)


def need_kb(build: BuildInfo, backend: str, inputs: Path | None = None) -> int:
    """Disk the board needs for this deploy (generous: model files, inputs, every output distinct);
    `inputs`: the `--inputs` folder run instead of the golden inputs."""
    folder = build.folder
    def size(p: Path) -> int:  # lstat: a symlink's target outside the folder is never looked at
        st = p.lstat()
        return st.st_size if stat.S_ISREG(st.st_mode) else 0

    sizes = sum(size(p) for p in folder.rglob("*") if "golden" not in p.relative_to(folder).parts)
    widen = 4 if descriptor(backend).fp32_input else 1  # uint8 pixels become float32
    fed = folder / "golden" / "inputs" if inputs is None else Path(inputs)
    fed_files = [p for p in fed.glob("*.npy")] if fed.is_dir() and not fed.is_symlink() else []
    sizes += widen * sum(size(p) for p in fed_files)
    outputs = 0
    for shape in build.output_shapes:
        count = 1
        for d in shape:
            count *= d
        outputs += count * 4
    fed_count = build.golden_inputs if inputs is None else len(fed_files)
    return (sizes + outputs * fed_count * 4) // 1024 + 1024
