"""labgrid places as a board source, against a REAL labgrid-coordinator and exporter on 127.0.0.1.

The exporter exports NetworkService resources pointing at a real emulated board (OpenSSH sshd);
labgrid runs from its own venv (requirements/labgrid.lock.txt, made by .ci/setup), as for users.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from bounds import ended_within
from click.testing import CliRunner

from rkdet.emulator.sshd import EmulatedBoard, free_port
from rkdet.link.ssh import BoardConnection, Timeouts
from rkdet.cli import main
from rkdet.errors import BoardError, InputError
from rkdet.fleets.sources.labgrid_places import (
    Coordinator,
    _board,
    acquired_boards,
    labgrid_python,
    parse_coordinator,
    parse_tags,
)

REPO = Path(__file__).resolve().parents[2]
FAST = Timeouts(connect=5, banner=5, auth=5, command=30, keepalive=5)
ALICE = {"LG_USERNAME": "alice", "LG_HOSTNAME": "labpc"}

# what the coordinator knows: place -> (tags, exporter group); every group is a NetworkService
PLACES = {"rock5-a": ("soc=rk3588", "grp-a"), "rock5-b": ("soc=rk3588", "grp-b"), "roc-a": ("soc=rk3568", "grp-c"),
          "evil": ("soc=evil", "grp-evil")}

_SETUP = """
import json, sys
from labgrid.remote.client import start_session
from labgrid.remote.generated import labgrid_coordinator_pb2 as pb
s = start_session(sys.argv[1])
want = json.loads(sys.argv[2])
while sum(len(g) for groups in s.resources.values() for g in groups.values()) < len(want):
    s.loop.run_until_complete(s.sync_with_coordinator())  # the exporter's resources arrive on the stream
for name, (tag, group) in want.items():
    key, value = tag.split("=")
    s.loop.run_until_complete(s.stub.AddPlace(pb.AddPlaceRequest(name=name)))
    s.loop.run_until_complete(s.stub.AddPlaceMatch(pb.AddPlaceMatchRequest(placename=name,
                                                                           pattern=f"exp/{group}/NetworkService")))
    s.loop.run_until_complete(s.stub.SetPlaceTags(pb.SetPlaceTagsRequest(placename=name, tags={key: value})))
s.loop.run_until_complete(s.stop())
"""

_STATE = """
import asyncio, json, sys
from labgrid.remote.client import start_session
from labgrid.remote.generated import labgrid_coordinator_pb2 as pb
s = start_session(sys.argv[1])
res = s.loop.run_until_complete(s.stub.GetReservations(pb.GetReservationsRequest()))
print(json.dumps({"acquired": {n: p.acquired for n, p in s.places.items()},
                  "reservations": [r.owner for r in res.reservations]}))
