"""An emulated fleet: N emulated boards (each its own sshd, sysfs and login) and the Ansible inventory
that reaches them, for fleet tests and the demo (`rkdet emulator fleet`, `EmulatedFleet`).

Why: fleet mode's failures are *across* boards (a runtime build that moves one element, a core mask
that differs from another, a board that drops off the network, one that throttles), and proving
that rkdet names them needs boards that really differ, reached the way a lab reaches its boards:
through an inventory, with strict host keys. Each board is an `EmulatedBoard`; SoCs are assigned
round-robin. The inventory is written with `rkdet.fleets.sources.inventory.write_inventory` (the one writer
of the format) and reads back with `load_inventory`.

Board kinds (`--variant INDEX=KIND`, INDEX 0-based; default sudo): the emulator's login variants
(standard, sudo, busybox, nosftp, hostile) and four TEST CONTROL kinds (which log in as sudo does), settings of the board itself (its image or
its emulator), never of the deploy:

  runtime-drift  the image has another librknnrt build (the probe reports its version) and the
                 runtime double flips the lowest bit of one output element on every call: a second
                 determinism class, within any tolerance
  core-drift     (a multi-core NPU: rk3588) init_runtime(core_mask=0_1_2) flips that bit, other
                 masks do not: the rknn-toolkit2 #228 pattern
  drop           once the runtime starts on the board (a runner initialised it), after `drop_after_s`
                 the board's link goes: sshd stops and every open connection is cut; the detached
                 job runs on and restores the board; the board stays unreachable until the fleet stops.
                 The runtime's init_runtime waits until the link is cut (the image's hold file, which
                 the watcher removes then): however fast the run, it never finishes before the drop
  hot            (a SoC with thermal caps: rk3588) from a runtime process's first inference until it
                 exits, the board's zones are held at `hot_millicelsius` (above the trip): the caps
                 lower the NPU, GPU and CPU clocks during the run, after the runner's "before"
                 snapshot, so deploy sees the clocks move (the runtime double writes the sysfs
                 thermal control itself: synchronous, deterministic)

The double tells the fleet it started by writing `runtime.started` (its pid and process group)
into a per-board signal folder named in its image; a watcher thread in the fleet acts on it (drop),
records events and clears a killed runtime's heat. A drop board's folder also holds `HOLD_FILE` from its
start until its link is cut: the point of the drop is the runtime's start, not a time the run might beat.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rkdet.emulator import lifeline
from rkdet.emulator.socs import PROFILES, SocProfile
from rkdet.emulator.sshd import VARIANTS, EmulatedBoard, _keygen
from rkdet.errors import BoardError, InputError
from rkdet.fleets.sources.inventory import FleetBoard, write_inventory

#: TEST CONTROL kinds (what each does: the module doc); the login variants are sshd.VARIANTS
TEST_CONTROL_KINDS = ("runtime-drift", "core-drift", "drop", "hot")
KINDS = (*VARIANTS, *TEST_CONTROL_KINDS)
DEFAULT_SOCS = ("rk3588", "rk3568", "rv1126")
DEFAULT_KIND = "sudo"  # deployable as-is: pinning a FUSE sysfs needs root, as on a real board
TEST_CONTROL_LOGIN = "sudo"  # the login of the TEST CONTROL kinds
MAX_BOARDS = 64
#: what a runtime-drift board's image reports instead (real formats; the build ids are made up)
DRIFT_RUNTIME = {"librknnrt": "librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)",
                 "librknn_runtime": "librknn_runtime version 1.7.1 (5c2b8e1 build: 2021-11-26 14:40:02 base: 1131)"}
CORE_DRIFT_MASKS = (7,)  # RKNNLite.NPU_CORE_0_1_2
DRIFT_ELEMENT = {"output": 0, "index": 0}
SIGNAL_FILE = "runtime.started"
HOLD_FILE = "hold"  # a drop board's runtime waits in init_runtime while it exists (the double's hold_until_removed)
_POLL_S = 0.05
HOT_MILLICELSIUS = 95000  # above rk3588's 85 C trip: the system monitor's caps engage
START_WORKERS = 4


@dataclass(frozen=True)
class FleetEvent:
    """Something a TEST CONTROL did to a board (the watcher's record, for tests and the CLI)."""

    index: int
    what: str  # "runtime-started" | "hot-on" | "hot-off" | "drop"
    pid: int  # the runtime process that triggered it
    at: float  # time.monotonic()
    detail: str = ""


@dataclass
class FleetMember:
    """One board of the fleet: its place (index, inventory name, SoC, kind) and the running board."""

    index: int
    name: str  # inventory host name, e.g. "emu0-rk3588"
    soc: str
    kind: str  # a KINDS entry
    board: EmulatedBoard
    signal_dir: Path | None = None  # where the runtime double says it started (drop, hot)
    dropped: bool = False  # a drop board whose link went (its sshd is down on purpose)

    @property
    def test_control(self) -> bool:
        return self.kind in TEST_CONTROL_KINDS

    def record(self, known_hosts: Path, identity: Path) -> FleetBoard:
        """The inventory record of this board (what `load_inventory` reads back)."""
        b = self.board
        return FleetBoard(name=self.name, address=b.host, port=b.port, user=b.user, key_file=str(identity),
                     soc=self.soc, sudo=b.variant.sudo, workdir=str(b.home / ".cache" / "rkdet"),
                     known_hosts=str(known_hosts), tags=("emulated", self.kind), groups=(self.soc,))


def parse_variants(items: Iterable[str], count: int) -> dict[int, str]:
    """`INDEX=KIND` strings (0-based INDEX < count) to {index: kind}; InputError on a bad one."""
    out: dict[int, str] = {}
    for item in items:
        index_text, sep, kind = item.partition("=")
        if not sep or not index_text.strip().isdigit():
            raise InputError(f"--variant {item!r}: write INDEX=KIND, e.g. 2=runtime-drift")
        index = int(index_text)
        if index >= count:
            raise InputError(f"--variant {item!r}: index {index} is outside the fleet (0..{count - 1})")
        if kind not in KINDS:
            raise InputError(f"--variant {item!r}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
        if index in out and out[index] != kind:
            raise InputError(f"--variant: board {index} is given two kinds ({out[index]}, {kind}); one per board")
        out[index] = kind
    return out


def parse_socs(text: str | Sequence[str]) -> tuple[str, ...]:
    """`rk3588,rk3568` (or a sequence) to SoC names the emulator has; InputError otherwise."""
    names = [s.strip().lower() for s in (text.split(",") if isinstance(text, str) else text) if s.strip()]
    if not names:
        raise InputError("--socs: name at least one SoC")
    unknown = [n for n in names if n not in PROFILES]
    if unknown:
        raise InputError(f"--socs: unknown SoC {unknown[0]!r}; known: {', '.join(sorted(PROFILES))}")
    return tuple(names)


def board_profile(soc: str, kind: str, signal_dir: Path | None, control_dir: Path | None = None,
                  hot_millicelsius: int = HOT_MILLICELSIUS) -> SocProfile:
    """The SoC's profile with the kind's image changes (TEST CONTROL kinds) applied. `control_dir`:
    the board's sysfs test-control folder, which a hot board's runtime heats."""
    profile = PROFILES[soc]
    control: dict[str, object] = {}
    if kind == "runtime-drift":
        family = "librknn_runtime" if "librknn_runtime" in profile.runtime_version else "librknnrt"
        version = DRIFT_RUNTIME[family]
        profile = dataclasses.replace(profile, runtime_version=version)
        control.update(library_version=version, drift=dict(DRIFT_ELEMENT))
    elif kind == "core-drift":
        if profile.npu_cores < 3:
            raise InputError(f"core-drift needs a three-core NPU (rk3588); board with {soc} has {profile.npu_cores}")
        control["core_drift"] = {"core_masks": list(CORE_DRIFT_MASKS), **DRIFT_ELEMENT}
    elif kind == "hot":
        if not profile.thermal_caps:
            raise InputError(f"hot needs a SoC whose profile has thermal caps (rk3588); {soc} has none modelled")
        if control_dir is None:
            raise InputError("hot needs the board's sysfs control folder")
        control["heat"] = {"control_dir": str(control_dir), "millicelsius": hot_millicelsius}
    if signal_dir is not None:
        control["signal_dir"] = str(signal_dir)
        if kind == "drop":
            control["hold_until_removed"] = str(signal_dir / HOLD_FILE)
    if control:
        profile = dataclasses.replace(profile, runtime_control=json.dumps(control, sort_keys=True))
    return profile


class EmulatedFleet:
    """N emulated boards and their inventory, for tests (a session fixture) and the CLI.

        with EmulatedFleet(4, variants={1: "runtime-drift", 2: "drop"}) as fleet:
            inv = load_inventory(fleet.inventory_path)
            fleet.boards[0].board.connect()  # a BoardConnection

    `socs` are assigned round-robin (board i gets socs[i % len(socs)]); `variants` maps a 0-based
    index to a KINDS entry (default "sudo": a login with passwordless sudo, what deploy's pin needs on
    the FUSE sysfs; the TEST CONTROL kinds log in the same way; "standard" is a login without sudo). `workdir`: the fleet's folder (default a temp dir,
    removed at stop); it holds each board's work dir (`b<i>/`), `id_ed25519` (the one client key
    every board accepts), `known_hosts` (every board's host key) and, unless `inventory` names
    another path, `inventory.yaml`. `sysfs`: the boards' sysfs
    backend (auto: FUSE where available; the hot kind needs FUSE). `drop_after_s`: seconds between
    the runtime starting on a drop board and its link going. Stopping ends every board and the
    watcher; it is idempotent and also runs when the start fails half-way.
    """

    def __init__(self, count: int, socs: Sequence[str] = DEFAULT_SOCS, variants: Mapping[int, str] | None = None, *,
                 workdir: str | Path | None = None, inventory: str | Path | None = None, sysfs: str = "auto",
                 drop_after_s: float = 0.0, hot_millicelsius: int = HOT_MILLICELSIUS) -> None:
        if not 1 <= count <= MAX_BOARDS:
            raise InputError(f"--count {count}: an emulated fleet has 1 to {MAX_BOARDS} boards")
        self.count = count
        self.socs = parse_socs(socs)
        self.variants = dict(variants or {})
        for index, kind in self.variants.items():
            if not 0 <= index < count or kind not in KINDS:
                raise InputError(f"variant {index}={kind}: index 0..{count - 1}, kind one of {', '.join(KINDS)}")
        if drop_after_s < 0:
            raise InputError("drop_after_s must be >= 0")
        self.sysfs = sysfs
        self.drop_after_s = drop_after_s
        self.hot_millicelsius = hot_millicelsius
        self._own_workdir = workdir is None
        self.workdir = Path(workdir).resolve() if workdir is not None else None
        self._inventory_arg = Path(inventory).resolve() if inventory is not None else None
        self.inventory_path: Path = Path()
        self.known_hosts_file: Path = Path()
        self.identity_file: Path = Path()
        self.boards: list[FleetMember] = []
        self.events: list[FleetEvent] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._watch_error: BaseException | None = None

    # -- lifecycle --

    def __enter__(self) -> EmulatedFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> EmulatedFleet:
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> EmulatedFleet:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="rkdet-emu-fleet-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o755)  # board users reach their signal folders and board files through it
        plan = [(i, self.socs[i % len(self.socs)], self.variants.get(i, DEFAULT_KIND)) for i in range(self.count)]
        profiles = {}
        for index, soc, kind in plan:  # every refusal before the first board starts
            signal_dir = self.workdir / "signals" / f"b{index}" if kind in ("drop", "hot") else None
            profiles[index] = board_profile(soc, kind, signal_dir, self._control_dir(index), self.hot_millicelsius)
        self.identity_file = self.workdir / "id_ed25519"
        if not self.identity_file.exists():
            _keygen(self.identity_file, "rkdet-emulated-fleet-client")
        for index, soc, kind in plan:
            login = kind if kind in VARIANTS else TEST_CONTROL_LOGIN
            bdir = self.workdir / f"b{index}"
            bdir.mkdir(mode=0o755, exist_ok=True)
            os.chmod(bdir, 0o755)
            for name in ("id_ed25519", "id_ed25519.pub"):  # one client key for the fleet (its boards reuse it)
                shutil.copyfile(self.workdir / name, bdir / name)
                os.chmod(bdir / name, 0o600 if name == "id_ed25519" else 0o644)
            board = EmulatedBoard(profiles[index], bdir, login, sysfs=self.sysfs)
            self.boards.append(FleetMember(index, f"emu{index}-{soc}", soc, kind, board))
        # a board's start is mostly waiting (sshd, the FUSE daemon, key generation): a few at a time
        pool = ThreadPoolExecutor(max_workers=min(START_WORKERS, self.count), thread_name_prefix="rkdet-fleet-start")
        try:
            futures = [pool.submit(self._start_board, fb) for fb in self.boards]
            errors = [f.exception() for f in futures]
        finally:  # Ctrl-C here: the starts under way finish, the rest are cancelled, then stop() ends them all
            pool.shutdown(wait=True, cancel_futures=True)
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        self.known_hosts_file = self.workdir / "known_hosts"
        self.known_hosts_file.write_text("".join(fb.board.known_hosts_file.read_text() for fb in self.boards))
        self.inventory_path = self._inventory_arg or self.workdir / "inventory.yaml"
        write_inventory(self.inventory_path, self.records(),
                        comment=f"rkdet emulated fleet: {self.count} boards on 127.0.0.1 (rkdet emulator fleet); "
                                "valid while it runs")
        if any(fb.signal_dir for fb in self.boards):
            self._watcher = threading.Thread(target=self._watch, name="rkdet-fleet-watcher", daemon=True)
            self._watcher.start()
        return self

    def _control_dir(self, index: int) -> Path:
        """Where board `index`'s sysfs test controls will be (EmulatedBoard: <workdir>/board/sysfs/control)."""
        assert self.workdir is not None
        return self.workdir / f"b{index}" / "board" / "sysfs" / "control"

    def _start_board(self, fb: FleetMember) -> None:
        assert self.workdir is not None
        board = fb.board
        board.start()
        if fb.kind == "hot" and (board.sysfs is None or board.sysfs.backend != "fuse"):
            raise BoardError(f"board {fb.index} (hot): the thermal caps need the FUSE sysfs, and this board has the "
                             "plain tree (FUSE unavailable here?)")
        if fb.kind == "hot" and board.sysfs.control_dir != self._control_dir(fb.index):
            raise BoardError(f"board {fb.index} (hot): its sysfs controls are at {board.sysfs.control_dir}, "
                             f"not {self._control_dir(fb.index)} as its image says")
        if fb.kind in ("drop", "hot"):
            signal_dir = self.workdir / "signals" / f"b{fb.index}"
            signal_dir.mkdir(parents=True, exist_ok=True)
            os.chmod(self.workdir / "signals", 0o755)
            assert board.account is not None
            os.chown(signal_dir, board.account.uid, board.account.gid)  # the runtime writes it as the board
            (signal_dir / SIGNAL_FILE).unlink(missing_ok=True)  # an earlier fleet's, in a reused work dir
            if fb.kind == "drop":
                (signal_dir / HOLD_FILE).touch()  # removed by the watcher once the link is cut
            fb.signal_dir = signal_dir

    def stop(self) -> None:
        """Stop the watcher and every board; remove the fleet's temp dir (and nothing it did not make)."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
            self._watcher = None
        errors = []
        for fb in self.boards:  # every namespace first (each may hold copies of the others' FUSE mounts)
            try:
                fb.board.power_off_sessions()
            except Exception as err:
                errors.append(f"board {fb.index}: {err}")
        for fb in reversed(self.boards):
            try:
                fb.board.stop()
            except Exception as err:  # stop the others anyway
                errors.append(f"board {fb.index}: {err}")
        self.boards = []
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        if errors:
            raise BoardError("emulated fleet: " + "; ".join(errors))

    # -- what it is --

    def records(self) -> list[FleetBoard]:
        """The inventory records, one per board, in index order."""
        return [fb.record(self.known_hosts_file, self.identity_file) for fb in self.boards]

    def by_kind(self, kind: str) -> list[FleetMember]:
        return [fb for fb in self.boards if fb.kind == kind]

    def crashed(self) -> list[FleetMember]:
        """Boards whose sshd is not running and was not dropped on purpose (TEST CONTROL drop)."""
        return [fb for fb in self.boards if not fb.dropped and not fb.board.running]

    def wait_event(self, index: int, what: str, timeout: float, since: float = 0.0) -> FleetEvent:
        """The first event `what` of board `index` at or after `since` (a time.monotonic() value;
        default: any); waits up to `timeout` s, BoardError after."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((e for e in self.events if e.index == index and e.what == what and e.at >= since), None)
                if found is not None:
                    return found
                if self._watch_error is not None:
                    raise BoardError(f"emulated fleet watcher failed: {self._watch_error}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BoardError(f"board {index}: no {what} within {timeout:g} s")
                self._changed.wait(left)

    # -- the watcher (drop, hot) --

    def _record(self, event: FleetEvent) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def _watch(self) -> None:
        handled: set[tuple[int, int]] = set()
        hot: dict[int, tuple[int, bool]] = {}  # index -> (runtime pid, heat seen)
        drops: dict[int, tuple[float, int, int]] = {}  # index -> (when, pid, pgid)
        try:
            while not self._stop.wait(_POLL_S):
                now = time.monotonic()
                for fb in self.boards:
                    started = _read_signal(fb.signal_dir) if fb.signal_dir else None
                    if started is None or (fb.index, started[0]) in handled:
                        continue
                    pid, pgid = started
                    handled.add((fb.index, pid))
                    if lifeline.start_time(pid) is None:
                        continue  # ended before we saw it (a stale signal from an earlier run)
                    self._record(FleetEvent(fb.index, "runtime-started", pid, now))
                    if fb.kind == "hot":
                        hot[fb.index] = (pid, False)
                    elif fb.kind == "drop" and fb.index not in drops and fb.board.running:
                        drops[fb.index] = (now + self.drop_after_s, pid, pgid)
                    elif fb.kind == "drop":  # no drop to wait for (its link already went): never held
                        _release(fb)
                for index, (pid, on) in list(hot.items()):  # the runtime heats at its first inference
                    forced = self._control_dir(index) / "forced_millicelsius"
                    if not on and forced.exists():
                        hot[index] = (pid, True)
                        self._record(FleetEvent(index, "hot-on", pid, time.monotonic(),
                                                f"{self.hot_millicelsius} mC"))
                    if lifeline.start_time(pid) is None:  # it ended: it cooled at exit (or was killed)
                        forced.unlink(missing_ok=True)
                        del hot[index]
                        if on:
                            self._record(FleetEvent(index, "hot-off", pid, time.monotonic()))
                for index, (when, pid, pgid) in list(drops.items()):
                    if now < when:
                        continue
                    fb = self.boards[index]
                    drops[index] = (float("inf"), pid, pgid)  # once per fleet: the board stays down
                    if fb.board.running:
                        fb.dropped = True
                        killed = fb.board.pull_cable(keep_pgid=pgid)
                        self._record(FleetEvent(index, "drop", pid, time.monotonic(),
                                                f"sshd stopped, {len(killed)} connection processes killed"))
                    _release(fb)  # the held runtime goes on, its link gone (or its board already down)
        except BaseException as err:  # surfaced by wait_event and the CLI, never silently
            with self._changed:
                self._watch_error = err
                self._changed.notify_all()
        finally:  # a runtime still held goes on (the fleet is stopping; or the watcher failed, said above)
            for fb in self.boards:
                if fb.kind == "drop":
                    _release(fb)

    @property
    def watch_error(self) -> BaseException | None:
        return self._watch_error


def _release(fb: FleetMember) -> None:
    """Let a drop board's runtime go on (init_runtime waits while its HOLD_FILE exists)."""
    if fb.signal_dir is not None:
        (fb.signal_dir / HOLD_FILE).unlink(missing_ok=True)


def _read_signal(directory: Path | None) -> tuple[int, int] | None:
    """(pid, pgid) from a signal folder's runtime.started, or None (absent, or being replaced)."""
    if directory is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        pid, pgid = (directory / SIGNAL_FILE).read_text().split()[:2]
        return int(pid), int(pgid)
    return None
