"""Pinned per-version rknn-toolkit2 environments (`toolkit.version`, `rkdet convert --toolkit V`).

Why: to answer "what changes if I upgrade the toolkit?" one workstation must build with several
toolkits. Each version gets its own venv holding exactly rkdet's lock (requirements/host.lock.txt:
numpy 1.26.4, protobuf 4.25.4, CPU torch, ...) and that toolkit installed `--no-deps` (as .ci/setup
does for 2.5.0: the toolkits declare torch<=2.4.0 but run with the lock's). The wheel is checked
against the sha256 pinned here before it is installed; the venv is built under a temporary name
and renamed into place, so a half-made one is never used. It lives in the user's cache folder
(`$RKDET_TOOLKIT_CACHE`, else `$XDG_CACHE_HOME/rkdet/toolkits`, else `~/.cache/rkdet/toolkits`),
keyed by version and lock, and is created on first use (which needs the package index; .ci/setup
pre-builds 2.3.2 so tests run offline).

Run as `python -m rkdet.convert.toolkit_env ensure 2.3.2` to create one ahead of time.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rkdet.convert.cpu_torch import TorchInstallError, install_cpu_torch
from rkdet.errors import ConversionError, InputError

CACHE_ENV = "RKDET_TOOLKIT_CACHE"
DIST = "rknn-toolkit2"

# sha256 of each toolkit's cp311 x86_64 wheel as the package index serves it (checked with
# `pip download --no-deps rknn-toolkit2==V`). A version not listed here is refused.
PINNED_WHEELS: dict[str, dict[str, str]] = {
    "2.3.2": {"cp311": "a05a8fd7515705ebdbb06a965c80b0090af61f7e716f1ed326a3aa5e313f23fb"},
    "2.5.0": {"cp311": "21922dd3037503a2934fea24cbbf6eccda586158178636ae28a2ac658e710055"},
}
STAMP = ".rkdet-toolkit-env"


@dataclass(frozen=True)
class ToolkitEnv:
    version: str
    folder: Path

    @property
    def python(self) -> Path:
        return self.folder / "bin" / "python"


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rkdet" / "toolkits"


def lock_file() -> Path:
    path = Path(__file__).resolve().parents[2] / "requirements" / "host.lock.txt"
    if not path.is_file():
        raise ConversionError(f"{path}: rkdet's lock is missing (a per-version toolkit environment is built from it); "
                              "use rkdet from its source tree, or build with the installed toolkit (no toolkit.version)")
    return path


def _tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def pinned_sha256(version: str) -> str:
    entry = PINNED_WHEELS.get(version)
    if entry is None:
        raise InputError(f"toolkit.version {version!r}: rkdet pins the wheels of rknn-toolkit2 "
                         f"{', '.join(sorted(PINNED_WHEELS))}; choose one of those")
    if _tag() not in entry:
        raise InputError(f"toolkit.version {version}: no pinned wheel for Python {_tag()} (rkdet pins {', '.join(entry)})")
    return entry[_tag()]


def env_for(version: str) -> ToolkitEnv:
    """Where `version`'s environment lives (it may not exist yet): keyed by version, lock and Python."""
    pinned_sha256(version)
    lock = hashlib.sha256(lock_file().read_bytes()).hexdigest()[:12]
    return ToolkitEnv(version, cache_root() / f"{DIST}-{version}-{_tag()}-{lock}")


def ready(env: ToolkitEnv) -> bool:
    return (env.folder / STAMP).is_file() and env.python.exists()


