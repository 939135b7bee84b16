"""Boards from a labgrid coordinator: reserve and acquire matching places, hold them, release them.

labgrid owns the lab's places, reservations and locks; rkdet uses them rather than keeping its own.
labgrid's gRPC client needs protobuf>=5.27 and rknn-toolkit2 needs protobuf<=4.25.4, so labgrid
lives in its own venv (requirements/labgrid.lock.txt) and rkdet drives it through
`labgrid_bridge.py`, run by that venv's Python, over a JSON-lines pipe. The bridge refreshes the
reservations on a timer and releases everything when its stdin closes, which happens on every way
rkdet can end (return, exception, Ctrl-C, SIGTERM, even SIGKILL: the kernel closes the pipe).

What the coordinator says (place names, tags, NetworkService address/username/port) is untrusted:
each value is checked like an inventory value before it becomes a `FleetBoard`.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rkdet.errors import EXIT_INTERRUPTED, BoardError, InputError
from rkdet.fleets.sources.inventory import SOC_RE, FleetBoard, check_ssh_value
from rkdet.log import log_console
from rkdet.textsafe import visible

BRIDGE = Path(__file__).with_name("labgrid_bridge.py")
LABGRID_PYTHON_ENV = "RKDET_LABGRID_PYTHON"
LABGRID_VERSION = "26.0.1"  # requirements/labgrid.lock.txt
DEFAULT_LABGRID_PYTHON = Path("~/.local/share/rkdet/labgrid-venv/bin/python")
DEFAULT_PORT = 20408  # labgrid-coordinator's default
REFRESH_SECONDS = 20.0  # labgrid expires an unrefreshed reservation after 60 s
STARTUP_SECONDS = 20.0  # the bridge's own start (Python + grpc import) on a busy host, beyond the wait
RELEASE_SECONDS = 30.0
MAX_LINE = 1 << 20
MAX_PLACES = 1024
_TAG_KEY = re.compile(r"[a-z][a-z0-9_]{0,63}")  # labgrid's TAG_KEY, bounded
_TAG_VALUE = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")



def _say(text: str) -> None:
    """A progress line on stderr (the lab's text is escaped: no rich markup from the coordinator)."""
    log_console().log(text, markup=False, highlight=False)


@dataclass(frozen=True)
class Coordinator:
    """A checked `--labgrid HOST:PORT`."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_coordinator(text: str) -> Coordinator:
    """HOST[:PORT] (PORT defaults to labgrid's 20408; IPv6 as [addr]:port); InputError (exit 2) otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or (host.count(":") and not host.startswith("[")):
        host, port = text, str(DEFAULT_PORT)
    if not _HOST.fullmatch(host) or host.startswith("-"):
        raise InputError(f"--labgrid {visible(text, 80)!r}: expected HOST:PORT of a labgrid-coordinator")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(f"--labgrid {visible(text, 80)!r}: port must be 1-65535")
    return Coordinator(host, int(port))


def parse_tags(pairs: Sequence[str]) -> dict[str, str]:
    """`--tags k=v` (repeatable, or comma-separated) as labgrid place tags; InputError (exit 2) on a bad one."""
    tags: dict[str, str] = {}
    for item in (p.strip() for pair in pairs for p in pair.split(",") if p.strip()):
        key, sep, value = item.partition("=")
        if not sep or not _TAG_KEY.fullmatch(key) or not _TAG_VALUE.fullmatch(value):
            raise InputError(f"--tags {visible(item, 80)!r}: expected KEY=VALUE (key: a-z, 0-9, _; "
                             "value: letters, digits, _ . + -), e.g. --tags soc=rk3588")
        if tags.get(key, value) != value:
            raise InputError(f"--tags: {key} given twice ({tags[key]} and {value})")
        tags[key] = value
    if not tags:
        raise InputError("--labgrid needs --tags KEY=VALUE to say which places (e.g. --tags soc=rk3588)")
    return tags


def labgrid_python() -> Path:
    """The Python of the venv that has labgrid ($RKDET_LABGRID_PYTHON, else the default venv)."""
    given = os.environ.get(LABGRID_PYTHON_ENV)
    path = Path(given).expanduser() if given else DEFAULT_LABGRID_PYTHON.expanduser()
    if not os.access(path, os.X_OK) or path.is_dir():
        raise InputError(
            f"labgrid is not installed for rkdet ({path} not found): python3 -m venv "
            f"{DEFAULT_LABGRID_PYTHON.parent.parent} && {DEFAULT_LABGRID_PYTHON.parent}/pip install "
            f"labgrid=={LABGRID_VERSION} (its own venv: labgrid needs protobuf 5+, rknn-toolkit2 4.25), "
            f"or set {LABGRID_PYTHON_ENV}")
    return path


# ---- what the coordinator said, checked ----------------------------------------------------------


def _board(coordinator: Coordinator, place: Any) -> FleetBoard:
    """One acquired place's record -> FleetBoard; every value checked as an inventory value would be."""
    if not isinstance(place, dict) or not isinstance(place.get("name"), str):
        raise BoardError(f"labgrid coordinator {coordinator}: a place record without a name")
    try:  # the lab's data, not the user's flags: a board problem (exit 3), not exit 2
        name = check_ssh_value(place["name"], f"labgrid coordinator {coordinator}", "place name")
    except InputError as err:
        raise BoardError(str(err)) from None
    where = f"labgrid place {name}"
    services = place.get("network_services")
    if not isinstance(services, list) or not services:
        raise BoardError(f"{where} has no NetworkService resource: add one (address, username, port) to its "
                         "exporter so rkdet knows where to SSH")
    if len(services) > 1:
        names = ", ".join(visible(str(s.get("name")), 40) for s in services if isinstance(s, dict))
        raise BoardError(f"{where} has {len(services)} NetworkService resources ({names}); rkdet needs exactly one")
    svc = services[0] if isinstance(services[0], dict) else {}
    try:
        address = check_ssh_value(svc.get("address"), where, "NetworkService address")
        user = check_ssh_value(svc.get("username"), where, "NetworkService username")
    except InputError as err:
        raise BoardError(str(err)) from None
    port = svc.get("port", 22)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise BoardError(f"{where}: NetworkService port {visible(str(port), 40)!r} is not a port number (1-65535)")
    raw_tags = place.get("tags") if isinstance(place.get("tags"), dict) else {}
    tags = tuple(sorted(f"{k}={v}" for k, v in raw_tags.items()
                        if isinstance(k, str) and isinstance(v, str) and _TAG_KEY.fullmatch(k)
                        and _TAG_VALUE.fullmatch(v)))  # anything else is left out, not shown
    soc = raw_tags.get("soc")
    soc = soc.lower() if isinstance(soc, str) and SOC_RE.fullmatch(soc.lower()) else None
    return FleetBoard(name=name, address=address, port=port, user=user, soc=soc, tags=tags, source="labgrid")


# ---- the bridge process ----------------------------------------------------------------------------


class PlaceHold:
    """The running bridge: its events, and whether it still holds the places."""

    def __init__(self, coordinator: Coordinator, tags: Mapping[str, str], timeout: float,
                 refresh: float = REFRESH_SECONDS) -> None:
        self.coordinator = coordinator
        self.tags = dict(tags)
        self.timeout = timeout
        self.refresh = refresh
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.lost: str | None = None  # why the places are no longer held, once that happens
        self.released: list[str] | None = None
        self.refreshes = 0  # reservation refreshes the bridge reported (it refreshes on its own timer)
        self._stderr: IO[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        python = labgrid_python()
        argv = [str(python), str(BRIDGE), "--address", str(self.coordinator), "--timeout", f"{self.timeout:g}",
                "--refresh", f"{self.refresh:g}"]
        for key, value in sorted(self.tags.items()):
            argv += ["--tag", f"{key}={value}"]
        self._stderr = tempfile.TemporaryFile()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        # its own session: a terminal's Ctrl-C reaches rkdet, which then releases in order
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                      env=env, start_new_session=True)
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,), name="labgrid-bridge",
                                        daemon=True)
        self._reader.start()

    def _read(self, stdout: IO[bytes]) -> None:
        """The watcher thread: every line the bridge prints (each timed refresh too) is seen here."""
        for raw in iter(lambda: stdout.readline(MAX_LINE), b""):
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            kind = event.get("event")
            if kind == "error" and self.released is None:
                self.lost = visible(str(event.get("message")), 300)
            elif kind == "released":
                self.released = [visible(str(p), 80) for p in event.get("places", [])][:MAX_PLACES]
            elif kind == "alive":
                self.refreshes += 1
                continue  # not queued: a long hold must not grow memory
            elif kind == "wait":
                _say(f"labgrid place {visible(str(event.get('place')), 80)} is "
                     f"{visible(str(event.get('holder')), 120)}; waiting up to {self.timeout:g} s")
            self.events.put(event)
        if self.released is None and self.lost is None:
            tail = self._stderr_tail()
            self.lost = f"labgrid bridge ended unexpectedly{': ' + tail if tail else ''}; the places may still be held"
        self.events.put(None)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = [ln for ln in self._stderr.read()[-4096:].decode("utf-8", "replace").splitlines() if ln.strip()]
        return visible(lines[-1], 200) if lines else ""

    def wait_acquired(self) -> list[FleetBoard]:
        """Block until the bridge holds every matching place (-> Boards) or says why not (BoardError)."""
        deadline = time.monotonic() + self.timeout + STARTUP_SECONDS
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise BoardError(f"labgrid coordinator {self.coordinator}: no answer within "
                                 f"{self.timeout + STARTUP_SECONDS:g} s") from None
            if event is None:
                tail = self._stderr_tail()
                raise BoardError(f"labgrid bridge ended before acquiring places{': ' + tail if tail else ''}")
            kind = event.get("event")
            if kind == "error":
                code = event.get("code")
                if code == EXIT_INTERRUPTED:
                    raise KeyboardInterrupt
                raise BoardError(visible(str(event.get("message")), 300))
            if kind == "acquired":
                places = event.get("places")
                if not isinstance(places, list) or not places or len(places) > MAX_PLACES:
                    raise BoardError(f"labgrid coordinator {self.coordinator}: acquired no usable place")
                return [_board(self.coordinator, p) for p in places]

    def close(self) -> None:
        """Release: close the bridge's stdin (it releases and cancels), wait, then make sure it is gone."""
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=RELEASE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the bridge releases on SIGTERM too
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()


