"""Run one model (the build's own, or a cut) on the board with rkdet-run and pull its result set.

Only the one-board functions are used: `transfer.push`, `pull.pull` and `conn.run` over the command's
one connection. Remote layout under `<workdir>/bisect/<fingerprint16>/`: `inputs/` (the build's golden
inputs, pushed once), `<tag>/model.rknn|model.io.json[|model.onnx|model.emu.json]` (one folder per model;
unchanged files are not sent again), `runs/<tag>-<mask>/` (the result, replaced on every run). With pinning (the config's `board.pin`, as
deploy), every run is deploy's pinned-run recipe (rkdet.deploy.pinned_run.pinned_command, with the NPU
backend's runner from rkdet.backends): run-pinned.sh pins, runs, restores (also on a dropped link).
The emulated runtime (the rkdet emulator's test double) also gets the model's ONNX and its input
normalisation, as deploy gives it; a real board never gets them.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from rkdet.backends.descriptor import Backend
from rkdet.backends.emulator_stage import push_sidecar
from rkdet.backends.registry import REGISTRY, backend, default
from rkdet.boardinfo.remote_scripts import SESSION_ENV, is_emulated_runtime
from rkdet.backends.emulator_stage import push_int8_emulation
from rkdet.deploy.pinned_run import pinned_command, pinned_env
from rkdet.deploy.pulled import pull_noted
from rkdet.link.shell import FILES_S
from rkdet.link.ssh import BoardConnection
from rkdet.link.transfer import push
from rkdet.records.build_files import stage_golden_inputs
from rkdet.deploy.settings import RunSettings
from rkdet.diff.resultset import ResultSetDir
from rkdet.errors import BoardError
from rkdet.onboard import program
from rkdet.onboard.backend_table import DEFAULT_BACKEND
from rkdet.records.manifest import Manifest



@dataclass
class BoardResult:
    """One pulled run: outputs per (input, run) in the model's output order, and how the board ran it."""

    outputs: dict[tuple[str, int], dict[str, np.ndarray]]
    emulated: bool
    emulates_npu: bool
    board_s: float
    backend: str = DEFAULT_BACKEND  # run.json's: which rule judges its outputs (rkdet.backends)

    def runs(self, input_name: str) -> list[dict[str, np.ndarray]]:
        found = sorted((r, o) for (i, r), o in self.outputs.items() if i == input_name)
        return [o for _, o in found]

    @property
    def inputs(self) -> list[str]:
        return sorted({i for i, _ in self.outputs})


