"""Issue 30 (third trust round), the inventory findings: a crafted inventory, folder or pattern gets one
line and a documented exit code on BOTH engines, runs no program unasked, reads and writes no host file
outside its folder, and costs bounded time and memory; interrupting rkdet leaves no ansible-inventory.

The ansible-core engine is the real one from the venv .ci/setup builds (required, never skipped); where a
test needs ansible-inventory to misbehave on cue, a stand-in program plays it (named as such)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

from rkdet.errors import InputError
from rkdet.fleets.sources import ansible_engine
from rkdet.fleets.sources.inventory import load_inventory, select
from rkdet.link import hostkeys
from rkdet.link.target import Target, check_identity
from tests.process_tree import leftovers, tree_argv

ENGINES = ("native", "ansible")
SECRET = "hunter2-CANARY-9f3b"


@pytest.fixture(scope="module")
def ansible_program() -> Path:
    program = ansible_engine.find_program()
    if program is None:
        pytest.fail(f"ansible-core venv missing: run .ci/setup (it builds {ansible_engine.DEFAULT_VENV}), "
                    "or set RKDET_ANSIBLE_VENV")
    return program


def rkdet(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), full.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=full, timeout=timeout, stdin=subprocess.DEVNULL)


def one_line(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The refusal: the exit code, nothing on stdout, exactly one `rkdet: ` line on stderr."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rkdet: "), done.stderr
    return lines[0]


def hosts(inv: Path, engine: str, *extra: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return rkdet("fleet", "hosts", "--inventory", str(inv), "--inventory-engine", engine, *extra, cwd=cwd)


def canary_script(folder: Path, name: str = "dyn.sh") -> tuple[Path, Path]:
    marker = folder / "RAN"
    script = folder / name
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho '{{\"lab\": {{\"hosts\": [\"s1\"]}}}}'\n")
    script.chmod(0o755)
    return script, marker


# ---- 3: no inventory program or plugin runs unasked -----------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_an_executable_inventory_is_not_run_by_default(tmp_path: Path, engine: str, ansible_program: Path) -> None:
    script, marker = canary_script(tmp_path)
    line = one_line(hosts(script, engine))
    assert line == (f"rkdet: {script}: an executable inventory (a program Ansible would run); rkdet runs inventory "
                    "programs only when asked: --inventory-programs (ansible-core engine), or chmod -x it if it is "
                    "a plain inventory")
    assert not marker.exists()
    folder = tmp_path / "inv.d"  # a folder of sources holding a program: the same
    folder.mkdir()
    (folder / "a.ini").write_text("[g]\na\n")
    inner, inner_marker = canary_script(folder, "z.sh")
    if engine == "ansible":
        assert "an executable file in the inventory folder" in one_line(hosts(folder, engine))
        assert not inner_marker.exists()


def test_inventory_programs_run_only_when_asked_and_are_named(tmp_path: Path, ansible_program: Path) -> None:
    script, marker = canary_script(tmp_path)
    done = hosts(script, "ansible", "--inventory-programs", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [b["name"] for b in out["boards"]] == ["s1"] and marker.exists()
    assert f"programs run: {script}" in out["engine"] and "inventory programs allowed" in out["engine"]
    marker.unlink()
    done = rkdet("fleet", "hosts", "--inventory", str(script), "--inventory-engine", "ansible", "--json",
                 env={"RKDET_INVENTORY_PROGRAMS": "1"})  # the same opt-in from the environment
    assert done.returncode == 0 and marker.exists(), done.stderr
    line = one_line(hosts(script, "native", "--inventory-programs"))
    assert "--inventory-programs needs the ansible-core engine" in line


def _vars_plugin_lab(root: Path) -> tuple[Path, Path]:
    """A colleague's lab repository: ansible.cfg loading a vars plugin from ./vp that leaves a marker."""
    (root / "vp").mkdir(parents=True)
    (root / "vp" / "canary.py").write_text(
        "import os\nfrom ansible.plugins.vars import BaseVarsPlugin\n"
        "class VarsModule(BaseVarsPlugin):\n    REQUIRES_ENABLED = False\n"
        "    def get_vars(self, loader, path, entities, cache=True):\n"
        "        open(os.path.join(os.path.dirname(__file__), 'RAN'), 'w').close()\n        return {}\n")
    (root / "ansible.cfg").write_text("[defaults]\nvars_plugins = ./vp\nvars_plugins_enabled = host_group_vars,canary\n")
    (root / "inv.ini").write_text("[g]\na\n")
    return root / "inv.ini", root / "vp" / "RAN"


