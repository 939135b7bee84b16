"""A real labgrid lab over an emulated fleet: a labgrid-coordinator and a labgrid-exporter on 127.0.0.1,
one place per board (`rkdet emulator fleet --labgrid`, `FleetLab`).

Why: `--labgrid HOST:PORT --tags soc=…` is how a lab hands rkdet its boards (reservations, locks,
busy places); fleet tests and the demo need a coordinator that owns places backed by boards that
answer SSH. The exporter exports one `NetworkService` (address, username, port) per board in a group
named after it; each place is named after the board, matches `<exporter>/<board>/NetworkService`
and is tagged `soc=<soc>` and `kind=<kind>` (the board's --variant kind, e.g. kind=runtime-drift).
labgrid runs from its own venv (`rkdet.fleets.sources.labgrid_places.labgrid_python`: $RKDET_LABGRID_PYTHON,
see .ci/setup), as for users. Both daemons die with this process (PR_SET_PDEATHSIG) and are stopped
by `stop()`. A labgrid place carries no key: every fleet board accepts the fleet's one client key
(`EmulatedFleet.identity_file`) and its host keys are in `EmulatedFleet.known_hosts_file`.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from rkdet.emulator.fleet import EmulatedFleet
from rkdet.emulator.sshd import free_port
from rkdet.errors import BoardError
from rkdet.fleets.sources.labgrid_places import labgrid_python

EXPORTER = "rkdet-fleet"
START_SECONDS = 60.0
_PR_SET_PDEATHSIG = 1

# run by labgrid's python: wait for the exporter's resources, then create, match and tag each place
_SETUP = """
import json, sys, time
from labgrid.remote.client import start_session
from labgrid.remote.generated import labgrid_coordinator_pb2 as pb
address, want, deadline = sys.argv[1], json.loads(sys.argv[2]), time.monotonic() + float(sys.argv[3])
s = start_session(address)
while sum(len(g) for groups in s.resources.values() for g in groups.values()) < len(want):
    if time.monotonic() > deadline:
        sys.exit("the exporter's resources did not reach the coordinator in time")
    s.loop.run_until_complete(s.sync_with_coordinator())
for name, place in want.items():
    s.loop.run_until_complete(s.stub.AddPlace(pb.AddPlaceRequest(name=name)))
    s.loop.run_until_complete(s.stub.AddPlaceMatch(pb.AddPlaceMatchRequest(placename=name, pattern=place["match"])))
    s.loop.run_until_complete(s.stub.SetPlaceTags(pb.SetPlaceTagsRequest(placename=name, tags=place["tags"])))
s.loop.run_until_complete(s.stop())
"""


def _die_with_parent() -> None:  # preexec_fn: the daemon gets SIGTERM when we die, even by SIGKILL
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _clean_env() -> dict[str, str]:
    """Our environment without PYTHON* (labgrid's venv must not see rkdet's PYTHONPATH)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


class FleetLab:
    """`with FleetLab(fleet) as lab:` a coordinator at `lab.address` with a place per fleet board.

    `places`: {place name: {"soc": …, "kind": …}} (the board names of `fleet.records()`).
    """

    def __init__(self, fleet: EmulatedFleet, workdir: str | Path | None = None) -> None:
        if not fleet.boards:
            raise BoardError("emulated fleet: start the fleet before its labgrid lab")
        self.fleet = fleet
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.address = ""
        self.places: dict[str, dict[str, str]] = {}
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> FleetLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> FleetLab:
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> FleetLab:
        python = labgrid_python()
        bin_dir = python.parent
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="rkdet-emu-lab-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        groups = {}
        want = {}
        for fb in self.fleet.boards:
            b = fb.board
            groups[fb.name] = {"NetworkService": {"address": b.host, "username": b.user, "port": b.port}}
            self.places[fb.name] = {"soc": fb.soc, "kind": fb.kind}
            want[fb.name] = {"match": f"{EXPORTER}/{fb.name}/NetworkService", "tags": self.places[fb.name]}
        (self.workdir / "exporter.yaml").write_text(json.dumps(groups, indent=1) + "\n")  # JSON is YAML
        self.address = f"127.0.0.1:{free_port()}"
        coord_log = self.workdir / "coordinator.log"
        self._spawn([str(bin_dir / "labgrid-coordinator"), "-l", self.address], coord_log)
        deadline = time.monotonic() + START_SECONDS
        while "listening on" not in coord_log.read_text(errors="replace"):
            if self._procs[0].poll() is not None or time.monotonic() > deadline:
                raise BoardError(f"labgrid-coordinator did not start on {self.address}; see {coord_log}")
            time.sleep(0.1)
        self._spawn([str(bin_dir / "labgrid-exporter"), "-c", self.address, "--name", EXPORTER,
                     str(self.workdir / "exporter.yaml")], self.workdir / "exporter.log")
        try:
            done = subprocess.run([str(python), "-c", _SETUP, self.address, json.dumps(want), str(START_SECONDS)],
                                  env=_clean_env(), capture_output=True, text=True, timeout=START_SECONDS + 30)
        except subprocess.TimeoutExpired:
            raise BoardError(f"labgrid: creating the places timed out; see {self.workdir}/exporter.log") from None
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]
            raise BoardError(f"labgrid: creating the places failed: {tail}")
        return self

    def _spawn(self, argv: list[str], log: Path) -> None:
        assert self.workdir is not None
        with log.open("wb") as out:
            self._procs.append(subprocess.Popen(argv, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=subprocess.STDOUT, env=_clean_env(),
                                                start_new_session=True, preexec_fn=_die_with_parent))

    def stop(self) -> None:
        """Stop the exporter, then the coordinator; remove the lab's temp dir. Idempotent."""
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        self._procs = []
        if self._own_workdir and self.workdir is not None:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
