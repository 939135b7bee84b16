"""`rkdet emulator fleet` / `EmulatedFleet`: N real emulated boards (sshd + FUSE sysfs each), an inventory
that `load_inventory` reads back, and the TEST CONTROL kinds observable on their boards.

One 4-board fleet of mixed SoCs for the module: 0 rk3588 core-drift, 1 rk3568 runtime-drift,
2 rv1126 drop, 3 rk3588 hot. The runtime double runs on the boards through a real SSH session (a tiny
ONNX model made here); the drop test runs last (its board stays down) and the last test stops the
fleet and checks the host is as found.
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
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from host_leftovers import children, inventory
from process_tree import leftovers, tree_argv
from bounds import ended_within

from rkdet.link import jobs
from rkdet.link.ssh import BoardConnection, Timeouts
from rkdet.cli import main
from rkdet.emulator.fleet import DRIFT_RUNTIME, EmulatedFleet, FleetMember
from rkdet.errors import BoardError
from rkdet.fleets.sources.inventory import FleetBoard, load_inventory, select, write_inventory

FAST = Timeouts(connect=5, banner=5, auth=5, command=30, keepalive=5)
KINDS = {0: "core-drift", 1: "runtime-drift", 2: "drop", 3: "hot"}
NPU_CORE_0, NPU_CORE_0_1_2, NPU_CORE_AUTO = 1, 7, 0

# runs ON the board (the emulated runtime from the board's PYTHONPATH): output bits as uint32
RUN = r"""
import json, sys, time
import numpy as np
from rknnlite.api import RKNNLite
model, mask, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lite = RKNNLite()
assert lite.load_rknn(model) == 0
assert lite.init_runtime(core_mask=mask) == 0
x = (np.arange(48, dtype=np.uint8) * 5).reshape(1, 4, 4, 3)
out = lite.inference([x])[0]
print(json.dumps({"sdk": lite.get_sdk_version(), "bits": out.reshape(-1).view(np.uint32).tolist()}), flush=True)
time.sleep(hold)
"""


# runs ON a drop board as a detached job: whether the board's sshd still listened when init_runtime
# returned (the drop board's runtime is held until its link is cut), then an inference and "done"
DROP_RUN = r"""
import socket, sys
import numpy as np
from rknnlite.api import RKNNLite
model, port, done = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lite = RKNNLite()
assert lite.load_rknn(model) == 0
assert lite.init_runtime(core_mask=0) == 0
try:
    socket.create_connection(("127.0.0.1", port), timeout=10).close()
    link = "listening"
except OSError:
    link = "refused"
assert lite.inference([(np.arange(48, dtype=np.uint8) * 5).reshape(1, 4, 4, 3)]) is not None
open(done, "w").write("link at init: %s\n" % link)
"""


def _tiny_model(folder: Path, uid: int) -> str:
    """model.rknn (a stand-in) and model.onnx (what the double computes: x * 2) in a board's home."""
    x = onnx.helper.make_tensor_value_info("images", onnx.TensorProto.FLOAT, [1, 3, 4, 4])
    y = onnx.helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [1, 3, 4, 4])
    two = onnx.helper.make_tensor("two", onnx.TensorProto.FLOAT, [], [2.0])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Mul", ["images", "two"], ["out"])], "tiny", [x], [y], [two])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, folder / "model.onnx")
    (folder / "model.rknn").write_bytes(b"RKNN stand-in for the emulated runtime")
    for name in ("model.onnx", "model.rknn"):
        os.chown(folder / name, uid, uid)
    return str(folder / "model.rknn")


@pytest.fixture(scope="module")
def fleet() -> Iterator[EmulatedFleet]:
    with EmulatedFleet(4, ("rk3588", "rk3568", "rv1126"), KINDS) as fl:
        yield fl


def _connect(fb: FleetMember, inv_path: Path) -> BoardConnection:
    """A connection made only from the inventory's record (strict host keys: its known_hosts)."""
    rec = next(b for b in select(load_inventory(inv_path), fb.name))
    return BoardConnection.open(f"{rec.address}:{rec.port}", user=rec.user, identity=Path(rec.key_file),
                                known_hosts=Path(rec.known_hosts), system_known_hosts=None, ssh_config=None,
                                allow_agent=False, timeouts=FAST)


def _run(fb: FleetMember, mask: int, hold: float = 0.0) -> dict:
    model = _tiny_model(fb.board.home, fb.board.account.uid)
    with fb.board.connect(timeouts=FAST) as conn:
        res = conn.run(["python3", "-c", RUN, model, str(mask), str(hold)], timeout=60)
    return json.loads(res.out.strip().splitlines()[-1])


