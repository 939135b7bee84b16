"""`rkdet deploy`: from a converted build to a verdict about a board, in one command.

Order matters, and each step is recorded in `deploy.json` so a dropped connection can `--resume`:
preflight (probe; nothing changes on the board), push (verified by sha256, unchanged files skipped),
pin + run + restore as ONE detached board-side job (`run-pinned.sh` restores from a trap on exit,
Ctrl-C, SIGTERM and hang-up, so the board is put back even when this host disappears), then pull
the result set (distinct outputs only) and diff it run-to-run and against the golden reference.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from rkdet.board import scripts as board_scripts
from rkdet.board.preflight import BoardFit, check_board
from rkdet.board.pull import pull
from rkdet.board.ssh import BoardConnection
from rkdet.board.transfer import TransferStats, push
from rkdet.errors import EXIT_DIFFERENT, EXIT_OK, BoardError, InputError, RkdetError
from rkdet.runner import write_atomic
from rkdet.snapshots import Snapshot, SnapshotError, read_snapshots
from rkdet.tolerance import Tolerance

RUNNER = Path(__file__).resolve().parents[1] / "runner.py"
DEPLOY_SCHEMA = "rkdet.deploy/1"
Log = Callable[[str], None]


@dataclass(frozen=True)
class RunSettings:
    """How the board runs the model; defaults come from the config's `run` and `board` sections."""

    repeats: int = 10
    warmup: int = 2
    core_mask: str = "auto"
    backend: str = "rknnlite"
    snapshot_every: int = 5
    cpu_affinity: tuple[int, ...] | None = None
    pin: bool = True
    pin_env: dict[str, str] = field(default_factory=dict)
    sudo: bool = False
    workdir: str | None = None
    state_dir: str | None = None
    keep: bool = False
    fault: str | None = None  # TEST CONTROL for the emulated runtime (RKDET_EMU_FAULT), never on real boards
    emulate_npu: int | None = None  # TEST CONTROL: the emulated runtime's NPU mode, K elements one LSB off
    timeout: float = 3600.0
    tolerances: dict[str, Any] = field(default_factory=dict)


@dataclass
class DeployOutcome:
    """What deploy did and found; `exit_code` is the command's."""

    folder: Path
    exit_code: int
    verdict: str
    emulated: bool
    transfer: TransferStats
    restored: bool | None
    warnings: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)
    verdict_lines: list[str] = field(default_factory=list)  # "repeatable: …", "agrees with the reference: …"


@contextmanager
def _progress_bar(enabled: bool, total: int) -> Iterator[Callable[[int], None] | None]:
    """A live bar of inferences done on a terminal; None (plain log lines) otherwise."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("inference"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("run", total=total)
        yield lambda done: bar.update(task, completed=done)


def pin_env_from_config(board_section: Any) -> dict[str, str]:
    """pin.sh settings (environment variables) from the config's `board` section."""
    env = {
        "RKDET_CPU_GOVERNOR": board_section.cpu_governor,
        "RKDET_NPU_FREQ": str(board_section.npu_freq_hz or "max"),
        "RKDET_GPU_FREQ": str(board_section.gpu_freq_hz or "max"),
        "RKDET_DDR_FREQ": str(board_section.ddr_freq_hz or "max"),
        "RKDET_COMPACTION": "0" if board_section.compaction_off else "keep",
        "RKDET_THP": "never" if board_section.thp_never else "keep",
        "RKDET_CPUIDLE_DEEP": "disable" if board_section.cpuidle_deep_off else "keep",
    }
    if board_section.cpu_freq_khz:
        env["RKDET_CPU_FREQ"] = str(board_section.cpu_freq_khz)
    return env


def board_label(conn_label: str) -> str:
    """A folder-safe name for the board (`user@host:port` -> `host_port`)."""
    host = conn_label.split("@")[-1]
    return re.sub(r"[^A-Za-z0-9._-]", "_", host)


def load_build(build: Path) -> dict[str, Any]:
    manifest = build / "manifest.json"
    try:
        doc = json.loads(manifest.read_text())
    except FileNotFoundError:
        raise InputError(f"{build}: no manifest.json; run `rkdet convert` first or pass --build with a build "
                         "folder") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{manifest}: unreadable manifest ({exc}); re-run rkdet convert") from None
    for name in ("model.rknn", "model.io.json", "golden/inputs"):
        if not (build / name).exists():
            raise InputError(f"{build}: {name} missing; the build folder is incomplete, re-run rkdet convert")
    return doc


def _write_json(path: Path, obj: Any, mode: int = 0o644) -> None:
    write_atomic(str(path), json.dumps(obj, indent=2, sort_keys=True) + "\n", perms=mode)