@contextlib.contextmanager
def acquired_boards(address: str | Coordinator, tags: Mapping[str, str] | Sequence[str],
                    timeout: float) -> Iterator[list[FleetBoard]]:
    """Reserve and acquire every place with `tags` on the coordinator (waiting up to `timeout` s for
    busy ones), yield their Boards, and release them however the block ends.

    BoardError (exit 3) names a busy place and its holder, or an unreachable coordinator;
    InputError (exit 2) a bad address or tag. The reservations are refreshed while the block runs.
    """
    coordinator = address if isinstance(address, Coordinator) else parse_coordinator(address)
    wanted = parse_tags([f"{k}={v}" for k, v in tags.items()] if isinstance(tags, Mapping) else tags)
    if not timeout >= 0:
        raise InputError("--reserve-timeout must be 0 or more seconds")
    hold = PlaceHold(coordinator, wanted, timeout)
    hold.start()
    try:
        boards = HeldBoards(hold.wait_acquired(), hold)
        yield boards
    finally:
        hold.close()
        if hold.released:
            _say(f"labgrid: released {', '.join(hold.released)}")


class HeldBoards(list):  # type: ignore[type-arg]
    """The acquired places' Boards (a plain list to callers) plus `lost`: why they are no longer held."""

    def __init__(self, boards: Sequence[FleetBoard], hold: PlaceHold) -> None:
        super().__init__(boards)
        self._hold = hold

    @property
    def lost(self) -> str | None:
        return self._hold.lost


def hold_until_interrupted(boards: Sequence[FleetBoard]) -> None:
    """`--hold`: keep the places until Ctrl-C/SIGTERM (KeyboardInterrupt; the release is the caller's
    context manager's); BoardError if the bridge loses them (coordinator gone, place kicked)."""
    _say(f"holding {len(boards)} labgrid place{'s' if len(boards) != 1 else ''} "
         f"({', '.join(b.name for b in boards)}); Ctrl-C releases")
    while True:
        time.sleep(0.5)
        lost = getattr(boards, "lost", None)
        if lost:
            raise BoardError(lost)