def test_inventory_reads_back_with_socs_groups_ports_and_strict_host_keys(fleet: EmulatedFleet) -> None:
    inv = load_inventory(fleet.inventory_path)
    boards = select(inv, None)
    # listed group by group (ansible-inventory's tree, which both engines follow); SoCs round-robin
    assert [b.name for b in boards] == ["emu0-rk3588", "emu3-rk3588", "emu1-rk3568", "emu2-rv1126"]
    assert [b.soc for b in boards] == ["rk3588", "rk3588", "rk3568", "rv1126"]
    assert {b.name: b.port for b in boards} == {fb.name: fb.board.port for fb in fleet.boards}
    assert len({b.port for b in boards}) == 4
    assert [b.name for b in select(inv, "rk3588")] == ["emu0-rk3588", "emu3-rk3588"]  # a group per SoC
    assert [b.name for b in select(inv, "all:!rk3588")] == ["emu1-rk3568", "emu2-rv1126"]
    by_name = {b.name: b for b in boards}
    for fb in fleet.boards:
        b = by_name[fb.name]
        assert (b.address, b.user, b.key_file, b.sudo) == ("127.0.0.1", fb.board.user, str(fleet.identity_file), True)
        assert fb.board.identity_file.read_bytes() == fleet.identity_file.read_bytes()  # one key for the fleet
        assert b.known_hosts == str(fleet.known_hosts_file) and b.workdir and b.tags == ("emulated", KINDS[fb.index])
        assert f"[127.0.0.1]:{b.port} " in Path(b.known_hosts).read_text()
    for fb in fleet.boards:  # reachable from the inventory alone: a real command over SSH, on its own board
        with _connect(fb, fleet.inventory_path) as conn:
            out = conn.run(["sh", "-c", 'echo "$RKDET_ROOT"; grep -ao "librkn[a-z_]* version[: ]*[0-9.]*" '
                                        '"$RKDET_ROOT"/usr/lib/librknn*.so']).out.split("\n")
        assert out[0] == str(fb.board.root)
        expected = fb.board.profile.runtime_version.split(" (")[0]
        assert out[1] == expected
    assert "2.3.2" in fleet.boards[1].board.profile.runtime_version  # runtime-drift: another librknnrt
    assert fleet.boards[1].board.profile.runtime_version == DRIFT_RUNTIME["librknnrt"]


def test_runtime_drift_and_core_drift_move_one_element(fleet: EmulatedFleet) -> None:
    core, drift, hot = fleet.boards[0], fleet.boards[1], fleet.boards[3]
    core0 = _run(core, NPU_CORE_0)
    core012 = _run(core, NPU_CORE_0_1_2)
    drifted = _run(drift, NPU_CORE_AUTO)
    plain = _run(hot, NPU_CORE_0_1_2)  # a board without drift: every core mask gives the reference bits
    ref = np.array(core0["bits"], dtype=np.uint32)
    assert np.array_equal(np.array(plain["bits"], dtype=np.uint32), ref)
    for other in (core012, drifted):
        diff = np.flatnonzero(np.array(other["bits"], dtype=np.uint32) != ref)
        assert diff.tolist() == [0]  # exactly one element, one LSB
        assert int(other["bits"][0]) ^ int(ref[0]) == 1
    assert np.array_equal(np.array(_run(core, NPU_CORE_AUTO)["bits"], dtype=np.uint32), ref)  # only 0_1_2 drifts
    assert "librknnrt version: 2.3.2" in drifted["sdk"] and "2.3.2" not in core0["sdk"]
    assert _run(drift, NPU_CORE_AUTO)["bits"] == drifted["bits"]  # the same on every call: a determinism class


def _npu_max(conn: BoardConnection, fb: FleetMember) -> int:
    npu = fb.board.profile.devfreq_of("npu")
    return int(conn.run(["sh", "-c", f'cat "$RKDET_ROOT/sys/class/devfreq/{npu.name}/max_freq"']).out)


def test_hot_board_is_capped_while_its_runtime_runs(fleet: EmulatedFleet) -> None:
    fb = fleet.boards[3]
    npu = fb.board.profile.devfreq_of("npu")
    top = max(npu.frequencies_hz)
    cap = next(c.max_hz for c in fb.board.profile.thermal_caps if c.node == npu.name)
    with fb.board.connect(timeouts=FAST) as conn:
        assert _npu_max(conn, fb) == top
        since = time.monotonic()
        worker = threading.Thread(target=_run, args=(fb, NPU_CORE_AUTO, 2.0))
        worker.start()
        try:
            on = fleet.wait_event(3, "hot-on", timeout=30, since=since)
            assert _npu_max(conn, fb) == cap < top  # the vendor thermal cap, as the board shows it
        finally:
            worker.join(timeout=60)
        off = fleet.wait_event(3, "hot-off", timeout=10, since=since)
        assert off.pid == on.pid
        assert _npu_max(conn, fb) == top  # released once the runtime process ended
    assert not [e for e in fleet.events if e.index != 3 and e.what.startswith("hot")]