# What a published run folder must not hold (user names, host and board paths) but --resume needs:
# kept in a private file of the user who deployed, one per run id (docs/FORMATS.md).
PRIVATE_SCHEMA = "rkdet.deploy-private/1"
PRIVATE_KEYS = ("board", "build", "remote", "job_env", "reference")
_PATH_ENV = ("RKDET_STATE_DIR", "RKDET_WORK_DIR")


def private_dir() -> Path:
    """`$XDG_STATE_HOME/rkdet/deploys` (default `~/.local/state/rkdet/deploys`)."""
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "rkdet" / "deploys"


def private_record_path(run_id: str) -> Path:
    if not re.fullmatch(r"[0-9A-Za-z-]+", run_id or ""):
        raise InputError(f"run id {run_id!r} is not one rkdet deploy makes")
    return private_dir() / f"{run_id}.json"


def load_record(folder: Path) -> dict[str, Any]:
    """A run's deploy.json merged with its private part (what --resume needs)."""
    try:
        record = json.loads((folder / "deploy.json").read_text())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder / 'deploy.json'}: unreadable ({exc})") from None
    path = private_record_path(str(record.get("run_id")))
    try:
        private = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{folder}: its private resume data {path} is missing; a run can be resumed only by the "
                         "user (and machine) that started it") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable ({exc})") from None
    record.update({k: private[k] for k in PRIVATE_KEYS if k in private})
    return record


def _remote_layout(workdir: str, fingerprint: str, run_id: str, backend: str = "rknnlite") -> dict[str, str]:
    fp = fingerprint[:16]
    fed = "" if backend == "rknnlite" else "-fp32"  # onnxruntime takes the model's float input, not the NPU's
    return {
        "workdir": workdir,
        "scripts": f"{workdir}/scripts",
        "runner": f"{workdir}/rkdet-run.py",
        "model_dir": f"{workdir}/models/{fp}",
        "inputs": f"{workdir}/inputs/{fp}{fed}",
        "run_dir": f"{workdir}/runs/{run_id}",
        "result": f"{workdir}/runs/{run_id}/result",
        "pidfile": f"{workdir}/runs/{run_id}/job.pid",
        "logfile": f"{workdir}/runs/{run_id}/job.log",
    }


def _is_emulated_runtime(conn: BoardConnection) -> bool:
    """True when the board's rknnlite declares itself a test double (the rkdet emulator's)."""
    probe = "import rknnlite.api as a; print(bool(getattr(a, 'RKDET_EMULATED', '')))"
    res = conn.run(["python3", "-c", probe], check=False, timeout=60)
    return res.rc == 0 and res.out.strip() == "True"


# Session variables board-side work must keep through `sudo` (which resets the environment): above all
# RKDET_ROOT, without which a script under sudo on an emulated board would address the host's real /sys.
SESSION_ENV = ("RKDET_ROOT", "PYTHONPATH", "PATH")


def run_board_script(conn: BoardConnection, name: str, scripts_dir: str, env: dict[str, str],
                     sudo: bool) -> tuple[int, list[dict[str, Any]]]:
    """Run one board script (quoted, env applied after sudo); return its exit code and JSON records."""
    board_scripts.check_board_env(env)
    res = conn.run(["sh", f"{scripts_dir}/{name}.sh"], check=False, sudo=sudo, env=env,
                   keep_env=SESSION_ENV if sudo else ())
    records = board_scripts.parse_records(res.out)
    if sudo and res.rc != 0 and not records and conn.sudo_wants_password(res):  # the script never started
        raise BoardError(conn.sudo_password_message())
    return res.rc, records


def probe_board(conn: BoardConnection, scripts_dir: str, env: dict[str, str], sudo: bool) -> board_scripts.ProbeReport:
    rc, records = run_board_script(conn, "probe", scripts_dir, env, sudo)
    report = parse_probe_of(conn.target.label, records)
    if rc != 0 or not report.ok:
        report.raise_for_status(conn.target.label)
    return report


def parse_probe_of(label: str, records: list[dict[str, Any]]) -> board_scripts.ProbeReport:
    """probe.sh's report; a malformed record is the board's fault: exit 3 naming it."""
    try:
        return board_scripts.parse_probe(records)
    except board_scripts.RecordError as err:
        raise BoardError(f"{label}: probe.sh answered a malformed {err}; check the board's board scripts "
                         "(a broken or hostile board?)") from None


def push_scripts(conn: BoardConnection, layout: dict[str, str]) -> TransferStats:
    stats = TransferStats()
    for path in board_scripts.deploy_files():
        stats.add(push(conn, path, f"{layout['scripts']}/{path.name}"))
    return stats


