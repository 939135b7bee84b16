"""Put a build's self-check on a board: the on-board program (`rkdet-onboard.pyz`) + `selfcheck.json` + the model.

Why a function of its own: `rkdet deploy --install-selfcheck` (and a serving image's provisioning)
need the same few files in one folder, verified by sha256 like every push, so that
`python3 DIR/rkdet-onboard.pyz selfcheck DIR/selfcheck.json` works on the board with nothing else installed
(docs/SELFCHECK.md has the systemd `ExecStartPre=` example).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from rkdet.backends.emulator_stage import push_int8_emulation, push_sidecar
from rkdet.backends.registry import backend as descriptor
from rkdet.link.shell import remote_command
from rkdet.link.ssh import BoardConnection
from rkdet.link.transfer import TransferStats, push
from rkdet.records.build import BuildRecord, load_build
from rkdet.errors import InputError
from rkdet.onboard import program
from rkdet.onboard.backend_table import DEFAULT_BACKEND

BUNDLE = "selfcheck.json"


@dataclass(frozen=True)
class SelfcheckInstall:
    """What was installed where, and the command that runs the check on the board."""

    remote_dir: str
    bundle: str
    model: str
    command: list[str]
    transfer: TransferStats

    @property
    def command_line(self) -> str:
        """The command, quoted for a shell or a systemd unit."""
        return remote_command(self.command)


def install_selfcheck(conn: BoardConnection, build: Path | BuildRecord, remote_dir: str, *, emulated: bool = False,
                      backend: str = DEFAULT_BACKEND, allow_failed_build: bool = False) -> SelfcheckInstall:
    """Push the self-check files of `build` (a loaded build's record, or its folder: loaded here) into
    `remote_dir` (created; unchanged files skipped).

    `emulated`: the board's rknnlite is rkdet's test double, which computes the prepared ONNX: it gets
    model.onnx and model.emu.json beside model.rknn (a real board never does). `backend="onnxruntime"`
    pushes model.onnx to check with onnxruntime instead of the NPU runtime. A build that failed a gate at
    convert (rkdet.records.gates) is refused unless `allow_failed_build`.
    """
    desc = descriptor(backend)  # InputError naming the known backends otherwise
    record = build if isinstance(build, BuildRecord) else load_build(build, complete=False)  # a broken manifest: exit 2
    build_dir, gates = record.folder, record.gates
    if not gates.passed and not allow_failed_build:
        raise InputError(gates.refusal(build_dir, "self-check install"))
    bundle = build_dir / BUNDLE
    if not bundle.is_file():
        raise InputError(f"{build_dir}: no {BUNDLE}; re-run `rkdet convert` (builds made before the self-check have none)")
    fed = record.manifest.need_fed_input(build_dir / "manifest.json")
    remote_dir = remote_dir.rstrip("/") or "/"
    files = [(bundle, BUNDLE), (build_dir / "model.io.json", "model.io.json")]
    files += [(build_dir / name, name) for name in desc.staged_models(emulated)]
    for local, name in files:
        if not local.is_file():
            raise InputError(f"{build_dir}: {local.name} missing; the build folder is incomplete, re-run rkdet convert")
    stats = TransferStats()
    with tempfile.TemporaryDirectory(prefix="rkdet-onboard-") as tmp:  # the on-board program: one zipapp
        stats.add(push(conn, Path(program.build(tmp)), f"{remote_dir}/{program.PROGRAM}"))
    for local, name in files:
        stats.add(push(conn, local, f"{remote_dir}/{name}"))
    if emulated:  # the normalisation the real .rknn has baked in, for the test double
        int8emu = None
        if desc.emulated_double:  # the emulated NPU's computation: the build's INT8 emulation
            pushed, int8emu = push_int8_emulation(conn, build_dir, remote_dir,
                                                  sha256=record.manifest.int8_emulation_sha256)
            stats.add(pushed)
        stats.add(push_sidecar(conn, fed, remote_dir, int8emu=int8emu))
    model = f"{remote_dir}/{desc.model_file}"
    command = program.argv(f"{remote_dir}/{program.PROGRAM}", "selfcheck",
                           [f"{remote_dir}/{BUNDLE}", "--model", model, "--backend", backend])
    return SelfcheckInstall(remote_dir, f"{remote_dir}/{BUNDLE}", model, command, stats)