def test_labgrid_lab_has_a_place_per_board_that_reaches_it(fleet: EmulatedFleet) -> None:
    """A real coordinator + exporter: places tagged soc/kind, acquired through rkdet's labgrid source."""
    from rkdet.emulator.fleet_labgrid import FleetLab
    from rkdet.fleets.sources.labgrid_places import acquired_boards

    with FleetLab(fleet) as lab:
        assert set(lab.places) == {fb.name for fb in fleet.boards}
        with acquired_boards(lab.address, {"soc": "rk3588"}, timeout=30) as held:
            assert [(b.name, b.port, b.user) for b in held] == [
                (fb.name, fb.board.port, fb.board.user) for fb in (fleet.boards[0], fleet.boards[3])]
            assert set(held[1].tags) == {"kind=hot", "soc=rk3588"}
            with BoardConnection.open(held[0].address, port=held[0].port, user=held[0].user,
                                      identity=fleet.identity_file, known_hosts=fleet.known_hosts_file,
                                      system_known_hosts=None, ssh_config=None, allow_agent=False,
                                      timeouts=FAST) as conn:
                assert conn.run(["sh", "-c", 'echo "$RKDET_ROOT"']).out.strip() == str(fleet.boards[0].board.root)
        with acquired_boards(lab.address, {"kind": "drop"}, timeout=30) as held:
            assert [b.name for b in held] == ["emu2-rv1126"]
        procs = list(lab._procs)  # noqa: SLF001
    assert all(p.poll() is not None for p in procs)  # coordinator and exporter stopped with the lab


def test_drop_cuts_the_link_once_the_runtime_starts_and_the_detached_job_runs_on(fleet: EmulatedFleet) -> None:
    fb = fleet.boards[2]
    model = _tiny_model(fb.board.home, fb.board.account.uid)
    done = fb.board.home / "job.done"
    conn = _connect(fb, fleet.inventory_path)
    try:
        jobs.start(conn, ["python3", "-c", DROP_RUN, model, str(fb.board.port), str(done)], "~/job.pid", "~/job.log")
        ev = fleet.wait_event(2, "drop", timeout=30)
        assert fleet.boards[2].dropped and not fb.board.running
        started = time.monotonic()
        with pytest.raises(BoardError, match="Connection reset|closed|EOF|not active"):  # died with the link
            conn.run(["true"], timeout=10)
        assert ended_within(started, 10)
    finally:
        conn.close()
    with pytest.raises(BoardError):  # and nothing answers any more
        _connect(fb, fleet.inventory_path)
    deadline = time.monotonic() + 30
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    # the detached job (the pinned run) went on without the link, and only once it was gone: however fast
    # the run, it cannot finish before its drop (CI once saw a drop board's deploy complete)
    assert done.read_text() == "link at init: refused\n"
    assert ev.pid > 0 and not fleet.crashed()
    assert all(fleet.boards[i].board.running for i in (0, 1, 3))  # the other boards are untouched


def test_stop_leaves_the_host_as_found(fleet: EmulatedFleet) -> None:
    workdir = fleet.workdir
    uids = [fb.board.account.uid for fb in fleet.boards]
    roots = [fb.board.root for fb in fleet.boards]
    before = inventory([])
    fleet.stop()
    after = inventory([workdir], uids, roots)
    assert after.new_since(before) == {k: [] for k in after.new_since(before)}, after
    assert not after.processes and not after.mounts
    assert not workdir.exists()


def test_inventory_writer_round_trips_through_the_reader(tmp_path: Path) -> None:
    """write_inventory is the one writer of what load_inventory reads: records come back equal."""
    boards = [FleetBoard(name="b-one", address="10.0.0.7", port=2222, user="root", key_file="/keys/lab key", soc="rk3588",
                    sudo=False, workdir="/data/rkdet", known_hosts="/etc/rkdet/known_hosts", tags=("shelf-2", "kind=x"),
                    groups=("rk3588",)),
              FleetBoard(name="plain", address="plain"),  # no vars at all, no group: directly in all
              FleetBoard(name="c", address="c.lab", soc="rv1126", sudo=True, groups=("rv1126",))]
    path = write_inventory(tmp_path / "inv.yaml", boards, comment="made by a test\nsecond line")
    assert path.read_text().startswith("# made by a test\n# second line\nall:\n")
    # vars, groups, source "inventory"; listed as ansible-inventory's tree: ungrouped first, then group by group
    assert select(load_inventory(path), None) == [boards[1], boards[0], boards[2]]
    assert [b.name for b in select(load_inventory(path), "rv1126")] == ["c"]