def _push_build(conn: BoardConnection, build: Path, layout: dict[str, str], manifest: dict, emulated: bool,
                progress: bool, emulate_npu: int | None = None) -> TransferStats:
    """Runner, model and inputs to the board (unchanged files skipped). The remote inputs folder ends
    up holding exactly the build's inputs: the runner runs every file there, so a stale one would be
    run and judged too."""
    stats = TransferStats()
    stats.add(push(conn, RUNNER, layout["runner"]))
    stats.add(push(conn, build / "model.rknn", f"{layout['model_dir']}/model.rknn", progress=progress))
    stats.add(push(conn, build / "model.io.json", f"{layout['model_dir']}/model.io.json"))
    if emulated:  # the emulated runtime computes the prepared ONNX; a real board never gets it
        stats.add(push(conn, build / "model.onnx", f"{layout['model_dir']}/model.onnx", progress=progress))
        fed = manifest["fed_input"]
        with tempfile.TemporaryDirectory(prefix="rkdet-deploy-") as tmp:  # the build folder stays read-only
            sidecar = Path(tmp) / "model.emu.json"
            prep: dict[str, Any] = {"mean": fed["mean"], "std": fed["std"], "input_layout": "nchw"}
            if emulate_npu is not None:  # test control: the double answers with the simulator's outputs
                from rkdet.diff.resultset import quant_steps

                golden = f"{layout['model_dir']}/npu-golden"
                stats.add(push(conn, build / "golden" / "simulator", golden, progress=progress))
                prep["npu"] = {"golden": golden, "inputs": layout["inputs"], "lsb_k": emulate_npu,
                               "steps": quant_steps(build), "output": None}
            sidecar.write_text(json.dumps(prep))
            stats.add(push(conn, sidecar, f"{layout['model_dir']}/model.emu.json"))
    with tempfile.TemporaryDirectory(prefix="rkdet-deploy-") as tmp:
        inputs = build / "golden" / "inputs"
        if layout["inputs"].endswith("-fp32"):
            inputs = _model_inputs(inputs, manifest, Path(tmp))
        stats.add(push(conn, inputs, layout["inputs"], progress=progress))
        keep = {p.relative_to(inputs).as_posix() for p in inputs.rglob("*") if p.is_file()}
    _prune_remote(conn, layout["inputs"], keep)
    return stats


def _model_inputs(fed_dir: Path, manifest: dict, dest: Path) -> Path:
    """The golden inputs as the prepared ONNX takes them (float32 NCHW, mean/std applied), for the
    onnxruntime backend: the very transform the build's FP32 golden reference was computed with,
    so a board's onnxruntime can be compared with it bit for bit."""
    import numpy as np

    from rkdet.selfcheck import fp32_input

    fed = manifest["fed_input"]
    if fed.get("layout") != "NHWC":
        raise InputError(f"{fed_dir.parent.parent}: --backend onnxruntime needs NHWC golden inputs, "
                         f"the build has {fed.get('layout')}")
    for src in sorted(fed_dir.glob("*.npy")):
        np.save(dest / src.name, fp32_input(np.load(src), tuple(fed["mean"]), tuple(fed["std"])))
    return dest


def _prune_remote(conn: BoardConnection, remote_dir: str, keep: set[str]) -> None:
    """Delete files under `remote_dir` whose relative path is not in `keep`."""
    listing = conn.run(["find", remote_dir, "-type", "f"], timeout=60).out.splitlines()
    prefix = remote_dir.rstrip("/") + "/"
    extra = [line for line in listing if line.startswith(prefix) and line[len(prefix):] not in keep]
    if extra:
        conn.run(["rm", "-f", "--", *extra], timeout=60)


def _runner_argv(layout: dict[str, str], settings: RunSettings, model: str) -> list[str]:
    argv = ["python3", layout["runner"], "--model", model, "--inputs", layout["inputs"],
            "--repeats", str(settings.repeats), "--warmup", str(settings.warmup),
            "--core-mask", settings.core_mask, "--backend", settings.backend,
            "--snapshot-every", str(settings.snapshot_every), "--out", layout["result"]]
    if settings.cpu_affinity:
        argv += ["--cpu-affinity", ",".join(map(str, settings.cpu_affinity))]
    return argv


def state_dir_for(conn: BoardConnection, workdir: str, sudo: bool, given: str | None = None) -> str:
    """Where pin keeps its saved state: as given, else /run/rkdet for root (survives a dropped
    connection, cleared by a reboot that resets the knobs anyway), else the user's own work dir."""
    if given:
        return given
    login_is_root = conn.run(["id", "-u"], timeout=30).out.strip() == "0"
    return board_scripts.DEFAULT_STATE_DIR if (login_is_root or sudo) else f"{workdir}/state"