@dataclass
class BoardRunner:
    """Pushes and runs models on one open connection; counts what it did. How it runs them (repeats,
    timeout, pinning, sudo, work and state dirs) is deploy's `RunSettings`, with `workdir` (and, when
    pinned, `state_dir`) already resolved on the board."""

    conn: BoardConnection
    build: Path
    manifest: Manifest  # the build's (rkdet.records.manifest)
    local: Path  # where pulled result sets go
    settings: RunSettings  # pin: every run goes through run-pinned.sh (pin, run, restore)
    runs: int = 0
    seconds: float = 0.0
    _emulated: bool | None = None
    _pushed_inputs: bool = False
    notes: list[str] = field(default_factory=list)  # warnings for the user: what a pull survived

    @property
    def workdir(self) -> str:
        assert self.settings.workdir is not None, "BoardRunner needs the resolved work dir"
        return self.settings.workdir

    @property
    def fingerprint(self) -> str:
        return self.manifest.fingerprint

    @property
    def base(self) -> str:
        return f"{self.workdir}/bisect/{self.fingerprint[:16]}"

    @property
    def backend(self) -> Backend:
        """The NPU backend the cuts (.rknn files) run with: the settings' when it takes a core mask, else
        the default one (a CPU backend has no NPU to bisect)."""
        chosen = backend(self.settings.backend)
        return chosen if chosen.takes_core_mask else default()

    def emulated_runtime(self) -> bool:
        """True when the board's runtime declares itself a test double (as deploy's probe asks)."""
        if self._emulated is None:
            self._emulated = self.backend.emulated_double and is_emulated_runtime(self.conn)
        return self._emulated

    def pull_result(self, remote: str, local: Path) -> None:
        """A run's result set, verified; what the pull survived joins `notes` (said as warnings, as deploy's)."""
        pull_noted(self.conn, remote, local, self.notes)

    def run(self, model_dir: Path, tag: str, core_mask: str) -> BoardResult:
        """Push `model_dir` (model.rknn, model.io.json, model.onnx) and the golden inputs, run, pull."""
        conn, s = self.conn, self.settings
        desc = self.backend
        started = time.monotonic()
        remote_model = f"{self.base}/{tag}"
        program_path = f"{self.workdir}/bisect/{program.PROGRAM}"
        with tempfile.TemporaryDirectory(prefix="rkdet-onboard-") as tmp:  # the on-board program: one zipapp
            push(conn, Path(program.build(tmp)), program_path)
        if not self._pushed_inputs:
            with tempfile.TemporaryDirectory(prefix="rkdet-bisect-") as tmp:  # the checked copy, never the folder
                inputs = stage_golden_inputs(self.build, self.manifest, Path(tmp) / "inputs")
                push(conn, inputs, f"{self.base}/inputs")
            self._pushed_inputs = True
        emulated = self.emulated_runtime()
        push(conn, model_dir / desc.model_file, f"{remote_model}/{desc.model_file}")
        push(conn, model_dir / "model.io.json", f"{remote_model}/model.io.json")
        if emulated:  # the emulated runtime double computes the cut's ONNX; a real board never gets it
            push(conn, model_dir / "model.onnx", f"{remote_model}/model.onnx")
            _, int8emu = push_int8_emulation(conn, model_dir, remote_model)  # the INT8 emulation (of the cut)
            push_sidecar(conn, self.manifest.need_fed_input(self.build / "manifest.json"), remote_model,
                         int8emu=int8emu, cut=(model_dir / "cut.json").is_file())  # a fault past a cut's end: no error
        out = f"{self.base}/runs/{tag}-{core_mask}"
        conn.run(["rm", "-rf", "--", out], timeout=FILES_S)
        conn.run(["mkdir", "-p", f"{self.base}/runs"], timeout=FILES_S)
        run_settings = replace(s, backend=desc.name)
        argv = pinned_command(program_path, f"{self.workdir}/scripts", run_settings, f"{remote_model}/{desc.model_file}",
                              f"{self.base}/inputs", out, core_mask=core_mask, warmup=0, snapshot_every=0,
                              affinity=False)
        # the same pinned profile as deploy's runs, restored after each run; a test fault of the emulated runtime
        env = pinned_env(run_settings, self.workdir, s.state_dir or "") if s.pin else (
            {"RKDET_EMU_FAULT": s.fault} if s.fault else {})
        sudo = s.sudo and s.pin
        res = conn.run(argv, check=False, timeout=s.timeout, sudo=sudo,
                       env=env or None, keep_env=SESSION_ENV if sudo else ())
        if res.rc == 125 and s.pin:
            raise BoardError(f"{conn.target.label}: run-pinned.sh exited 125: pin refused (nothing ran) or restore "
                             f"failed; check with `rkdet board info`, repair with `rkdet board restore`")
        if res.rc not in (0, 1):  # 1: complete, but runs of an input differ (what run0 looks for)
            said = [ln for ln in (res.err + res.out).splitlines() if ln.strip()]
            tail = ([ln for ln in said if ln.startswith("rkdet-run")] or said or ["no output"])[-1][:200]
            raise BoardError(f"{conn.target.label}: rkdet-run of {tag} exited {res.rc}: {tail}")
        local = self.local / f"{tag}-{core_mask}"
        self.pull_result(out, local)
        result = read_result(local)
        result.board_s = time.monotonic() - started
        self.runs += 1
        self.seconds += result.board_s
        return result


def read_result(folder: Path) -> BoardResult:
    """A pulled result set, checked by the diff's loader (hashes, run order)."""
    src = ResultSetDir(folder)
    outputs: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    for rec in src.records():
        outputs[(rec.input, rec.run)] = {ref.name: src.load_fresh(ref) for ref in rec.outputs}
    info = src.run_info
    return BoardResult(outputs, info.emulated is True, info.emulates_npu is True, 0.0,
                       info.backend if info.backend in REGISTRY else DEFAULT_BACKEND)