def test_an_ansible_cfg_in_the_current_folder_is_loaded_only_when_asked(tmp_path: Path,
                                                                        ansible_program: Path) -> None:
    lab = tmp_path / "lab"
    inv, marker = _vars_plugin_lab(lab)
    done = hosts(inv, "ansible", "--json", cwd=lab)
    assert done.returncode == 0, done.stderr
    assert "no ansible.cfg, no inventory programs or plugins" in json.loads(done.stdout)["engine"]
    assert not marker.exists()
    done = hosts(inv, "ansible", "--json", "--inventory-programs", cwd=lab)
    assert done.returncode == 0, done.stderr
    assert f"config {lab / 'ansible.cfg'}" in json.loads(done.stdout)["engine"]
    assert marker.exists()  # the opt-in really hands Ansible the config (the marker proves the test can fail)
    marker.unlink()
    lab.chmod(0o777)  # world-writable: Ansible's rule, kept even with the opt-in
    try:
        done = hosts(inv, "ansible", "--json", "--inventory-programs", cwd=lab)
    finally:
        lab.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert f"ignored {lab / 'ansible.cfg'} (in a world-writable folder" in json.loads(done.stdout)["engine"]
    assert not marker.exists()


# ---- 4: host files an inventory names ------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_vars_symlinks_out_of_the_folder_are_refused_unread(tmp_path: Path, engine: str,
                                                             ansible_program: Path) -> None:
    outside = tmp_path / "home"
    outside.mkdir()
    key = outside / "id_ed25519"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}AAAAB3NzaC1yc2EAAAADAQABAAABAQ\n"
                   "-----END OPENSSH PRIVATE KEY-----\n")
    shadow = outside / "shadow"
    shadow.write_text(f"root:{SECRET}:19000:0:99999:7:::\n")
    lab = tmp_path / "lab"
    (lab / "group_vars").mkdir(parents=True)
    (lab / "host_vars").mkdir()
    (lab / "inv.ini").write_text("[g]\na\n")
    (lab / "group_vars" / "all").symlink_to(shadow)
    line = one_line(hosts(lab / "inv.ini", engine))
    assert f"{lab / 'group_vars' / 'all'}: a symlink out of the inventory's folder" in line and SECRET not in line
    (lab / "group_vars" / "all").unlink()
    (lab / "host_vars" / "a.yml").symlink_to(key)
    line = one_line(hosts(lab / "inv.ini", engine))
    assert "host_vars/a.yml: a symlink out of the inventory's folder" in line
    assert SECRET not in line and "BEGIN" not in line


def _key() -> paramiko.PKey:
    return paramiko.ECDSAKey.generate()