def _job_env(settings: RunSettings, layout: dict[str, str], state_dir: str) -> dict[str, str]:
    env = dict(settings.pin_env)
    env["RKDET_STATE_DIR"] = state_dir
    env["RKDET_WORK_DIR"] = layout["workdir"]
    if settings.fault:
        env["RKDET_EMU_FAULT"] = settings.fault
    return env


class Deployment:
    """One deploy to one board: created fresh, or re-attached with `resume`."""

    poll_interval = 0.3  # seconds between progress polls of the running job (each poll: two SSH commands)

    def __init__(self, conn: BoardConnection, build: Path, results_root: Path, settings: RunSettings,
                 log: Log = lambda msg: None, progress: bool = False) -> None:
        self.conn = conn
        self.build = build
        self.manifest = load_build(build)
        self.settings = settings
        self.log = log
        self.progress = progress
        self.label = board_label(conn.target.label)
        self.results = results_root / self.label / self.manifest["fingerprint"][:16]
        self.record: dict[str, Any] = {}
        self.folder = Path()

    # -- the whole flow --

    def run(self) -> DeployOutcome:
        """Preflight, push, start the pinned run, wait, pull, judge. Nothing on the board changes
        before preflight passed, and a run folder that never got past preflight is removed again."""
        s = self.settings
        run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(2)
        self.folder = self.results / run_id
        self.folder.mkdir(parents=True, exist_ok=False)
        try:
            layout, env, transfer, fit = self._prepare(run_id)
        except BaseException:
            remove_partial(self.folder)
            raise
        model = f"{layout['model_dir']}/model.onnx" if s.backend == "onnxruntime" else f"{layout['model_dir']}/model.rknn"
        argv = _runner_argv(layout, s, model)
        if s.pin:
            argv = ["sh", f"{layout['scripts']}/run-pinned.sh", "--", *argv]
        try:
            self.conn.run(["mkdir", "-p", layout["run_dir"]], timeout=30)
            job = self.conn.start_detached(argv, layout["pidfile"], layout["logfile"], sudo=s.sudo, env=env,
                                           keep_env=SESSION_ENV if s.sudo else ())
        except BoardError as err:
            self.record.update(status="failed", error=str(err))
            self._save()
            raise
        self.record.update(job_pid=job.pid)
        self._save()
        return self._finish(job, transfer, fit)

    def _prepare(self, run_id: str) -> tuple[dict[str, str], dict[str, str], TransferStats, BoardFit]:
        """Preflight (probe and fit; nothing changes) and the verified push; status becomes "running"."""
        s = self.settings
        workdir = self.conn.abspath(s.workdir) if s.workdir else self.conn.default_workdir()
        layout = _remote_layout(workdir, self.manifest["fingerprint"], run_id, s.backend)
        env = _job_env(s, layout, state_dir_for(self.conn, workdir, s.sudo, s.state_dir))
        self.record = {"schema": DEPLOY_SCHEMA, "status": "preflight", "run_id": run_id, "board": self.conn.target.label,
                       "build": str(self.build), "fingerprint": self.manifest["fingerprint"],
                       "platform": self.manifest["platform"], "remote": layout, "job_env": env,
                       "settings": {"repeats": s.repeats, "warmup": s.warmup, "core_mask": s.core_mask,
                                    "backend": s.backend, "pin": s.pin, "sudo": s.sudo,
                                    "snapshot_every": s.snapshot_every, "fault_injected": bool(s.fault),
                                    "emulated_npu_lsb_k": s.emulate_npu},
                       "tolerances": dict(s.tolerances)}
        self._save()
        self.log(f"preflight on {self.conn.target.label}")
        transfer = push_scripts(self.conn, layout)
        probe = probe_board(self.conn, layout["scripts"], {"RKDET_WORK_DIR": workdir,
                                                           "RKDET_STATE_DIR": env["RKDET_STATE_DIR"]}, s.sudo)
        _write_json(self.folder / "board.json", self.scrub(probe.to_json()))
        emulated = _is_emulated_runtime(self.conn) if s.backend == "rknnlite" else False
        fit = check_board(probe, self.manifest, host=self.conn.target.label, backend=s.backend, emulated=emulated,
                          need_kb=self._need_kb())
        if s.fault and not emulated:
            raise InputError("--emulator-fault is a test control of the emulated runtime; this board is not emulated")
        if s.emulate_npu is not None and not emulated:
            raise InputError("--emulator-npu is a test control of the emulated runtime (--backend rknnlite); "
                             "this board's runtime is not emulated")
        self._refuse_if_busy(workdir)
        self.log(f"board {fit.soc}{' (EMULATED runtime)' if emulated else ''}: pushing build {self.manifest['fingerprint'][:16]}")
        transfer.add(_push_build(self.conn, self.build, layout, self.manifest, emulated or s.backend == "onnxruntime",
                                 self.progress, s.emulate_npu if emulated else None))
        self.record.update(status="running", emulated=emulated, warnings=list(fit.warnings),
                           transfer={"bytes_sent": transfer.bytes_sent, "files_sent": transfer.files_sent,
                                     "files_skipped": transfer.files_skipped, "method": transfer.method,
                                     "seconds": round(transfer.seconds, 3)})
        self._save()
        return layout, env, transfer, fit

    # a live job: its pid file's process exists, is no zombie, and leads its own session (pid reuse guard)
    _LIVE_JOBS = ('for f in "$1"/runs/*/job.pid; do [ -f "$f" ] || continue; p=$(cat "$f") || continue; '
                  '[ -r "/proc/$p/stat" ] || continue; read -r _ _ s _ _ sid _ < "/proc/$p/stat" || continue; '
                  'if [ "$s" != Z ] && [ "$sid" = "$p" ]; then echo "$f $p"; fi; done; exit 0')

    def _refuse_if_busy(self, workdir: str) -> None:
        """Two pinned runs on one board would restore each other's clocks and share the NPU: refuse
        while another rkdet job of this work dir still runs."""
        res = self.conn.run(["sh", "-c", self._LIVE_JOBS, "sh", workdir], check=False, timeout=30)
        live = [line.rsplit(" ", 1) for line in res.out.splitlines() if " " in line]
        if live:
            path, pid = live[0]
            run_id = path.rsplit("/", 2)[-2]
            raise BoardError(f"{self.conn.target.label}: busy: run {run_id} (pid {pid}) is still running in "
                             f"{workdir}; wait for it, or `rkdet deploy --resume` it with the --out it was started with")

    def resume(self, folder: Path) -> DeployOutcome:
        """Re-attach to a run recorded in `folder/deploy.json` (+ its private record), wait, pull, judge."""
        self.folder = folder
        self.record = load_record(folder)
        if self.record.get("fingerprint") != self.manifest["fingerprint"]:
            raise InputError(f"{folder}: that run is of build {str(self.record.get('fingerprint'))[:16]} but "
                             f"{self.build} is {self.manifest['fingerprint'][:16]}; resume without --build, or pass "
                             f"the build it ran ({self.record.get('build')})")
        Tolerance.from_mapping(self.record.get("tolerances"), where=f"{folder / 'deploy.json'}: tolerances")  # before board work
        ran = self.record["settings"]  # the run's own settings, not today's flags
        self.settings = replace(self.settings, pin=ran["pin"], sudo=ran["sudo"], repeats=ran["repeats"],
                                warmup=ran["warmup"], backend=ran["backend"])
        layout = self.record["remote"]
        job = self.conn.attach(layout["pidfile"], layout["logfile"], sudo=self.settings.sudo)
        fit = BoardFit(self.record.get("platform", "?"), None, bool(self.record.get("emulated")),
                       tuple(self.record.get("warnings", ())))
        self.log(f"resuming run {self.record['run_id']} on {self.conn.target.label}")
        return self._finish(job, TransferStats(), fit)

    # -- steps --

    def _need_kb(self) -> int:
        """Disk the board needs for this deploy (generous: model files, inputs, every output distinct)."""
        sizes = sum(p.stat().st_size for p in self.build.rglob("*") if p.is_file() and "golden" not in p.parts)
        widen = 4 if self.settings.backend == "onnxruntime" else 1  # uint8 pixels become float32
        sizes += widen * sum(p.stat().st_size for p in (self.build / "golden" / "inputs").glob("*") if p.is_file())
        outputs = 0
        for out in self.manifest["inputs"]["onnx_prepared"]["outputs"]:
            count = 1
            for d in out["shape"]:
                count *= d
            outputs += count * 4
        golden_inputs = len(self.manifest["inputs"]["golden"])
        return (sizes + outputs * golden_inputs * 4) // 1024 + 1024

    def _wait(self, job: Any) -> int | None:
        layout = self.record["remote"]
        total = self.settings.repeats * len(list((self.build / "golden" / "inputs").glob("*.npy")))
        deadline = time.monotonic() + self.settings.timeout
        last = -1
        with _progress_bar(self.progress, total) as advance:
            while self.conn.is_running(job):
                if time.monotonic() > deadline:
                    raise BoardError(f"{self.conn.target.label}: run still going after {self.settings.timeout:g} s; "
                                     "it continues on the board: rkdet deploy --resume later")
                res = self.conn.run(["sh", "-c", 'cat "$1" 2>/dev/null | wc -l', "sh",
                                     f"{layout['result']}/index.jsonl"], check=False, timeout=30)
                done = int(res.out.strip() or 0) if res.out.strip().isdigit() else 0
                if done != last:
                    if advance is None:
                        self.log(f"inference {done}/{total}")
                    else:
                        advance(done)
                    last = done
                time.sleep(self.poll_interval)
        return self.conn.job_exit_code(job)

    def _stop_job(self, job: Any, timeout: float = 120.0) -> None:
        """SIGTERM the job's process group, then wait until the board is restored (or the group is gone).

        Not `kill_job`: the group's leader (the detach wrapper) dies at once while run-pinned.sh is
        still restoring from its TERM trap, so its log is complete only when restore's result record
        is in it (run-pinned's kill-timer `sleep` may outlive it, so an empty group comes later); and
        never SIGKILL, which would cut the restore in half.
        """
        signal = ['kill -"$1" -"$2" 2>/dev/null', "sh"]
        self.conn.run(["sh", "-c", *signal, "TERM", str(job.pid)], check=False, sudo=job.sudo, timeout=30)
        done = ('kill -0 -"$1" 2>/dev/null || exit 0; '
                'grep -qF \'"record":"result","script":"restore"\' "$2" 2>/dev/null && exit 0; exit 1')
        deadline = time.monotonic() + timeout
        while self.conn.run(["sh", "-c", done, "sh", str(job.pid), job.logfile], check=False, sudo=job.sudo,
                            timeout=30).rc != 0:
            if time.monotonic() > deadline:
                self.log(f"the board job {job.pid} still runs {timeout:g} s after SIGTERM; leaving it to finish")
                return
            time.sleep(0.2)

    def _finish(self, job: Any, transfer: TransferStats, fit: BoardFit) -> DeployOutcome:
        """Wait, read the job's log, pull and judge; deploy.json always ends in a final status
        ("complete", "failed", "interrupted", or "disconnected" when --resume can pick it up)."""
        interrupted = False
        try:
            code = self._wait(job)
        except KeyboardInterrupt:
            interrupted = True
            self.log("interrupted: stopping the run on the board (it restores the board)")
            self._stop_job(job)
            code = self.conn.job_exit_code(job)
        except BoardError:
            self.record.update(status="disconnected")
            self._save()
            raise
        try:
            result_local, restored, warnings = self._collect(code, interrupted, fit)
            return self._judge(result_local, transfer, restored, warnings, fit)
        except RkdetError as err:
            self.record.update(status="failed" if self._connected() else "disconnected", error=str(err))
            raise
        finally:
            self._save()

    def _connected(self) -> bool:
        try:
            return self.conn.transport.is_active()
        except BoardError:
            return False

    def _collect(self, code: int | None, interrupted: bool, fit: BoardFit) -> tuple[Path, bool | None, list[str]]:
        """The job's log and pin/restore reports, then the pulled result set (and its clock warnings).
        A refused pull is raised only after the job's own errors (a board left pinned comes first)."""
        layout = self.record["remote"]
        cap = self.conn.limits.output_bytes  # the log's end holds restore's result: keep the end
        log_text = self.conn.run(["tail", "-c", str(cap), layout["logfile"]], check=False, timeout=60).out
        (self.folder / "job.log").write_text(self.scrub(log_text))
        records = board_scripts.parse_records(log_text)
        pin = board_scripts.parse_pin(records) if self.settings.pin else None
        restore = board_scripts.parse_restore(records) if self.settings.pin else None
        warnings = list(fit.warnings) + (pin.warnings if pin else [])
        if restore is not None and restore.status == "incomplete":
            restore, note, again = self._confirm_restore()
            warnings.append(note)
            records += again
        _write_json(self.folder / "pin.json", self.scrub({"schema": "rkdet.pin/1", "records": records}))
        restored = None if restore is None else restore.ok
        if pin is not None:
            for knob in pin.by_status("failed"):
                warnings.append(f"pin: {knob.knob} wanted {knob.wanted} but reads {knob.actual}"
                                + (f" ({knob.reason})" if knob.reason else ""))
        self.record.update(job_exit=code, restored=restored)
        result_local = self.folder / "result"
        exists = self.conn.run(["test", "-e", f"{layout['result']}/run.json"], check=False, timeout=30).rc == 0
        pulled = TransferStats()
        refused: RkdetError | None = None
        if exists:
            try:
                pulled = pull(self.conn, layout["result"], result_local, progress=self.progress)
                warnings += clock_changes(result_local / "snapshots.jsonl", self.conn.target.label)
            except RkdetError as err:
                refused = err
        if not self.settings.keep and not interrupted and refused is None:
            self.conn.run(["rm", "-rf", layout["run_dir"]], check=False, timeout=60)
        self.record.update(status="interrupted" if interrupted else "complete", warnings=warnings,
                           pulled={"bytes": pulled.bytes_sent, "files": pulled.files_sent})
        self._raise_for_job(pin, restore, interrupted, exists, code, log_text)
        if refused is not None:
            raise refused
        return result_local, restored, warnings

    def _confirm_restore(self) -> tuple[board_scripts.RestoreReport, str, list[dict[str, Any]]]:
        """The job log lacks restore's result (its disk filled up, or the job was killed): run restore.sh
        again over the SSH channel, which needs no disk. It is idempotent: "nothing to restore" means
        the job's restore had finished; otherwise it finishes the job's work now."""
        env = {k: v for k, v in self.record["job_env"].items() if k in ("RKDET_STATE_DIR", "RKDET_WORK_DIR")}
        rc, records = run_board_script(self.conn, "restore", self.record["remote"]["scripts"], env,
                                       self.settings.sudo)
        report = board_scripts.parse_restore(records)
        free = self._free_kb(self.record["remote"]["workdir"])
        why = f"the board's work dir is full ({free} KiB free)" if free is not None and free < 1024 else "cut off"
        what = ("its restore had finished" if report.nothing_to_restore else
                "restored now" if report.ok else f"restore failed ({report.reason or report.status})")
        return report, f"the job's log is incomplete ({why}); ran restore.sh again: {what}", records

    def _free_kb(self, path: str) -> int | None:
        res = self.conn.run(["df", "-Pk", path], check=False, timeout=30)
        lines = res.out.strip().splitlines()
        fields = lines[-1].split() if res.rc == 0 and len(lines) >= 2 else []
        return int(fields[3]) if len(fields) >= 4 and fields[3].isdigit() else None

    def _raise_for_job(self, pin: board_scripts.PinReport | None, restore: board_scripts.RestoreReport | None,
                       interrupted: bool, exists: bool, code: int | None, log_text: str) -> None:
        """The one error that explains a run that did not produce a result set worth judging."""
        label = self.conn.target.label
        if pin is not None and restore is not None and not restore.ok:
            raise BoardError(f"{label}: the board was NOT restored ({restore.reason or restore.status}); "
                             f"run `rkdet board restore --board {label}`")
        if interrupted:
            raise KeyboardInterrupt
        if pin is not None and pin.exit_code not in (0, 1):
            try:
                pin.raise_for_status(label)
            except RkdetError as err:
                if "permission denied" in str(err) and not self.settings.sudo:
                    raise type(err)(f"{err}; or deploy with --sudo") from None
                raise
        said = [ln for ln in log_text.splitlines() if ln.strip() and not ln.startswith("{")]  # not JSON records
        if not exists:
            tail = ([ln for ln in said if ln.startswith("rkdet-run")] or said or ["no output"])[-1][:200]
            raise BoardError(f"{label}: the runner produced no results (exit {code}): {tail}")
        if code not in (0, 1):
            tail = [ln for ln in said if ln.startswith("rkdet-run")] or said
            how = f"exited {code}" if code is not None else "failed (no exit status: killed, or no disk to write it)"
            raise BoardError(f"{label}: rkdet-run {how}: {(tail or ['?'])[-1][:200]}")

    def _judge(self, result_local: Path, transfer: TransferStats, restored: bool | None, warnings: list[str],
               fit: BoardFit) -> DeployOutcome:
        from rkdet.diff.api import compare
        from rkdet.diff.report import write_reports
        from rkdet.diff.resultset import reference_set

        try:
            run = json.loads((result_local / "run.json").read_text())
            if not isinstance(run, dict):
                raise ValueError(f"a JSON {type(run).__name__}, not an object")
        except (OSError, ValueError, RecursionError) as exc:
            raise BoardError(f"{self.conn.target.label}: the board's result run.json is unreadable ({exc}); "
                             "the run's results cannot be judged (a broken or hostile board?)") from None
        emulated = run.get("emulated") is True
        reference = reference_set(self.build, run)  # the one rule `rkdet diff RUN BUILD` applies too
        tolerance = Tolerance.from_mapping(self.record.get("tolerances"))
        comparison = compare(result_local, reference, tolerance)
        write_reports(comparison, self.folder)
        self.record.update(verdict=comparison.verdict, diff_exit=comparison.exit_code, reference=str(reference),
                           repeatable=comparison.repeatable.as_dict(),
                           agrees=comparison.agrees.as_dict() if comparison.agrees is not None else None)
        self._save()
        code = EXIT_OK if comparison.exit_code == 0 else EXIT_DIFFERENT
        lines = [v.line() for v in (comparison.repeatable, comparison.agrees) if v is not None]
        return DeployOutcome(self.folder, code, comparison.verdict, emulated, transfer, restored, warnings, self.record,
                             lines)

    def _save(self) -> None:
        """deploy.json without user names or paths (publishable); the rest, while the run may still be
        resumed, in the private record (removed once the run is final)."""
        _write_json(self.folder / "deploy.json", self._public(self.record))
        path = private_record_path(self.record["run_id"])
        if self.record.get("status") in ("running", "disconnected"):
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            private = {"schema": PRIVATE_SCHEMA, "run_id": self.record["run_id"], "folder": str(self.folder.resolve()),
                       **{k: self.record[k] for k in PRIVATE_KEYS if k in self.record}}
            _write_json(path, private, mode=0o600)
        else:
            path.unlink(missing_ok=True)

    def _secrets(self) -> list[tuple[str, str]]:
        """(private text, what the published files say instead), longest first."""
        pairs = [(self.conn.target.label, self.label)]
        if self.record.get("build"):
            pairs.append((str(self.record["build"]), os.path.relpath(self.record["build"], self.folder)))
        remote = self.record.get("remote") or {}
        env = self.record.get("job_env") or {}
        if env.get("RKDET_STATE_DIR"):
            pairs.append((env["RKDET_STATE_DIR"], "<state_dir>"))
        if remote.get("workdir"):
            pairs.append((remote["workdir"], "<workdir>"))
        if self.conn.target.user:
            pairs.append((f"/home/{self.conn.target.user}", "<home>"))
        return sorted(pairs, key=lambda p: -len(p[0]))

    def scrub(self, obj: Any) -> Any:
        """`obj` with user@host:port, host build paths and board work/state paths replaced."""
        if isinstance(obj, str):
            for secret, public in self._secrets():
                obj = obj.replace(secret, public)
            return obj
        if isinstance(obj, dict):
            return {k: self.scrub(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.scrub(v) for v in obj]
        return obj

    def _public(self, record: dict[str, Any]) -> dict[str, Any]:
        public = {k: v for k, v in record.items() if k not in PRIVATE_KEYS}
        public["board"] = self.label
        if record.get("build"):
            public["build"] = os.path.relpath(record["build"], self.folder)
        if record.get("reference"):
            public["reference"] = os.path.relpath(record["reference"], self.folder)
        public["job_env"] = {k: v for k, v in (record.get("job_env") or {}).items() if k not in _PATH_ENV}
        return self.scrub(public)


def clock_changes(snapshots: Path, board: str) -> list[str]:
    """One warning per clock that moved away from its value at the start of the run (a thermal cap,
    a governor someone changed): pin checked the clocks once, the runner's snapshots saw the rest.
    A malformed snapshots.jsonl is the board's fault: BoardError naming the board and the line."""
    try:
        shots = read_snapshots(snapshots)
    except (SnapshotError, OSError) as err:
        raise BoardError(f"{board}: the board's result snapshots.jsonl is malformed ({err}); "
                         "the run's results cannot be trusted (a broken or hostile board?)") from None

    def clocks(shot: Snapshot) -> dict[str, tuple[int | None, str]]:
        found = {f"cpufreq/{name}": (v.cur, "kHz") for name, v in shot.cpu.items()}
        found.update({f"devfreq/{name}": (v.cur, "Hz") for name, v in shot.devfreq.items()})
        return found

    if len(shots) < 2:
        return []
    start = clocks(shots[0])
    warnings: list[str] = []
    for name, (first, unit) in sorted(start.items()):
        for shot in shots[1:]:
            now = clocks(shot).get(name, (first, unit))[0]
            if now != first:
                hottest = max((t for t in shot.thermal.values() if t is not None), default=None)
                where = f"run {shot.run}" if shot.run is not None else shot.at
                warnings.append(f"{name}: clock moved during the run, {first} -> {now} {unit} by {where}"
                                + (f" (hottest zone {hottest / 1000:g} C)" if hottest is not None else "")
                                + "; latency and results after that point ran at another clock")
                break
    return warnings


def latest_unfinished(results_root: Path, label: str) -> Path:
    """The newest run folder of this board whose deploy did not complete (for --resume)."""
    candidates = []
    for record in (results_root / label).glob("*/*/deploy.json"):
        try:
            doc = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("status") in ("running", "disconnected"):
            candidates.append(record.parent)
    if not candidates:
        raise InputError(f"{results_root / label}: no unfinished deploy to resume for this board")
    return max(candidates, key=lambda p: p.name)


def remove_partial(folder: Path) -> None:
    """Drop a local run folder that never got past preflight (nothing worth keeping)."""
    record = folder / "deploy.json"
    try:
        status = json.loads(record.read_text()).get("status")
    except (OSError, ValueError):
        status = None
    if status in (None, "preflight"):
        shutil.rmtree(folder, ignore_errors=True)
