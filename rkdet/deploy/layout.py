"""Where one run's files live on a board (`RemoteLayout`), derived from the work dir, build and run id.

Why a typed record: every step (push, start, poll, collect) and `--resume` address the same paths;
one constructor names them once, and the run's record stores them (`to_json` / `from_json`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping

from rkdet.backends.registry import backend as descriptor
from rkdet.onboard.backend_table import DEFAULT_BACKEND
from rkdet.errors import InputError
from rkdet.records.ids import check_run_id
from rkdet.records.io import identifier


def scripts_dir(workdir: str) -> str:
    """The board scripts' folder under a work dir (shared by every run and `rkdet board ...`)."""
    return f"{workdir}/scripts"


@dataclass(frozen=True)
class RemoteLayout:
    """Absolute board paths of one run."""

    workdir: str
    scripts: str
    runner: str  # the backend's runner program: rkdet-onboard.pyz (`python3 RUNNER run ...`) or a native one (rkdet-run-c)
    model_dir: str
    inputs: str
    run_dir: str
    result: str
    pidfile: str
    logfile: str

    @classmethod
    def for_run(cls, workdir: str, fingerprint: str, run_id: str, backend: str = DEFAULT_BACKEND) -> RemoteLayout:
        fp = identifier(fingerprint, "build", "fingerprint")[:16]  # type: ignore[index]  # a path on the board
        check_run_id(run_id)
        fed = "-fp32" if descriptor(backend).fp32_input else ""  # a CPU backend takes the model's float input, not the NPU's
        run_dir = f"{workdir}/runs/{run_id}"
        return cls(workdir=workdir, scripts=scripts_dir(workdir), runner=f"{workdir}/{descriptor(backend).runner_program}",
                   model_dir=f"{workdir}/models/{fp}", inputs=f"{workdir}/inputs/{fp}{fed}", run_dir=run_dir,
                   result=f"{run_dir}/result", pidfile=f"{run_dir}/job.pid", logfile=f"{run_dir}/job.log")

    def in_session(self, session_id: str, run_id: str) -> RemoteLayout:
        """This run as one step of a pinned session (`rkdet.deploy.session`): its own run folder and result set
        under the session's folder, and the session's one job (pid file, log) that every step shares."""
        check_run_id(session_id, "session id")
        check_run_id(run_id)
        session_dir = f"{self.workdir}/runs/{session_id}"
        run_dir = f"{session_dir}/{run_id}"
        return replace(self, run_dir=run_dir, result=f"{run_dir}/result", pidfile=f"{session_dir}/job.pid",
                       logfile=f"{session_dir}/job.log")

    @property
    def session_dir(self) -> str:
        """The folder of the job (a session's, or this run's own)."""
        return self.pidfile.rsplit("/", 1)[0]

    @property
    def runner_log(self) -> str:
        """The runner's own output (stdout and stderr), a file of its run folder: never in the job's log, so
        however much a runner prints, the log's records (lock, pin, steps, clocks, restore) stay whole."""
        return f"{self.run_dir}/runner.log"

    @property
    def fp32_inputs(self) -> bool:
        """True when the inputs are the model's float input (a backend with `fp32_input`), not the NPU's."""
        return self.inputs.endswith("-fp32")

    def model(self, backend: str) -> str:
        """The model file the runner loads for `backend`."""
        return f"{self.model_dir}/{descriptor(backend).model_file}"

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str = "remote") -> RemoteLayout:
        names = [f.name for f in fields(cls)]
        if not isinstance(doc, Mapping) or not all(isinstance(doc.get(n), str) for n in names):
            raise InputError(f"{where}: not a complete remote layout ({', '.join(names)})")
        return cls(**{n: doc[n] for n in names})