s.loop.run_until_complete(s.stop())
"""


@dataclass
class Lab:
    address: str
    bin: Path
    board: EmulatedBoard

    def client(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / "labgrid-client"), "-x", self.address, *args], capture_output=True,
                              text=True, timeout=60, env={**_clean_env(), **(env or {})}, check=True)

    def state(self) -> dict:
        done = subprocess.run([str(self.bin / "python"), "-c", _STATE, self.address], capture_output=True, text=True,
                              timeout=60, env=_clean_env(), check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    def held(self) -> dict[str, str]:
        return {n: who for n, who in self.state()["acquired"].items() if who}


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def _rkdet(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})


def _spawn(argv: list[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=_clean_env(),
                                start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for(what: str, check, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    try:
        python = labgrid_python()
    except InputError as err:  # not a skip: the lab tests are core; .ci/setup makes this venv
        pytest.fail(f"labgrid venv missing (run .ci/setup): {err}")
    bin_dir = python.parent
    root = tmp_path_factory.mktemp("labgrid")
    board = EmulatedBoard("rk3588", root / "board").start()
    port = free_port()
    address = f"127.0.0.1:{port}"
    groups = {}
    for _, group in PLACES.values():
        user = "-oProxyCommand=touch /tmp/pwned" if group == "grp-evil" else board.user
        groups[group] = {"NetworkService": {"address": board.host, "username": user, "port": board.port}}
    (root / "exporter.yaml").write_text(json.dumps(groups))  # JSON is YAML
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_spawn([str(bin_dir / "labgrid-coordinator"), "-l", address], root, root / "coordinator.log"))
        _wait_for("the coordinator", lambda: "listening on" in (root / "coordinator.log").read_text())
        procs.append(_spawn([str(bin_dir / "labgrid-exporter"), "-c", address, "--name", "exp",
                             str(root / "exporter.yaml")], root, root / "exporter.log"))
        lab = Lab(address, bin_dir, board)
        # the places, as an admin's `labgrid-client create / add-match / set-tags` would make them
        subprocess.run([str(python), "-c", _SETUP, address, json.dumps(PLACES)], env=_clean_env(), timeout=60,
                       check=True)
        yield lab
    finally:
        for proc in reversed(procs):
            _stop(proc)
        board.stop()


@pytest.fixture
def clean(lab: Lab) -> Iterator[Lab]:
    """Each test starts and must end with nothing acquired and no reservation on the coordinator."""
    state = lab.state()
    assert set(state["acquired"]) == set(PLACES) and not any(state["acquired"].values()), state
    assert state["reservations"] == [], state
    yield lab
    for name, who in lab.held().items():  # a failed test must not hold places for the next one
        if who == "labpc/alice":
            lab.client("-p", name, "release", env=ALICE)
    state = lab.state()
    assert not any(state["acquired"].values()) and not state["reservations"], state


def test_acquires_matching_places_and_their_ssh_details_reach_the_board(clean: Lab) -> None:
    lab = clean
    with acquired_boards(lab.address, {"soc": "rk3588"}, timeout=20) as boards:
        assert [b.name for b in boards] == ["rock5-a", "rock5-b"]
        state = lab.state()
        holders = {n: w for n, w in state["acquired"].items() if w}
        assert set(holders) == {"rock5-a", "rock5-b"}  # roc-a (rk3568) and evil untouched
        assert len(state["reservations"]) == 2
        for b in boards:
            assert (b.address, b.port, b.user, b.soc, b.tags, b.source) == (
                lab.board.host, lab.board.port, lab.board.user, "rk3588", ("soc=rk3588",), "labgrid")
            conn = BoardConnection.open(b.address, user=b.user, port=b.port, identity=lab.board.identity_file,
                                        known_hosts=lab.board.known_hosts_file, system_known_hosts=None,
                                        ssh_config=None, allow_agent=False, timeouts=FAST)
            try:
                assert conn.run(["echo", b.name]).out.strip() == b.name
            finally:
                conn.close()
    state = lab.state()
    assert not any(state["acquired"].values()) and state["reservations"] == []


def test_an_exception_in_the_block_releases(clean: Lab) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with acquired_boards(clean.address, {"soc": "rk3568"}, timeout=20) as boards:
            assert [b.name for b in boards] == ["roc-a"] and clean.held() == {"roc-a": clean.held()["roc-a"]}
            raise RuntimeError("boom")
    # the clean fixture's teardown checks the coordinator: nothing acquired, no reservation


def test_reservation_is_refreshed_while_held(clean: Lab) -> None:
    """The bridge polls each reservation on a timer; its watcher sees every refresh."""
    from rkdet.fleets.sources import labgrid_places
    hold = labgrid_places.PlaceHold(parse_coordinator(clean.address), {"soc": "rk3568"}, 20, refresh=0.5)
    hold.start()
    try:
        assert [b.name for b in hold.wait_acquired()] == ["roc-a"]
        _wait_for("three refreshes", lambda: hold.refreshes >= 3, timeout=20)
        assert hold.events.empty()  # refreshes are counted, not queued
        assert clean.held() == {"roc-a": clean.held()["roc-a"]} and hold.lost is None
    finally:
        hold.close()
    assert hold.released == ["roc-a"]


def test_busy_place_is_waited_for_then_acquired(clean: Lab) -> None:
    clean.client("-p", "rock5-a", "acquire", env=ALICE)
    releaser = threading.Timer(2.0, lambda: clean.client("-p", "rock5-a", "release", env=ALICE))
    releaser.start()
    started = time.monotonic()
    try:
        with acquired_boards(clean.address, {"soc": "rk3588"}, timeout=30) as boards:
            waited = time.monotonic() - started
            assert [b.name for b in boards] == ["rock5-a", "rock5-b"]
            assert "labpc/alice" not in clean.held().values()
    finally:
        releaser.join()
    assert waited >= 2.0


def test_busy_place_times_out_with_exit_3_naming_place_and_holder(clean: Lab) -> None:
    clean.client("-p", "rock5-b", "acquire", env=ALICE)
    started = time.monotonic()
    done = _rkdet("fleet", "hosts", "--labgrid", clean.address, "--tags", "soc=rk3588", "--reserve-timeout", "2")
    elapsed = time.monotonic() - started
    assert done.returncode == 3, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("rkdet: labgrid place rock5-b is acquired by labpc/alice; waited 2 s (--reserve-timeout)")
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert elapsed >= 2.0 and ended_within(started, 2.0)
    assert clean.held() == {"rock5-b": "labpc/alice"}  # rock5-a was allocated to us meanwhile: given back
    assert clean.state()["reservations"] == []


def test_a_place_held_by_ourselves_says_so(clean: Lab) -> None:
    """A stale acquisition by this user and host (an earlier session) is named as ours, with the way out."""
    clean.client("-p", "roc-a", "acquire")
    try:
        done = _rkdet("fleet", "hosts", "--labgrid", clean.address, "--tags", "soc=rk3568", "--reserve-timeout", "1")
        assert done.returncode == 3
        assert "(you: an earlier run or session? `labgrid-client -p roc-a release` if it is stale)" in done.stderr
    finally:
        clean.client("-p", "roc-a", "release")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_hold_is_released_on_interrupt(clean: Lab, sig: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "rkdet.cli", "fleet", "hosts", "--labgrid", clean.address,
                             "--tags", "soc=rk3588", "--hold", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stderr is not None and proc.stdout is not None
        line = proc.stderr.readline()
        while line and "holding" not in line:
            line = proc.stderr.readline()
        assert "holding 2 labgrid places (rock5-a, rock5-b)" in line
        state = clean.state()
        assert set(n for n, w in state["acquired"].items() if w) == {"rock5-a", "rock5-b"}
        assert len(state["reservations"]) == 2
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert [b["name"] for b in json.loads(out)["boards"]] == ["rock5-a", "rock5-b"]
    assert "labgrid: released rock5-a, rock5-b" in err
    # the clean fixture's teardown asks the coordinator: no place acquired, no reservation left


def test_places_are_released_even_when_rkdet_is_killed(clean: Lab) -> None:
    """SIGKILL leaves rkdet no say: the bridge sees its stdin close and releases by itself."""
    proc = subprocess.Popen([sys.executable, "-m", "rkdet.cli", "fleet", "hosts", "--labgrid", clean.address,
                             "--tags", "soc=rk3568", "--hold"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        while line and "holding" not in line:
            line = proc.stderr.readline()
        assert "holding 1 labgrid place (roc-a)" in line
        assert set(clean.held()) == {"roc-a"}
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _wait_for("the orphaned bridge's release", lambda: not clean.held() and not clean.state()["reservations"],
              timeout=40)


def test_coordinator_not_there_is_one_line_exit_3_within_the_timeout() -> None:
    port = free_port()
    started = time.monotonic()
    done = _rkdet("fleet", "hosts", "--labgrid", f"127.0.0.1:{port}", "--tags", "soc=rk3588",
                  "--reserve-timeout", "3")
    elapsed = time.monotonic() - started
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert lines == [f"rkdet: labgrid coordinator 127.0.0.1:{port} is not reachable (no answer within 3 s); "
                     "check --labgrid HOST:PORT and that labgrid-coordinator runs there"], done.stderr
    assert ended_within(started, 3)


def test_untrusted_username_from_the_coordinator_is_refused_and_released(clean: Lab) -> None:
    done = _rkdet("fleet", "hosts", "--labgrid", clean.address, "--tags", "soc=evil", "--reserve-timeout", "10")
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "rkdet: labgrid place evil: NetworkService username '-oProxyCommand=touch /tmp/pwned' holds spaces or "
        "control characters")
    # released: the clean fixture checks


def test_no_matching_place_is_exit_3_naming_the_places(clean: Lab) -> None:
    done = _rkdet("fleet", "hosts", "--labgrid", clean.address, "--tags", "soc=rk3399", "--reserve-timeout", "5")
    assert done.returncode == 3
    assert done.stderr.strip() == (f"rkdet: labgrid coordinator {clean.address} has no place with tags soc=rk3399 "
                                   "(places: evil, roc-a, rock5-a, rock5-b)")


# ---- the checks on flags and on coordinator values (no coordinator needed) ---------------------------


@pytest.mark.parametrize("text, expected", [("lab:20408", Coordinator("lab", 20408)), ("lab", Coordinator("lab", 20408)),
                                            ("[::1]:5", Coordinator("[::1]", 5)), ("10.0.0.1:1", Coordinator("10.0.0.1", 1))])
def test_parse_coordinator(text: str, expected: Coordinator) -> None:
    assert parse_coordinator(text) == expected


@pytest.mark.parametrize("text", ["a b:1", "-oX:1", "lab:0", "lab:70000", "lab:x", "", "lab\n:1"])
def test_parse_coordinator_refuses(text: str) -> None:
    with pytest.raises(InputError, match="--labgrid"):
        parse_coordinator(text)


def test_parse_tags() -> None:
    assert parse_tags(["soc=rk3588", "vendor=radxa,lab=b2"]) == {"soc": "rk3588", "vendor": "radxa", "lab": "b2"}
    for bad in (["soc"], ["Soc=x"], ["soc=a b"], ["soc=x", "soc=y"], [], ["soc=$(x)"]):
        with pytest.raises(InputError):
            parse_tags(bad)


def test_cli_usage_errors_are_exit_2() -> None:
    for args, msg in ((["--tags", "soc=x", "--board", "b"], "--tags selects labgrid places"),
                      (["--board", "b", "--hold"], "--hold keeps labgrid places"),
                      (["--labgrid", "lab:1", "--board", "b"], "give one board source"),
                      (["--labgrid", "lab:1"], "--labgrid needs --tags")):
        done = CliRunner().invoke(main, ["fleet", "hosts", *args])
        assert done.exit_code == 2 and done.output.startswith("rkdet: ") and msg in done.output, (args, done.output)
        assert len(done.output.strip().splitlines()) == 1


@pytest.mark.parametrize("place, message", [
    ({"name": "p", "network_services": []}, "labgrid place p has no NetworkService resource"),
    ({"name": "p", "network_services": [{"address": "a b", "username": "u", "port": 22}]}, "address 'a b' holds spaces"),
    ({"name": "p", "network_services": [{"address": "-oProxyCommand=x", "username": "u"}]}, "must not start with '-'"),
    ({"name": "p", "network_services": [{"address": "h", "username": "u", "port": 0}]}, "port '0' is not a port"),
    ({"name": "p", "network_services": [{"address": "h", "username": "u", "port": True}]}, "is not a port"),
    ({"name": "p\x1b[2J", "network_services": [{"address": "h", "username": "u"}]}, "place name 'p\\\\x1b[2J'"),
    ({"name": "p", "network_services": [{"address": "h", "username": None}]}, "username must be text"),
    ({"name": "p", "network_services": [{"name": "a", "address": "h", "username": "u"},
                                        {"name": "b", "address": "h", "username": "u"}]}, "needs exactly one"),
])
def test_coordinator_values_are_checked_like_inventory_values(place: dict, message: str) -> None:
    with pytest.raises(BoardError, match=None) as info:
        _board(Coordinator("lab", 1), place)
    assert message in str(info.value)


def test_coordinator_tags_that_are_not_words_are_left_out() -> None:
    b = _board(Coordinator("lab", 1), {"name": "p", "tags": {"soc": "RK3588", "x": "a\x1bb", "note": "two words"},
                                       "network_services": [{"address": "h", "username": "u", "port": 2}]})
    assert (b.soc, b.tags, b.port, b.source) == ("rk3588", ("soc=RK3588",), 2, "labgrid")