def test_known_hosts_that_is_not_one_is_never_rewritten(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"  # an /etc/shadow stand-in, 0644, the user's own
    shadow.write_text(f"root:{SECRET}:19000:0:99999:7:::\n")
    shadow.chmod(0o644)
    with pytest.raises(InputError) as err:
        hostkeys.record_host_key(shadow, "[127.0.0.1]:2222", _key())
    assert str(err.value) == (f"{shadow}:1: not a known_hosts line (HOSTS KEYTYPE KEY); rkdet neither reads nor "
                              "writes this file (its content is not shown)")
    assert shadow.read_text() == f"root:{SECRET}:19000:0:99999:7:::\n" and shadow.stat().st_mode & 0o777 == 0o644
    auth = tmp_path / "authorized_keys"  # a real key line: the shape of authorized_keys, not known_hosts
    line = f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHf0 {SECRET}\n"
    auth.write_text(line)
    with pytest.raises(InputError, match="authorized_keys file, not a known_hosts file"):
        hostkeys.record_host_key(auth, "board", _key())
    assert auth.read_text() == line
    auth2 = tmp_path / "keys"
    auth2.write_text(f'from="10.0.0.1" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHf0 {SECRET}\n')
    with pytest.raises(InputError, match="not a known_hosts line"):
        hostkeys.record_host_key(auth2, "board", _key())
    shared = tmp_path / "shared_known_hosts"
    shared.write_text("")
    shared.chmod(0o666)
    with pytest.raises(InputError, match="not the user's own known_hosts file"):
        hostkeys.record_host_key(shared, "board", _key())
    own = tmp_path / "known_hosts"  # the real thing is still written, and stays readable
    hostkeys.record_host_key(own, "[127.0.0.1]:2222", _key())
    assert hostkeys.check_known_hosts(own, writable=True)


def test_a_netrc_named_as_known_hosts_is_not_quoted(tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine lab.example login rock password {SECRET}\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, message in ((netrc, "not a known_hosts line"), (fifo, "not a regular file")):
        tgt = Target(name="b", hostname="127.0.0.1", port=22, user="rock", known_hosts=(path,))
        with pytest.raises(InputError, match=message) as err:  # the FIFO is refused, not waited on
            hostkeys.apply_policy(paramiko.SSHClient(), tgt, tmp_path / "rkdet_known_hosts")
        assert SECRET not in str(err.value) and "\n" not in str(err.value)
        tgt = Target(name="b", hostname="127.0.0.1", port=22, user="rock", accept_new=True)
        with pytest.raises(InputError, match=message) as err:
            hostkeys.apply_policy(paramiko.SSHClient(), tgt, path)
        assert SECRET not in str(err.value)
    assert netrc.read_text() == f"machine lab.example login rock password {SECRET}\n"


def test_an_identity_file_must_be_a_private_key_of_yours(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.write_text(f"root:{SECRET}:19000:0:99999:7:::\n")
    shadow.chmod(0o644)
    with pytest.raises(InputError, match=r"readable or writable by others \(mode 644\)"):
        check_identity(shadow)
    shadow.chmod(0o600)
    with pytest.raises(InputError, match="not a private key") as err:
        check_identity(shadow)
    assert SECRET not in str(err.value)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(InputError, match="not a regular file"):
        check_identity(fifo)
    key = tmp_path / "id"
    _key().write_private_key_file(str(key))
    key.chmod(0o600)
    check_identity(key)


# ---- 5 and 7: bounded memory and time ------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_dev_zero_and_sparse_vars_files_are_refused_unread(tmp_path: Path, engine: str,
                                                            ansible_program: Path) -> None:
    lab = tmp_path / "lab"
    (lab / "group_vars").mkdir(parents=True)
    (lab / "inv.ini").write_text("[g]\na\n")
    (lab / "group_vars" / "all.yml").symlink_to("/dev/zero")
    assert "group_vars/all.yml: a symlink out of the inventory's folder" in one_line(hosts(lab / "inv.ini", engine))
    (lab / "group_vars" / "all.yml").unlink()
    with open(lab / "group_vars" / "all.yml", "wb") as f:
        f.truncate(1 << 30)  # sparse: no disk used; a reader that read it would hold 1 GiB
    line = one_line(hosts(lab / "inv.ini", engine))
    assert "group_vars/all.yml: larger than 1024 KiB" in line


def assert_memory_refusal(message: str, inv: Path) -> None:
    """One line from ansible-inventory stopped by its limit: Ansible usually reports the MemoryError,
    but an allocation can fail inside a plugin that reports only "Failed to parse"; either way its
    peak memory stayed under the limit (this process's children's peak, the test's own bound)."""
    assert "\n" not in message and message.startswith(f"{inv}: ansible-inventory refused it ("), message
    assert "memory limit of 384 MiB" in message or "Failed to parse" in message, message
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < (384 << 20) // 1024, message


def test_a_huge_range_stops_at_the_engines_memory_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         ansible_program: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text("[g]\nrk[0:99999999].lab\n")
    with pytest.raises(InputError, match=r"more than 100000 hosts"):
        load_inventory(inv)  # the native reader refuses the range itself
    monkeypatch.setattr(ansible_engine, "MEMORY_LIMIT", 384 << 20)
    with pytest.raises(InputError) as err:
        ansible_engine.load(ansible_program, inv, None, timeout=100)
    assert_memory_refusal(str(err.value), inv)


def test_the_memory_limit_applies_to_whatever_the_engine_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in ansible-inventory asks for 512 MiB at once: under the limit the allocation fails at
    once (nothing is touched), and the line says why."""
    program = tmp_path / "bin" / "ansible-inventory"
    program.parent.mkdir()
    program.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'b = bytearray(512 << 20)'\n")
    program.chmod(0o755)
    inv = tmp_path / "inv.ini"
    inv.write_text("[g]\na\n")
    monkeypatch.setattr(ansible_engine, "MEMORY_LIMIT", 256 << 20)
    with pytest.raises(InputError, match=r"ran out of its memory limit of 256 MiB"):
        ansible_engine.load(program, inv, None, timeout=60)


def test_six_hundred_bytes_of_ranges_are_refused_by_the_host_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  ansible_program: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text("[g]\n" + "".join(f"h{i:02d}-[0:99999]\n" for i in range(40)))  # 4 million hosts
    assert len(inv.read_bytes()) < 700
    done = hosts(inv, "native")
    assert one_line(done) == f"rkdet: {inv}:2: more than 50000 hosts in the inventory; is this really a lab's " \
                             "inventory? (split it, or check its ranges)"
    monkeypatch.setattr(ansible_engine, "MEMORY_LIMIT", 384 << 20)
    with pytest.raises(InputError) as err:
        ansible_engine.load(ansible_program, inv, None, timeout=100)
    assert_memory_refusal(str(err.value), inv)


def test_host_handling_is_linear(tmp_path: Path) -> None:
    """CPU time (not wall time) for 8x the hosts stays near 8x: the quadratic reader took 60x+."""
    def cost(n: int) -> float:
        inv = tmp_path / f"inv{n}.ini"
        inv.write_text(f"[lab]\nh[0:{n - 1}] ansible_user=x\n[more:children]\nlab\n")
        start = time.process_time()
        boards = select(load_inventory(inv), "more:!h1")
        assert len(boards) == n - 1
        return time.process_time() - start

    cost(500)  # warm the imports
    small, big = min(cost(3000) for _ in range(2)), cost(24000)
    assert big < 24 * max(small, 0.01), (small, big)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("pattern, why", [
    ("~(a+)+$", "a repeat inside a repeat"), ("~(a|aa)*b", "an alternation inside a repeat"),
    ("~(\\w)\\1", "a backreference"), ("~.*.*.*.*.*x", "more than 4 repeats"),
])
def test_a_limit_regex_that_backtracks_is_refused_by_both_engines(tmp_path: Path, engine: str, pattern: str,
                                                                   why: str, ansible_program: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text("[g]\n" + "a" * 200 + "\n")
    line = one_line(hosts(inv, engine, "--limit", pattern))
    assert line.startswith(f"rkdet: --limit {pattern!r}: ") and f"can backtrack without bound ({why})" in line


# ---- 6: an interrupted rkdet leaves no ansible-inventory -----------------------------------------


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_interrupting_rkdet_ends_the_engine(tmp_path: Path, how: str) -> None:
    """A stand-in ansible-inventory (its own session, as the real one runs) records rkdet's pid and
    sleeps; rkdet is interrupted; a subreaper reports any descendant left."""
    program = tmp_path / "bin" / "ansible-inventory"
    program.parent.mkdir()
    pidfile = tmp_path / "pid"
    program.write_text(f"#!/bin/sh\necho $PPID > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}\nexec sleep 300\n")
    program.chmod(0o755)
    inv = tmp_path / "inv.ini"
    inv.write_text("[g]\na\n")
    report = tmp_path / "left.json"
    temp = tmp_path / "tmp"  # rkdet's own temp folders: a SIGKILLed rkdet cannot remove them, so not in /tmp
    temp.mkdir()
    env = {**os.environ, "RKDET_ANSIBLE_INVENTORY": str(program), "RKDET_INVENTORY_ENGINE": "ansible",
           "TMPDIR": str(temp),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(tree_argv([sys.executable, "-m", "rkdet.cli", "fleet", "hosts", "--inventory", str(inv)],
                                      report), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        rkdet_pid = int(pidfile.read_text())
        if how == "SIGINT":  # Ctrl-C: the terminal signals the foreground group (the wrapper ignores it)
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(rkdet_pid, getattr(signal, how))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert leftovers(report) == []
    if how != "SIGKILL":
        assert (proc.returncode, err) == (130, "rkdet: interrupted\n")


# ---- 14: the engines agree -----------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_limit_from_a_file_is_refused_alike_and_never_read(tmp_path: Path, engine: str, ansible_program: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(f"{SECRET}\n")
    inv = tmp_path / "inv.ini"
    inv.write_text("[g]\na\n")
    line = one_line(hosts(inv, engine, "--limit", f"@{secret}"))
    assert line.startswith("rkdet: --limit @FILE: rkdet does not read a limit file") and SECRET not in line


@pytest.mark.parametrize("engine", ENGINES)
def test_symlink_loops_fifos_and_duplicates_are_refused_alike(tmp_path: Path, engine: str,
                                                               ansible_program: Path) -> None:
    lab = tmp_path / "lab"
    (lab / "group_vars" / "all").mkdir(parents=True)
    (lab / "inv.ini").write_text("[g]\na\n")
    (lab / "group_vars" / "all" / "loop").symlink_to(lab / "group_vars")
    assert "group_vars/all/loop: a symlink to a folder in the vars folder" in one_line(hosts(lab / "inv.ini", engine))
    (lab / "group_vars" / "all" / "loop").unlink()
    (lab / "group_vars" / "all" / "self.yml").symlink_to(lab / "group_vars" / "all" / "self.yml")
    assert "self.yml: a symlink that dangles or loops" in one_line(hosts(lab / "inv.ini", engine))
    (lab / "group_vars" / "all" / "self.yml").unlink()
    os.mkfifo(lab / "group_vars" / "g.yml")
    assert "group_vars/g.yml: not a regular file" in one_line(hosts(lab / "inv.ini", engine))
    (lab / "group_vars" / "g.yml").unlink()
    (lab / "group_vars" / ".g.yml").symlink_to("/etc/hostname")  # hidden is no hiding place
    assert "group_vars/.g.yml: a symlink out of the inventory's folder" in one_line(hosts(lab / "inv.ini", engine))
    (lab / "group_vars" / ".g.yml").unlink()
    dup = lab / "dup.yml"
    dup.write_text("g:\n  hosts:\n    a:\n    a:\n")
    line = one_line(hosts(dup, engine))
    assert "appears twice" in line if engine == "native" else "duplicate mapping key 'a'" in line


def test_the_engines_time_out_line_names_the_cause(tmp_path: Path) -> None:
    program = tmp_path / "bin" / "ansible-inventory"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\nexec sleep 30\n")
    program.chmod(0o755)
    inv = tmp_path / "inv.ini"
    inv.write_text("[g]\na\n")
    with pytest.raises(InputError) as err:
        ansible_engine.load(program, inv, None, timeout=0.5)
    assert str(err.value) == (f"{inv}: ansible-inventory gave no answer within 0.5 s and was stopped "
                              "(the inventory is too large for it?)")
    with pytest.raises(InputError) as err:
        ansible_engine.load(program, inv, None, timeout=0.5, setup=ansible_engine.Setup(programs_allowed=True))
    assert "(an inventory program or plugin waiting on something?)" in str(err.value)


@pytest.mark.parametrize("engine", ENGINES)
def test_deep_group_chains_are_refused_alike(tmp_path: Path, engine: str, ansible_program: Path) -> None:
    """A chain of 900 `[gN:children]` sections (17 KB): one line on both engines, no RecursionError."""
    inv = tmp_path / "chain.ini"
    inv.write_text("[g0]\na\n" + "".join(f"[g{i}:children]\ng{i - 1}\n" for i in range(1, 900)))
    line = one_line(hosts(inv, engine))
    assert "is nested deeper than 64 groups" in line and "internal error" not in line


def test_wide_group_graphs_are_bounded(tmp_path: Path) -> None:
    """2 000 hosts in a group with 1 001 parents: every record would list 1 002 groups (2 million in all)."""
    inv = tmp_path / "wide.ini"
    inv.write_text("[lab]\nh[0:1999]\n" + "".join(f"[p{i}:children]\nlab\n" for i in range(1001)))
    with pytest.raises(InputError, match=r"group memberships \(inherited ones included\) add up to more than "
                                         r"2000000"):
        load_inventory(inv)
