"""rkdet as an installed tool: `python -m build` makes a wheel that works from an unrelated folder.

Why: the board scripts live at the top of the repository (one copy) and join the package only at build
time; a wheel that forgot them, or a command that finds its files by walking up from the current folder,
works in a checkout and nowhere else. This builds the sdist and the wheel (from the sdist, as
`python -m build` does), installs the wheel into a fresh venv, and runs convert -> deploy to an emulated
board -> diff with it from a temp folder that is not the repository.

For speed the fresh venv reuses the shared venv's installed dependencies (the "toolkit step" included:
rknn-toolkit2, onnxruntime, numpy...) through a plain path line in a .pth file: a plain line adds the
folder to sys.path without running the .pth files inside it, so the checkout's editable rkdet cannot
leak in (asserted below: rkdet is imported from the fresh venv).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from rkdet.emulator.sshd import EmulatedBoard

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "convert"))
from tiny_models import conv_model, image_folder, write_config  # noqa: E402

pytestmark = pytest.mark.slow

# Not part of the build: data with their own licenses, local state, tests and benches.
NOT_SOURCE = (".git", ".venv", "build", "dist", "results", "models", "calibration_data", "tests", "bench",
              "__pycache__", "*.egg-info", ".grimp_cache", ".import_linter_cache", ".hypothesis")


def _run(argv: list[str | Path], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("rkdet: "), proc.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `python -m build` makes from a copy of the repository's sources (the repo is not written)."""
    root = tmp_path_factory.mktemp("build")
    src = root / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(*NOT_SOURCE), symlinks=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", root / "dist", src], root, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = sorted((root / "dist").glob("rkdet-*.whl"))
    assert len(wheels) == 1 and sorted((root / "dist").glob("rkdet-*.tar.gz")), proc.stdout[-2000:]
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (--no-deps; dependencies from the shared venv, see above)."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    purelib = Path(subprocess.run([str(where / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "_rkdet_test_shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = _run([where / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                 "--disable-pip-version-check", wheel], where.parent, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return where


def test_wheel_carries_the_board_scripts_from_the_single_source(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        packaged = {n.rsplit("/", 1)[1]: zf.read(n) for n in names if n.startswith("rkdet/board_scripts/")}
        # a published artifact: no path of the machine it was built on (the build ran in a temp copy)
        # METADATA's body is the README itself, which may name a path such as /root/rkdet as prose: it must be
        # the README byte for byte, and only its header is searched for the checkout's path.
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        header, _, body = zf.read(metadata_name).partition(b"\n\n")
        searched = {n: (header if n == metadata_name else zf.read(n)) for n in names}
        leaks = [n for n, text in searched.items() if str(wheel.parents[1]).encode() in text or str(REPO).encode() in text]
        leaks += [metadata_name] if str(wheel.parents[1]).encode() in body else []
        readme_in_wheel = body.decode()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert not leaks, leaks
    assert readme_in_wheel.strip() == (REPO / "README.md").read_text().strip()
    source = {p.name: p.read_bytes() for p in (REPO / "board_scripts").glob("*.sh")}
    assert source and packaged == source
    # everything else the board needs: the on-board program (packed into rkdet-onboard.pyz), and the emulated runtime
    onboard = {"rkdet/onboard/%s.py" % m for m in ("__init__", "__main__", "run", "selfcheck", "atomic", "resultset", "program")}
    assert onboard | {"rkdet/emulator/runtime_double/rknnlite/api/__init__.py"} <= names
    # rkdet-run-c's source (built against the user's SDK) and the C runtime double with rkdet's test header
    assert {"rkdet/onboard/c/rkdet_run_c.c", "rkdet/emulator/capi_double/rknn_api.h",
            "rkdet/emulator/capi_double/rknnrt_double.c", "rkdet/emulator/capi_double/board_exec.py"} <= names
    # the C serving audit library apps on the C runtime build in (docs/AUDIT.md)
    assert {"rkdet/onboard/c/rkdet_audit.c", "rkdet/onboard/c/rkdet_audit.h", "rkdet/onboard/c/rkdet_sha256.h"} <= names
    assert not {"rkdet/runner.py", "rkdet/selfcheck.py"} & names
    assert "rkdet-run = rkdet.onboard.run:main" in entry_points
    assert "rkdet-selfcheck = rkdet.onboard.selfcheck:main" in entry_points  # check before you serve (docs/SELFCHECK.md)
    assert not any(n.startswith(("models/", "calibration_data/")) or n.endswith(".onnx") for n in names)
    assert not (REPO / "rkdet" / "board_scripts").exists()  # never copied into the checkout


def test_installed_convert_deploy_diff_from_an_unrelated_folder(venv: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RKDET_DEBUG")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    rkdet = venv / "bin" / "rkdet"

    where = _run([venv / "bin" / "python", "-c", "import rkdet, rkdet.boardinfo.scripts as s; "
                  "print(rkdet.__file__); print(s.board_scripts_dir())"], work, env)
    assert where.returncode == 0, where.stderr
    module_file, scripts_dir = (Path(line) for line in where.stdout.split())
    assert module_file.is_relative_to(venv) and scripts_dir.is_relative_to(venv), where.stdout
    assert not module_file.is_relative_to(REPO)

    # without a config or the demo's data here: one line saying what to pass, exit 2
    proc = _run([rkdet, "convert"], work, env)
    assert proc.returncode == 2 and "--config" in _one_error_line(proc)
    proc = _run([rkdet, "demo"], work, env)
    assert proc.returncode == 2 and "--data DIR" in _one_error_line(proc)

    config = write_config(work / "tiny.yaml", conv_model(work / "tiny.onnx"), image_folder(work / "cal", 4, seed=1),
                          image_folder(work / "gold", 2, seed=2))
    proc = _run([rkdet, "convert", "--config", config, "--out", "build", "--json"], work, env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = Path(json.loads(proc.stdout)["builds"][0]["folder"])
    build = build if build.is_absolute() else work / build
    assert (build / "manifest.json").is_file() and build.is_relative_to(work)

    with EmulatedBoard("rk3588", tmp_path / "board") as board:
        proc = _run([rkdet, "deploy", "--board", board.target, "--user", board.user,
                     "--identity", board.identity_file, "--known-hosts", board.known_hosts_file,
                     "--ssh-config", "/dev/null", "--config", config, "--build", build, "--out", "results",
                     "--repeats", "2", "--warmup", "0"], work, env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(p.parent for p in (work / "results").glob("*/*/*/deploy.json"))
    assert len(runs) == 1 and (runs[0] / "result" / "index.jsonl").is_file()

    # the emulated runtime computes in FP32 (onnxruntime): its reference is the build's onnx-fp32 golden set
    proc = _run([rkdet, "diff", runs[0] / "result", build / "golden" / "onnx-fp32", "--html", "report.html", "--json"],
                work, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["schema"].startswith("rkdet.diff/")
    assert (work / "report.html").read_text().lstrip().lower().startswith("<!doctype html")
