"""Run one model (the build's own, or a cut) on the board with rkdet-run and pull its result set.

Only the one-board functions are used: `transfer.push`, `pull.pull` and `conn.run` over the command's
one connection. Remote layout under `<workdir>/bisect/<fingerprint16>/`: `inputs/` (the build's golden
inputs, pushed once), `<tag>/model.rknn|model.io.json[|model.onnx|model.emu.json]` (one folder per model;
unchanged files are not sent again), `runs/<tag>-<mask>/` (the result, replaced on every run). With pinning (the config's `board.pin`, as
deploy), every run goes through deploy's `run-pinned.sh`: pin, run, restore (also on a dropped link).
The emulated runtime (the rkdet emulator's test double) also gets the model's ONNX and its input
normalisation, as deploy gives it; a real board never gets them.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rkdet.boardinfo.remote_scripts import SESSION_ENV, is_emulated_runtime
from rkdet.records.manifest import INT8_EMULATION_FILE
from rkdet.link.pull import pull
from rkdet.link.shell import FILES_S
from rkdet.link.transfer import push
from rkdet.deploy.settings import RunSettings
from rkdet.diff.resultset import ResultSetDir
from rkdet.errors import BoardError
from rkdet.onboard import program
from rkdet.records.manifest import Manifest



@dataclass
class BoardResult:
    """One pulled run: outputs per (input, run) in the model's output order, and how the board ran it."""

    outputs: dict[tuple[str, int], dict[str, np.ndarray]]
    emulated: bool
    emulates_npu: bool
    board_s: float

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

    conn: object  # rkdet.link.ssh.BoardConnection
    build: Path
    manifest: Manifest  # the build's (rkdet.records.manifest)
    local: Path  # where pulled result sets go
    settings: RunSettings  # pin: every run goes through run-pinned.sh (pin, run, restore)
    runs: int = 0
    seconds: float = 0.0
    _emulated: bool | None = None
    _pushed_inputs: bool = False
    notes: list[str] = field(default_factory=list)

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

    def emulated_runtime(self) -> bool:
        """True when the board's rknnlite declares itself a test double (as deploy's probe asks)."""
        if self._emulated is None:
            self._emulated = is_emulated_runtime(self.conn)  # type: ignore[arg-type]
        return self._emulated

    def run(self, model_dir: Path, tag: str, core_mask: str) -> BoardResult:
        """Push `model_dir` (model.rknn, model.io.json, model.onnx) and the golden inputs, run, pull."""
        conn, s = self.conn, self.settings
        started = time.monotonic()
        remote_model = f"{self.base}/{tag}"
        with tempfile.TemporaryDirectory(prefix="rkdet-onboard-") as tmp:  # the on-board program: one zipapp
            push(conn, Path(program.build(tmp)), f"{self.workdir}/bisect/{program.PROGRAM}")  # type: ignore[arg-type]
        if not self._pushed_inputs:
            push(conn, self.build / "golden" / "inputs", f"{self.base}/inputs")  # type: ignore[arg-type]
            self._pushed_inputs = True
        push(conn, model_dir / "model.rknn", f"{remote_model}/model.rknn")  # type: ignore[arg-type]
        push(conn, model_dir / "model.io.json", f"{remote_model}/model.io.json")  # type: ignore[arg-type]
        if self.emulated_runtime():
            push(conn, model_dir / "model.onnx", f"{remote_model}/model.onnx")  # type: ignore[arg-type]
            fed = self.manifest.need_fed_input(self.build / "manifest.json")
            with tempfile.TemporaryDirectory(prefix="rkdet-bisect-") as tmp:
                sidecar = Path(tmp) / "model.emu.json"
                prep: dict = {"mean": list(fed.mean), "std": list(fed.std), "input_layout": "nchw",
                              "cut": (model_dir / "cut.json").is_file()}  # a fault past a cut's end is no error
                if (model_dir / INT8_EMULATION_FILE).is_file():  # the INT8 emulation (of the cut): what the NPU computes
                    push(conn, model_dir / INT8_EMULATION_FILE, f"{remote_model}/{INT8_EMULATION_FILE}")  # type: ignore[arg-type]
                    prep["int8emu"] = INT8_EMULATION_FILE
                sidecar.write_text(json.dumps(prep))
                push(conn, sidecar, f"{remote_model}/model.emu.json")  # type: ignore[arg-type]
        out = f"{self.base}/runs/{tag}-{core_mask}"
        conn.run(["rm", "-rf", "--", out], timeout=FILES_S)  # type: ignore[attr-defined]
        conn.run(["mkdir", "-p", f"{self.base}/runs"], timeout=FILES_S)  # type: ignore[attr-defined]
        argv = ["python3", f"{self.workdir}/bisect/{program.PROGRAM}", "run", "--model", f"{remote_model}/model.rknn",
                "--inputs", f"{self.base}/inputs", "--repeats", str(s.repeats), "--warmup", "0",
                "--core-mask", core_mask, "--backend", "rknnlite", "--snapshot-every", "0", "--out", out]
        env: dict[str, str] = {}
        if s.pin:  # the same pinned profile as deploy's runs; restored after each run
            argv = ["sh", f"{self.workdir}/scripts/run-pinned.sh", "--", *argv]
            env = {**s.pin_env, "RKDET_STATE_DIR": s.state_dir or "", "RKDET_WORK_DIR": self.workdir}
        sudo = s.sudo and s.pin
        res = conn.run(argv, check=False, timeout=s.timeout, sudo=sudo,  # type: ignore[attr-defined]
                       env=env or None, keep_env=SESSION_ENV if sudo else ())
        if res.rc == 125 and s.pin:
            raise BoardError(f"{conn.target.label}: run-pinned.sh exited 125: pin refused (nothing ran) or restore "  # type: ignore[attr-defined]
                             f"failed; check with `rkdet board info`, repair with `rkdet board restore`")
        if res.rc not in (0, 1):  # 1: complete, but runs of an input differ (what run0 looks for)
            said = [ln for ln in (res.err + res.out).splitlines() if ln.strip()]
            tail = ([ln for ln in said if ln.startswith("rkdet-run")] or said or ["no output"])[-1][:200]
            raise BoardError(f"{conn.target.label}: rkdet-run of {tag} exited {res.rc}: {tail}")  # type: ignore[attr-defined]
        local = self.local / f"{tag}-{core_mask}"
        pull(conn, out, local)  # type: ignore[arg-type]
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
    return BoardResult(outputs, info.emulated is True, info.emulates_npu is True, 0.0)