def test_a_malformed_image_runtime_control_fails_init_runtime(tmp_path: Path) -> None:
    """The runtime double reads $RKDET_ROOT/etc/rkdet-emulator/runtime.json; a bad one is -1, not ignored."""
    from rkdet.emulator.fake_tree import RUNTIME_CONTROL
    from rkdet.emulator.sshd import RUNTIME_DOUBLE

    (tmp_path / RUNTIME_CONTROL).parent.mkdir(parents=True)
    _tiny_model(tmp_path, os.getuid())
    script = ("import sys; from rknnlite.api import RKNNLite; r = RKNNLite(); assert r.load_rknn(sys.argv[1]) == 0; "
              "print(r.init_runtime(core_mask=7))")
    for text, want in (("[1, 2]", "-1"), ('{"drift": {"index": "x"}}', "-1"), ('{"core_drift": {}}', "0")):
        (tmp_path / RUNTIME_CONTROL).write_text(text)
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "model.rknn")], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(RUNTIME_DOUBLE),
                                                          "RKDET_ROOT": str(tmp_path)})
        assert done.stdout.strip() == want, (text, done.stderr)
        if want == "-1":
            assert "bad image test control" in done.stderr


def test_cli_refuses_bad_variants_in_one_line() -> None:
    runner = CliRunner()
    for args, words in ((["--count", "2", "--variant", "5=hot"], "outside the fleet"),
                        (["--count", "2", "--variant", "1=warm"], "unknown kind"),
                        (["--count", "2", "--variant", "1=hot"], "hot needs"),
                        (["--count", "3", "--variant", "2=core-drift"], "core-drift needs"),
                        (["--count", "1", "--socs", "rk9999"], "unknown SoC")):
        res = runner.invoke(main, ["emulator", "fleet", *args])
        assert res.exit_code == 2, res.output
        assert words in res.output and "Traceback" not in res.output


def _rkdet_child(wrapper: int, cmd: list[str]) -> int:
    """The wrapper's child that runs `cmd`: the wrapper is a subreaper, so a descendant orphaned on the way
    (a daemon's first fork) can be its child too for a moment, beside rkdet."""
    for pid in children(wrapper):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] == [os.fsencode(a) for a in cmd]:
                return pid
        except OSError:
            continue
    raise AssertionError(f"rkdet is not a child of its wrapper (children: {children(wrapper)})")


def _stop_wrapped(proc: subprocess.Popen, cmd: list[str]) -> None:
    """After a failure too: SIGTERM rkdet so it stops its fleet (boards, lab), then the wrapper reaps the rest."""
    if proc.poll() is not None:
        return
    try:
        os.kill(_rkdet_child(proc.pid, cmd), signal.SIGTERM)
        proc.wait(timeout=60)
    except (AssertionError, OSError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_cli_writes_the_inventory_runs_a_lab_and_stops_on_sigterm_leaving_no_process(tmp_path: Path) -> None:
    inv_path, report = tmp_path / "fleet.yaml", tmp_path / "tree.json"
    cmd = [sys.executable, "-m", "rkdet.cli", "emulator", "fleet", "--count", "2", "--socs", "rk3568", "--variant",
           "1=standard", "--sysfs", "plain", "--inventory", str(inv_path), "--labgrid"]
    proc = subprocess.Popen(tree_argv(cmd, report, grace=5.0), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        lines = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("labgrid coordinator:"):
                break
        boards = select(load_inventory(inv_path), None)
        assert [(b.soc, b.sudo, b.tags) for b in boards] == [("rk3568", True, ("emulated", "sudo")),
                                                              ("rk3568", False, ("emulated", "standard"))]
        assert any(line.startswith("inventory:") and str(inv_path) in line for line in lines)
        assert "2 places: emu0-rk3568, emu1-rk3568" in lines[-1]
        with BoardConnection.open(f"127.0.0.1:{boards[0].port}", user=boards[0].user, identity=Path(boards[0].key_file),
                                  known_hosts=Path(boards[0].known_hosts), system_known_hosts=None, ssh_config=None,
                                  allow_agent=False, timeouts=FAST) as conn:
            assert conn.run(["sudo", "-n", "id", "-u"]).out == "0\n"
        fleet_dir = Path(boards[0].known_hosts).parent
        os.kill(_rkdet_child(proc.pid, cmd), signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert "emulated fleet stopped" in proc.stderr.read()
        assert not fleet_dir.exists() and inv_path.exists()  # the fleet's temp dir went; the asked-for file stays
        assert leftovers(report) == []  # no sshd, FUSE daemon, reaper, coordinator or exporter outlived it
    finally:
        _stop_wrapped(proc, cmd)