def check_private(path: Path, what: str) -> None:
    """OpenSSH's rule for what it trusts: `path` is a real folder or file (not a symlink) owned by the user
    who runs rkdet and not writable by group or others. One line naming it otherwise (exit 2)."""
    try:
        st = os.lstat(path)
    except OSError as err:
        raise InputError(f"{path}: cannot check the {what} ({err.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"{path}: the {what} is a symlink; rkdet runs a toolkit only from a folder you own")
    if st.st_uid != os.getuid():
        raise InputError(f"{path}: the {what} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); rkdet runs "
                         f"a toolkit only from a folder you own: remove it, or set {CACHE_ENV} to a folder of yours")
    if st.st_mode & 0o022:
        raise InputError(f"{path}: the {what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
                         f"`chmod go-w` it (OpenSSH refuses such files too), or remove it")


def _dist_info(folder: Path, version: str) -> Path:
    found = sorted(folder.glob(f"lib/python*/site-packages/rknn_toolkit2-{version}.dist-info/RECORD"))
    if len(found) != 1:
        raise InputError(f"{folder}: holds no single installed {DIST} {version} (its dist-info RECORD); "
                         "delete that folder and build again")
    return found[0]


def _file_sha256(path: Path) -> str:
    from rkdet.records.io import open_regular

    digest = hashlib.sha256()
    with open_regular(path) as f:  # a regular file only: a FIFO is refused, never waited on
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _record(folder: Path, version: str) -> dict[str, str]:
    """What was installed, as checked on every use: the pinned wheel, the interpreter the venv links
    to, and the sha256 of the installed distribution's RECORD (pip's list of every file and its hash)."""
    return {"dist": DIST, "version": version, "wheel_sha256": pinned_sha256(version),
            "python": os.path.realpath(folder / "bin" / "python"),
            "record_sha256": _file_sha256(_dist_info(folder, version))}


def verify(env: ToolkitEnv) -> ToolkitEnv:
    """Check an existing environment before anything in it runs: the cache folder and the environment
    the user's own and private (`check_private`), `bin/python` the venv's link to the interpreter it was
    made with, the installed toolkit's RECORD (every file and its hash) the one recorded at creation and
    every file it lists present with that size. A stamp file alone is never trusted (issue 30 #8)."""
    check_private(cache_root(), "toolkit cache folder")
    for path, what in ((env.folder, "toolkit environment"), (env.folder / "bin", "toolkit environment's bin"),
                       (env.folder / STAMP, "toolkit environment's stamp")):
        check_private(path, what)
    advice = "delete that folder and build again (rkdet makes it anew)"
    try:
        stamp = json.loads((env.folder / STAMP).read_text()[:4096])
    except (ValueError, OSError):
        stamp = None
    if not isinstance(stamp, dict):
        text = (env.folder / STAMP).read_text()[:4096]
        if text.strip() != f"{DIST}=={env.version} sha256={pinned_sha256(env.version)}":
            raise InputError(f"{env.folder / STAMP}: not a stamp rkdet wrote; {advice}")
        stamp = _record(env.folder, env.version)  # made by an earlier rkdet, in a private folder: taken as it is
    if stamp.get("wheel_sha256") != pinned_sha256(env.version) or stamp.get("version") != env.version:
        raise InputError(f"{env.folder}: was not made from the pinned {DIST} {env.version} wheel; {advice}")
    python = env.python
    if not python.is_symlink() or os.path.realpath(python) != stamp.get("python"):
        raise InputError(f"{python}: is not the venv's link to the interpreter it was made with "
                         f"({stamp.get('python')}); {advice}")
    target = os.stat(python)
    if target.st_uid not in (0, os.getuid()) or target.st_mode & 0o022:
        raise InputError(f"{os.path.realpath(python)}: the interpreter is not root's or yours, or is writable by "
                         f"others; {advice}")
    record = _dist_info(env.folder, env.version)
    if _file_sha256(record) != stamp.get("record_sha256"):
        raise InputError(f"{record}: the installed {DIST} is not the one recorded when the environment was made; "
                         f"{advice}")
    site = record.parent.parent
    for line in record.read_text().splitlines():
        name, _, rest = line.partition(",")
        size = rest.rpartition(",")[2]
        if size.isdigit() and not name.startswith(".."):
            try:
                ok = os.lstat(site / name).st_size == int(size)
            except OSError:
                ok = False
            if not ok:
                raise InputError(f"{site / name}: missing or changed since the environment was made; {advice}")
    return env


def _write_stamp(folder: Path, stamp: dict[str, str]) -> None:
    from rkdet.records.io import write_atomic

    write_atomic(str(folder / STAMP), (json.dumps(stamp, indent=2, sort_keys=True) + "\n").encode())
    os.chmod(folder / STAMP, 0o644)


def sweep_unfinished(parent: Path, name: str) -> None:
    """Remove `.<env>.new-*` staging folders of creations that were killed midway (called under the lock)."""
    for stale in parent.glob(f".{name}.new-*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        elif stale.is_symlink() or stale.exists():
            stale.unlink(missing_ok=True)


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        raise ConversionError(f"{what} failed (exit {proc.returncode}): {tail}")


def _wheel(version: str, into: Path) -> Path:
    """The pinned wheel: from `<cache>/wheels` (.ci/setup may put it there), else downloaded; hash-checked."""
    want = pinned_sha256(version)
    wheels = cache_root() / "wheels"
    wheels.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_private(wheels, "toolkit wheel cache")
    found = sorted(wheels.glob(f"rknn_toolkit2-{version}-{_tag()}-*x86_64*.whl"))
    if not found:
        _run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
              "--only-binary=:all:", "-d", str(wheels), f"{DIST}=={version}"], f"pip download {DIST}=={version}")
        found = sorted(wheels.glob(f"rknn_toolkit2-{version}-{_tag()}-*x86_64*.whl"))
    if not found:
        raise ConversionError(f"pip download {DIST}=={version} left no {_tag()} x86_64 wheel in {wheels}")
    wheel = found[0]
    try:
        got = _file_sha256(wheel)  # a FIFO or device named like the wheel is refused, never read
    except InputError:
        raise InputError(f"{wheel}: not a regular file; remove it (rkdet downloads the wheel again)") from None
    if got != want:
        wheel.unlink()
        raise ConversionError(f"{wheel}: sha256 {got[:16]}… is not the pinned {want[:16]}… of {DIST} {version}; "
                              "removed (re-run to download it again)")
    copy = into / wheel.name
    shutil.copyfile(wheel, copy)
    return copy


