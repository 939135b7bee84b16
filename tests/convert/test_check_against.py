"""The same model is the same fingerprint on every workstation; `rkdet convert --check-against BUILD` says so.

"Another workstation" here is another interpreter: the CLI and its hermetic toolkit worker run with the
Python that runs `rkdet`, so a second venv is a second toolchain. Two are made (module-scoped, a few
seconds together: `venv --without-pip`, no second install of the lock, which would take about a minute;
a `.pth` line makes the main venv's packages importable, the same wheels, so the only difference is the
one under test):
* `python-patch`: another CPython 3.11 patch release (Debian's /usr/bin/python3.11, 3.11.2, beside the
  pyenv 3.11.7 of the main venv); skipped only where no other 3.11 patch release is installed;
* `unrelated-package`: the same Python with one more package installed (a tiny real distribution built
  and installed by pip from a local folder, no index needed).
Both rebuild the tiny model (tests/convert/tiny_models.py: seconds).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from convert_helpers import REPO, run_rkdet

pytestmark = pytest.mark.slow

UNRELATED = "rkdet-unrelated-probe"


def _other_patch_python() -> str | None:
    """A CPython 3.11 whose patch version differs from the one running the tests, or None."""
    for candidate in ("/usr/bin/python3.11", shutil.which("python3.11"), "/usr/local/bin/python3.11"):
        if not candidate or not os.access(candidate, os.X_OK):
            continue
        proc = subprocess.run([candidate, "-c", "import platform; print(platform.python_version())"],
                              capture_output=True, text=True, check=False, timeout=60)
        version = proc.stdout.strip()
        if proc.returncode == 0 and version.startswith("3.11.") and version != platform.python_version():
            return candidate
    return None


def _venv(base_python: str, root: Path, extra_site: Path | None = None) -> Path:
    """A venv of `base_python` that imports the main venv's packages (and `extra_site`'s): its python."""
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    dirs = [sysconfig.get_paths()["purelib"], *([str(extra_site)] if extra_site else [])]
    (Path(site) / "rkdet-test-main-venv.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n")
    return python


def _unrelated_site(root: Path) -> Path:
    """A real (tiny) distribution that rkdet never imports, installed by pip into its own folder."""
    src = root / "src"
    (src / "rkdet_unrelated_probe").mkdir(parents=True)
    (src / "rkdet_unrelated_probe" / "__init__.py").write_text('"""Unrelated to rkdet: a test package."""\n')
    (src / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{UNRELATED}"\nversion = "1.0"\n\n[tool.setuptools]\npackages = ["rkdet_unrelated_probe"]\n')
    site = root / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                           "--no-build-isolation", "--target", str(site), str(src)],
                          capture_output=True, text=True, check=False, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return site


@pytest.fixture(scope="module", params=["python-patch", "unrelated-package"])
def other_python(request, tmp_path_factory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp(f"venv-{request.param}")
    if request.param == "python-patch":
        base = _other_patch_python()
        if base is None:
            pytest.skip("no other CPython 3.11 patch release on this machine (the unrelated-package case still runs)")
        return request.param, _venv(base, root / "venv")
    base = getattr(sys, "_base_executable", sys.executable)
    return request.param, _venv(base, root / "venv", _unrelated_site(root))


def _run(python: Path | str, *args: str, cwd: Path, tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RKDET_TOOLKIT2_PYTHON", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(REPO)  # this checkout's rkdet, whichever interpreter runs it
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run([str(python), "-m", "rkdet.cli", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600, check=False)


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


@pytest.fixture(scope="module")
def build_here(tiny_build) -> tuple[Path, Path]:
    """The tiny model built by the main venv (the run's shared tiny build): (its config, its build folder)."""
    cfg, build = tiny_build
    return cfg, Path(build["folder"])


def test_another_venv_builds_the_same_model(build_here, other_python, tmp_path):
    kind, python = other_python
    cfg, here = build_here
    proc = _run(python, "convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    there = Path(json.loads(proc.stdout)["builds"][0]["folder"])
    a, b = _manifest(here), _manifest(there)
    # the two toolchains really differ, and the manifest records it
    probe = "import importlib.metadata as m, platform; print(platform.python_version()); print(m.version(%r))" % UNRELATED
    seen = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    if kind == "python-patch":
        assert a["environment"]["python"] == platform.python_version() != b["environment"]["python"]
        assert seen.stdout.split()[0] == b["environment"]["python"]
    else:
        assert seen.returncode == 0 and seen.stdout.split()[1] == "1.0", seen.stderr
        mine = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
        assert mine.returncode != 0 and "PackageNotFoundError" in mine.stderr
    # ... and it is the same model: every fingerprint agrees
    assert b["model_fingerprint"] == a["model_fingerprint"] == b["embedded_fingerprint"]
    assert b["model_identity"] == a["model_identity"]
    assert b["rknn"]["content_fingerprint"] == a["rknn"]["content_fingerprint"]
    assert b["fingerprint"] == a["fingerprint"]
    # a colleague's build (made by the main venv) checked on this "workstation"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    check = _run(python, "convert", "--config", str(cfg), "--check-against", str(here), cwd=tmp_path, tmpdir=tmp)
    assert check.returncode == 0, check.stdout + check.stderr[-3000:]
    assert check.stdout.startswith(f"same model: {here} (rk3588)")
    assert "rk3588: same model identity; rebuilding" in check.stderr  # not only the identity: the .rknn too
    if kind == "python-patch":
        assert f"python {a['environment']['python']} vs {b['environment']['python']}" in check.stdout
        # the toolkit worker ran with that interpreter too, and the manifest says so
        assert b["environment"]["hermetic"]["interpreter"]["python"] == b["environment"]["python"]
    assert [p.name for p in tmp.iterdir() if not p.name.startswith("rkdet-hermetic-")] == []  # rebuild removed


def _check(cfg: Path, build: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_rkdet("convert", "--config", str(cfg), "--check-against", str(build), *extra)


def test_a_changed_weight_is_another_model(build_here, tiny_assets, tmp_path):
    from tiny_models import write_config

    _, here = build_here
    cfg = write_config(tmp_path / "w.yaml", tiny_assets["onnx_seed1"], tiny_assets["cal"], tiny_assets["gold"])
    proc = _check(cfg, here)
    assert proc.returncode == 1, proc.stderr[-2000:]
    # the first differing weight by name (BUILD's prepared model.onnx against the one prepared here)
    assert proc.stdout.startswith(f"differs: {here} (rk3588) vs here: ONNX model as prepared: initializer 'w1' "
                                  "differs, sha256 ")
    report = json.loads(_check(cfg, here, "--json").stdout)
    assert report["same"] is False and report["rebuilt"] is False  # named without running the toolkit
    assert report["model_fingerprint"]["build"] == _manifest(here)["model_fingerprint"]
    assert report["model_fingerprint"]["here"] != report["model_fingerprint"]["build"]
    assert [d["section"] for d in report["differences"]] == ["onnx"]


def test_a_changed_calibration_image_is_named(build_here, tiny_assets, tmp_path):
    import cv2
    from tiny_models import write_config

    _, here = build_here
    cal = tmp_path / "cal"
    shutil.copytree(tiny_assets["cal"], cal)
    fourth = sorted(cal.iterdir())[3]
    img = cv2.imread(str(fourth))
    img[0, 0] = 255 - img[0, 0]  # one pixel
    cv2.imwrite(str(fourth), img)
    cfg = write_config(tmp_path / "c.yaml", tiny_assets["onnx"], cal, tiny_assets["gold"])
    proc = _check(cfg, here, "--json")
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["differences"][0]["detail"].startswith(
        f"calibration image 4 differs: {fourth.name} vs {fourth.name} (fed tensor ")
    assert len(report["differences"]) == 1
    assert report["model_fingerprint"]["here"] != report["model_fingerprint"]["build"]
    # and convert agrees: the build of that calibration set has another model fingerprint
    built = run_rkdet("convert", "--config", str(cfg), "--out", str(tmp_path / "out"), "--json")
    assert built.returncode == 0, built.stderr[-2000:]
    other = _manifest(Path(json.loads(built.stdout)["builds"][0]["folder"]))
    assert other["model_fingerprint"] == report["model_fingerprint"]["here"]


def test_other_golden_inputs_are_the_same_model_but_another_build(build_here, tiny_assets, tmp_path):
    import cv2
    from tiny_models import write_config

    _, here = build_here
    gold = tmp_path / "gold"
    shutil.copytree(tiny_assets["gold"], gold)
    first = sorted(gold.iterdir())[0]
    img = cv2.imread(str(first))
    img[1, 1] = 255 - img[1, 1]
    cv2.imwrite(str(first), img)
    cfg = write_config(tmp_path / "g.yaml", tiny_assets["onnx"], tiny_assets["cal"], gold)
    proc = _check(cfg, here, "--json")
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["rebuilt"] is True and report["same_model"] is True
    assert report["differences"][0] == {"section": "golden", "detail": f"golden input 1 differs: {first.name} vs {first.name}"}
    assert report["build_fingerprint"]["here"] != report["build_fingerprint"]["build"]
    text = _check(cfg, here)
    assert "the model itself is the same" in text.stdout.splitlines()[0]


def test_a_changed_toolkit_option_is_named(build_here, tiny_assets, tmp_path):
    from tiny_models import write_config

    _, here = build_here
    cfg = write_config(tmp_path / "o.yaml", tiny_assets["onnx"], tiny_assets["cal"], tiny_assets["gold"],
                       quantize={"dataset": str(tiny_assets["cal"]), "algorithm": "mmse"})
    proc = _check(cfg, here)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "vs here: toolkit option quantized_algorithm: normal vs mmse" in proc.stdout.splitlines()[0]  # no repr quotes


def test_another_rknn_for_the_same_inputs_is_named_by_section(build_here, tmp_path):
    """A build whose .rknn differs although its inputs are the same (e.g. another toolkit binary of the
    same version): the rebuild here finds the first stable section that differs."""
    from rkdet.convert.identity import build_fingerprint
    from rkdet.convert.rknn_file import read_rknn

    cfg, here = build_here
    theirs = tmp_path / "theirs"
    shutil.copytree(here, theirs)
    rknn = theirs / "model.rknn"
    w1 = next(s for s in read_rknn(rknn).sections if s.name.endswith(":w1"))
    data = bytearray(rknn.read_bytes())
    data[w1.offset + 5] ^= 0x01
    rknn.write_bytes(bytes(data))
    doc = _manifest(theirs)  # their manifest describes their file, as a real build's would
    doc["rknn"]["content_fingerprint"] = read_rknn(rknn).content_fingerprint
    gold = [[r["file"].rsplit(".", 1)[0], r["tensor"]] for r in doc["inputs"]["golden"]]
    doc["fingerprint"] = build_fingerprint(doc["model_fingerprint"], gold, doc["rknn"]["content_fingerprint"],
                                           doc["golden_outputs"]["simulator"])
    (theirs / "manifest.json").write_text(json.dumps(doc))
    proc = _check(cfg, theirs, "--json")
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["rebuilt"] is True
    assert report["differences"][0]["section"] == ".rknn"
    assert report["differences"][0]["detail"].startswith(f".rknn section {w1.name} differs")
    assert report["model_fingerprint"]["here"] == report["model_fingerprint"]["build"]


@pytest.mark.parametrize("damage", ["missing", "no-manifest", "old-schema", "edited-identity", "replaced-rknn"])
def test_a_bad_build_folder_is_one_line(build_here, tmp_path, damage):
    cfg, here = build_here
    bad = tmp_path / "bad"
    if damage != "missing":
        shutil.copytree(here, bad)
    doc = _manifest(here)
    if damage == "no-manifest":
        (bad / "manifest.json").unlink()
    elif damage == "old-schema":
        (bad / "manifest.json").write_text(json.dumps({**doc, "schema": "rkdet.manifest/1"}))
    elif damage == "edited-identity":
        doc["model_identity"]["options"]["config"]["quantized_algorithm"] = "mmse"
        (bad / "manifest.json").write_text(json.dumps(doc))
    elif damage == "replaced-rknn":
        data = bytearray((bad / "model.rknn").read_bytes())
        from rkdet.convert.rknn_file import read_rknn

        w1 = next(s for s in read_rknn(bad / "model.rknn").sections if s.name.endswith(":w1"))
        data[w1.offset] ^= 0xFF
        (bad / "model.rknn").write_bytes(bytes(data))
    proc = _check(cfg, bad)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rkdet: ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(bad) in lines[0]
    expected = {"missing": "not a build folder", "no-manifest": "manifest.json: missing",
                "old-schema": "schema 'rkdet.manifest/1'", "edited-identity": "not the hash of its model_identity",
                "replaced-rknn": "not the model its manifest.json records"}[damage]
    assert expected in lines[0]


def test_check_against_refuses_build_flags(build_here):
    cfg, here = build_here
    proc = _check(cfg, here, "--verify")
    assert proc.returncode == 2 and "--check-against rebuilds BUILD's own platform" in proc.stderr