def ensure(version: str, progress: Callable[[str], None] | None = None) -> ToolkitEnv:
    """`version`'s environment, created on first use (locked against a concurrent creator)."""
    env = env_for(version)
    if ready(env):
        return verify(env)
    say = progress or (lambda _m: None)
    env.folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_private(env.folder.parent, "toolkit cache folder")
    fd = os.open(env.folder.parent / f".{env.folder.name}.lock",
                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o600)
    with os.fdopen(fd, "r+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready(env):
            return verify(env)
        sweep_unfinished(env.folder.parent, env.folder.name)  # killed creations leave 38 MB each otherwise
        say(f"creating the rknn-toolkit2 {version} environment in {env.folder} (first use; needs the package index)")
        stage = Path(tempfile.mkdtemp(prefix=f".{env.folder.name}.new-", dir=env.folder.parent))
        try:
            wheel = _wheel(version, stage)
            venv = stage / "venv"
            _run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            try:  # the lock's CPU torch from PyTorch's CPU index first: the public index serves the CUDA build
                install_cpu_torch(str(venv / "bin" / "python"), lock_file())
            except TorchInstallError as exc:
                raise ConversionError(f"creating the rknn-toolkit2 {version} environment: {exc}") from None
            _run([*pip, "--require-hashes", "-r", str(lock_file())], f"installing rkdet's lock into the {version} environment")
            _run([*pip, "--no-deps", str(wheel)], f"installing {wheel.name}")
            _write_stamp(venv, _record(venv, version))
            wheel.unlink()
            if env.folder.exists():  # an unfinished one (no stamp) from an interrupted run
                shutil.rmtree(env.folder)
            venv.rename(env.folder)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return env


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "ensure":
        print("usage: python -m rkdet.convert.toolkit_env ensure VERSION", file=sys.stderr)
        return 2
    try:
        env = ensure(argv[1], progress=lambda m: print(m, file=sys.stderr))
    except (ConversionError, InputError) as err:
        print(f"rkdet: {err}", file=sys.stderr)
        return err.exit_code
    print(env.python)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
